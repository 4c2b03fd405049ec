"""The report: the JSON figures CI tooling reads, the ratios and targets, and the printed table.

The top-level keys are a contract (issue 8): ``compile_steady``, ``baseline_full``,
``tool_loop_turn``, ``full_window_compile``, ``append_per_second``, ``reopen_seconds``,
``told_state_entries``, ``told_state_cap``, ``ratios`` and ``machine``; issue 15 adds
``shed_kept_blocks``, ``jump_kept_blocks``, ``shed_newest_50`` and ``ratios.shed_vs_jump``;
issue 18 adds ``sdk_create``, ``reopen_by_size``, ``cache_bytes_per_agent`` and the ratios
``full_window_vs_sdk``, ``reopen_vs_sdk``, ``steady_vs_sdk``, ``cache_bytes_per_agent`` and
``evicted_compile_vs_sdk``; issue 36 replaces ``reopen_flatness`` by ``reopen_flatness_full`` and
adds ``reopen_fresh_vs_sdk``, ``reopen_cold_vs_sdk``, ``evicted_cold_vs_sdk``, ``wake_vs_sdk``
and ``rss_vs_limit`` (fresh-process figures, ``side_by_side.fresh``); ``reopen_flatness_full`` is
taken per request cost (each reopen over the SDK's ``create()`` of its request), beside the raw
``reopen_flatness_full_seconds`` (no target: the two windows' requests differ in size).
issue 16 adds ``append_on_kept_blocks``, ``append_off_kept_blocks``, ``append_on_head_lines``,
``append_off_head_lines`` and ``ratios.append_kept``; issue 32 adds ``telemetry_overhead``
(steady compile with OpenTelemetry tracing over without, also in ``ratios``). Seconds throughout.
"""

from __future__ import annotations

import os
import platform
import sqlite3
from collections.abc import Mapping
from typing import Any

from ._cache import SessionUsage
from ._compaction import compaction_rows
from ._telemetry import TELEMETRY_MAX
from ._told import ToldReport

FLATNESS_MAX = 1.5
"""Steady compile at the largest history over the smallest: compile cost must not grow."""

VS_FULL_MIN = 50.0
"""Full-recompile baseline over steady compile at the largest history."""

SHED_VS_JUMP_MIN = 3.0
"""Thinking blocks kept by shedding over those kept by the jump-only window (issue 15)."""

TOOL_LOOP_MAX = 2.0
"""A tool-loop turn over its calls' worth of steady compiles."""

CACHE_READ_SHARE_MIN = 0.85
"""Share of a resident session's input tokens read from the prompt cache (issue 19)."""

CACHE_VS_NAIVE_MIN = 1.0
"""The compiler's cache read share over the naive policy's (one breakpoint on the newest
message): never below it."""
SDK_LIMITS: dict[str, float] = {
    "full_window_vs_sdk": 0.75,
    "reopen_vs_sdk": 1.5,
    "steady_vs_sdk": 0.02,
    "cache_bytes_per_agent": 2.0,
    "evicted_compile_vs_sdk": 1.0,
    "reopen_fresh_vs_sdk": 1.0,
    "reopen_cold_vs_sdk": 1.0,
    "evicted_cold_vs_sdk": 1.0,
    "wake_vs_sdk": 1.0,
    "rss_vs_limit": 2.0,
    "reopen_flatness_full": 1.5,
}
"""Issue 18's upper bounds, as issue 36 set them: each against the SDK's own ``create()`` of the
same request (at the tool-loop size), resident memory per agent over the request's wire bytes;
issue 36's fresh-process figures (``_fresh``): reopen with and without a usable snapshot, an
evicted agent's compile without one, a wake, each over the SDK's ``create()`` in the same child,
RSS growth of 100 active agents over the configured limit, and fresh-process reopen at the
largest history over the tool-loop size (both full windows, each over its own request's
``create()``: a full window's request is between the window's target and cap)."""

REQUIRED_KEYS = (
    "compile_steady",
    "baseline_full",
    "tool_loop_turn",
    "full_window_compile",
    "append_per_second",
    "reopen_seconds",
    "told_state_entries",
    "told_state_cap",
    "shed_kept_blocks",
    "jump_kept_blocks",
    "shed_newest_50",
    "cache_read_share",
    "cache_read_share_naive",
    "cache_read_share_none",
    "sdk_create",
    "reopen_by_size",
    "cache_bytes_per_agent",
    "append_on_kept_blocks",
    "append_off_kept_blocks",
    "append_on_head_lines",
    "append_off_head_lines",
    "telemetry_overhead",
    "compaction_kept_share",
    "kept_vs_fold",
    "cache_read_share_compact",
    "input_tokens_per_turn",
    "ratios",
    "machine",
)
"""Keys every report has (``targets``, ``worst_case``, ``told_state``, ``details`` and
``config`` are there too, for readers)."""


def machine() -> dict[str, Any]:
    """What the run ran on: platform, Python, CPUs, memory, SQLite."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf names (Windows, some BSDs)
        memory = 0
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _processor(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cpu_count": os.cpu_count() or 0,
        "cpus_usable": usable,
        "memory_gib": round(memory / 2**30, 1),
        "sqlite": sqlite3.sqlite_version,
    }


def _processor() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build_report(
    *,
    config: Mapping[str, Any],
    steady: Mapping[int, float],
    baseline: Mapping[int, float],
    tool_loop: float,
    tool_calls: int,
    tool_loop_size: int,
    head_change: float,
    fold: float,
    appends_per_second: float,
    reopen_seconds: float,
    told: ToldReport,
    details: Mapping[str, Any],
    shed: Mapping[str, Any],
    cache: Mapping[str, SessionUsage],
    side_by_side: Mapping[str, Any],
    append: Mapping[str, Any],
    telemetry: Mapping[str, Any],
) -> dict[str, Any]:
    """Assemble the report; ratios are taken on the smallest and largest sizes measured.

    ``cache`` holds the prompt-cache session per policy (``compiler``, ``naive``, ``none``).
    ``side_by_side``: the figures measured beside the SDK's ``create()`` (``_run`` documents
    them): ``sdk_create``, ``steady``, ``head_change``, ``evicted_compile``, ``reopen`` by size,
    ``resident`` (memory), ``size`` and ``request_body_bytes``.
    """
    small, large = min(steady), max(steady)
    sdk = side_by_side["sdk_create"]
    reopens = side_by_side["reopen"]
    resident = side_by_side["resident"]
    fresh = side_by_side["fresh"]
    at, fresh_reopens = str(side_by_side["size"]), fresh["reopen_fresh"]
    ratios = {
        "flatness": steady[large] / steady[small],
        "vs_full": baseline[large] / steady[large],
        "tool_loop": tool_loop / (tool_calls * steady[tool_loop_size]),
        "shed_vs_jump": float(shed["shed_vs_jump"]),
        "cache_vs_naive": _over(cache["compiler"].read_share, cache["naive"].read_share),
        "full_window_vs_sdk": side_by_side["head_change"] / sdk,
        "reopen_vs_sdk": reopens[str(side_by_side["size"])] / sdk,
        "steady_vs_sdk": side_by_side["steady"] / sdk,
        "cache_bytes_per_agent": float(resident["cache_bytes_per_agent"]),
        "evicted_compile_vs_sdk": side_by_side["evicted_compile"] / sdk,
        "reopen_fresh_vs_sdk": fresh_reopens[at]["ratio"],
        "reopen_cold_vs_sdk": fresh["reopen_cold"]["ratio"],
        "evicted_cold_vs_sdk": fresh["evicted_cold"]["ratio"],
        "wake_vs_sdk": fresh["wake"]["ratio"],
        "rss_vs_limit": fresh["rss"]["growth"] / fresh["rss"]["limit"],
        # per request cost: the two full windows differ in size (a window grows from its
        # target to its cap between jumps), so each reopen is taken over the SDK's create() of
        # its own request, in its own child; the raw seconds ratio follows, without a target
        "reopen_flatness_full": _over(
            fresh_reopens[str(large)]["ratio"], fresh_reopens[at]["ratio"]
        ),
        "reopen_flatness_full_seconds": _over(
            fresh_reopens[str(large)]["seconds"], fresh_reopens[at]["seconds"]
        ),
        "append_kept": float(append["append_kept"]),
        "telemetry_overhead": float(telemetry["telemetry_overhead"]),
    }
    share = cache["compiler"].read_share
    targets = {
        "flatness": {"limit": f"<= {FLATNESS_MAX}", "met": ratios["flatness"] <= FLATNESS_MAX},
        "vs_full": {"limit": f">= {VS_FULL_MIN:g}", "met": ratios["vs_full"] >= VS_FULL_MIN},
        "tool_loop": {"limit": f"<= {TOOL_LOOP_MAX}", "met": ratios["tool_loop"] <= TOOL_LOOP_MAX},
        "told_state": {"limit": f"<= {told.cap:,}", "met": told.entries <= told.cap},
        "shed_vs_jump": {
            "limit": f">= {SHED_VS_JUMP_MIN:g}",
            "met": ratios["shed_vs_jump"] >= SHED_VS_JUMP_MIN,
        },
        "shed_newest_50": {"limit": "== 1.0", "met": shed["shed_newest_50"] == 1.0},
        "cache_vs_naive": {
            "limit": f">= {CACHE_VS_NAIVE_MIN:g}",
            "met": ratios["cache_vs_naive"] >= CACHE_VS_NAIVE_MIN,
        },
        "cache_read_share": {
            "limit": f">= {CACHE_READ_SHARE_MIN:g}",
            "met": share >= CACHE_READ_SHARE_MIN,
        },
        **{
            name: {"limit": f"<= {limit:g}", "met": ratios[name] <= limit}
            for name, limit in SDK_LIMITS.items()
        },
        "append_kept": {"limit": "== 1.0", "met": ratios["append_kept"] == 1.0},
        "append_on_head_lines": {"limit": "== 0", "met": append["append_on_head_lines"] == 0},
        "telemetry_overhead": {
            "limit": f"<= {TELEMETRY_MAX:g}",
            "met": ratios["telemetry_overhead"] <= TELEMETRY_MAX,
        },
    }
    return {
        "compile_steady": {str(size): seconds for size, seconds in sorted(steady.items())},
        "baseline_full": {str(size): seconds for size, seconds in sorted(baseline.items())},
        "tool_loop_turn": tool_loop,
        "full_window_compile": max(head_change, fold),
        "append_per_second": appends_per_second,
        "reopen_seconds": reopen_seconds,
        "told_state_entries": told.entries,
        "told_state_cap": told.cap,
        "shed_kept_blocks": shed["shed_kept_blocks"],
        "jump_kept_blocks": shed["jump_kept_blocks"],
        "shed_newest_50": shed["shed_newest_50"],
        "cache_read_share": share,
        "cache_read_share_naive": cache["naive"].read_share,
        "cache_read_share_none": cache["none"].read_share,
        "sdk_create": sdk,
        "reopen_by_size": dict(reopens),
        "cache_bytes_per_agent": ratios["cache_bytes_per_agent"],
        "append_on_kept_blocks": append["append_on_kept_blocks"],
        "append_off_kept_blocks": append["append_off_kept_blocks"],
        "append_on_head_lines": append["append_on_head_lines"],
        "append_off_head_lines": append["append_off_head_lines"],
        "telemetry_overhead": ratios["telemetry_overhead"],
        "ratios": ratios,
        "targets": targets,
        "worst_case": {"head_change": head_change, "fold": fold},
        "side_by_side": dict(side_by_side),
        "told_state": {
            "events": told.events,
            "seconds": told.seconds,
            "lines": told.lines,
            "samples": [
                {"events": events, "entries": entries, "peak_memory_mib": round(mib, 1)}
                for events, entries, mib in told.samples
            ],
        },
        "cache_session": {
            policy: {
                "calls": usage.calls,
                "input_tokens": usage.total,
                "cache_read_input_tokens": usage.read,
                "cache_creation_input_tokens": usage.written,
                "uncached_input_tokens": usage.uncached,
                "fan_out_calls": usage.fan_outs,
            }
            for policy, usage in cache.items()
        },
        "details": {
            **details,
            "shedding": dict(shed),
            "append": dict(append),
            "telemetry": dict(telemetry),
        },
        "config": dict(config),
        "machine": machine(),
    }


def _over(ours: float, theirs: float) -> float:
    """``ours / theirs``; 1.0 when both are 0, infinite when only ``theirs`` is."""
    if theirs:
        return ours / theirs
    return 1.0 if not ours else float("inf")


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.0f} µs"


def table(report: Mapping[str, Any]) -> str:
    """The report as a Markdown table, ratios and targets after it."""
    rows = [("History (stored messages)", "Steady compile", "Full recompile (baseline)")]
    for size, seconds in report["compile_steady"].items():
        rows.append((f"{int(size):,}", _seconds(seconds), _seconds(report["baseline_full"][size])))
    lines = [_row(rows[0]), "|---:|---:|---:|", *(_row(r) for r in rows[1:]), ""]
    calls = report["config"]["tool_calls"]
    at = report["config"]["tool_loop_size"]
    worst = report["worst_case"]
    figures = [
        (
            f"Tool-loop turn, {calls} calls at {at:,} messages (compile total)",
            _seconds(report["tool_loop_turn"]),
        ),
        ("Full-window compile: head change", _seconds(worst["head_change"])),
        ("Full-window compile: fold", _seconds(worst["fold"])),
        ("Durable appends per second (one commit each)", f"{report['append_per_second']:,.0f}"),
        (
            f"Reopen at {max(map(int, report['compile_steady'])):,} messages (to first request)",
            _seconds(report["reopen_seconds"]),
        ),
        *(
            (f"Reopen at {int(size):,} messages (to first request)", _seconds(seconds))
            for size, seconds in report["reopen_by_size"].items()
            if int(size) != max(map(int, report["compile_steady"]))
        ),
        *_side_by_side_rows(report["side_by_side"]),
        (
            f"Told state after {report['told_state']['events']:,} teller events",
            f"{report['told_state_entries']:,} entries (cap {report['told_state_cap']:,})",
        ),
    ]
    peak = report["told_state"]["samples"]
    if peak:
        figures.append(
            (
                "Teller process peak memory, at 10% / 50% / all events",
                " → ".join(f"{s['peak_memory_mib']:.0f}" for s in peak) + " MiB",
            )
        )
    lines += [_row(("Figure", "Value")), "|---|---:|", *(_row(f) for f in figures), ""]
    lines += [_row(("Ratio", "Measured", "Target", "Met")), "|---|---:|---|---|"]
    for name, value in report["ratios"].items():
        target = report["targets"].get(name)
        limit = target["limit"] if target else "(none)"
        met = "" if target is None else "yes" if target["met"] else "**no**"
        lines.append(_row((f"`{name}`", f"{value:,.2f}", limit, met)))
    newest = report["targets"]["shed_newest_50"]
    lines.append(
        _row(
            (
                "`shed_newest_50`",
                f"{report['shed_newest_50']:.2f}",
                newest["limit"],
                "yes" if newest["met"] else "**no**",
            )
        )
    )
    lines.append(
        _row(
            (
                "cache read share (breakpoints: compiler / naive / none)",
                f"{report['cache_read_share']:.1%} / {report['cache_read_share_naive']:.1%} / "
                f"{report['cache_read_share_none']:.1%}",
                report["targets"]["cache_read_share"]["limit"],
                "yes" if report["targets"]["cache_read_share"]["met"] else "**no**",
            )
        )
    )
    lines.append(
        _row(
            (
                "`append_on_head_lines` (off run)",
                f"{report['append_on_head_lines']} ({report['append_off_head_lines']})",
                report["targets"]["append_on_head_lines"]["limit"],
                "yes" if report["targets"]["append_on_head_lines"]["met"] else "**no**",
            )
        )
    )
    lines += [_row(row) for row in compaction_rows(report)]
    told = report["targets"]["told_state"]
    lines.append(
        _row(
            (
                "told state",
                f"{report['told_state_entries']:,}",
                told["limit"],
                "yes" if told["met"] else "**no**",
            )
        )
    )
    return "\n".join(lines)


def _side_by_side_rows(side: Mapping[str, Any]) -> list[tuple[str, str]]:
    at = f"at {side['size']:,} messages"
    resident = side["resident"]
    return [
        (
            f"SDK `beta.messages.create()` of the same request {at} "
            f"({side['request_body_bytes'] / 2**20:.2f} MiB body, mock transport)",
            _seconds(side["sdk_create"]),
        ),
        (f"Steady compile {at}", _seconds(side["steady"])),
        (f"Full-window compile: head change {at}", _seconds(side["head_change"])),
        (
            f"First compile after the cached render was dropped {at}",
            _seconds(side["evicted_compile"]),
        ),
        (
            f"The same, render snapshots off (rendered from the stored messages) {at}",
            _seconds(side.get("evicted_compile_cold", 0.0)),
        ),
        *(
            (
                f"Reopen at {int(size):,} messages, render snapshots off",
                _seconds(seconds),
            )
            for size, seconds in side.get("reopen_cold", {}).items()
        ),
        (
            f"Memory per resident agent {at} ({resident['agents']} agents, RSS growth)",
            f"{resident['rss_growth_per_agent'] / 2**20:.2f} MiB",
        ),
        *_fresh_rows(side["fresh"], at),
    ]


def _fresh_rows(fresh: Mapping[str, Any], at: str) -> list[tuple[str, str]]:
    """The fresh-process figures (``_fresh``), each with the SDK's ``create()`` in its child."""

    def beside(figure: Mapping[str, float]) -> str:
        return f"{_seconds(figure['seconds'])} (SDK {_seconds(figure['sdk_create'])})"

    rss = fresh["rss"]
    return [
        *(
            (f"Fresh process: reopen at {int(size):,} messages, snapshot present", beside(f))
            for size, f in fresh["reopen_fresh"].items()
        ),
        (f"Fresh process: reopen {at}, no usable snapshot", beside(fresh["reopen_cold"])),
        (
            f"Fresh process: evicted agent's compile {at}, no usable snapshot",
            beside(fresh["evicted_cold"]),
        ),
        (f"Fresh process: wake of an evicted agent {at}", beside(fresh["wake"])),
        (
            f"Fresh process: RSS growth of {rss['agents']} active agents {at} under a "
            f"{rss['limit'] / 2**20:.0f} MiB limit",
            f"{rss['growth'] / 2**20:.1f} MiB",
        ),
    ]


def _row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"


def describe_machine(info: Mapping[str, Any]) -> str:
    """One line naming the machine (for the table's caption)."""
    return (
        f"{info['processor']}, {info['cpus_usable']} usable of {info['cpu_count']} CPUs, "
        f"{info['memory_gib']} GiB, {info['platform']}, {info['python']}, "
        f"SQLite {info['sqlite']}"
    )


def all_met(report: Mapping[str, Any]) -> bool:
    """True when every target was met."""
    return all(target["met"] for target in report["targets"].values())
