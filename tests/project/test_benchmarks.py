"""The benchmarks keep working: their code paths run on toy sizes. No figure is asserted on.

Times are never checked here (the suite stays deterministic); what is checked is that a run
reports every key the issue names, that the histories are what they claim to be (deterministic,
signed so the simulator verifies them), and that the baseline does the compiler's job.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import unmarked

from benchmarks import (
    POLICIES,
    REQUIRED_KEYS,
    CacheConfig,
    History,
    cache_sessions,
    full_recompile,
    mean_message_tokens,
    quiet_logging,
    told_state,
)
from benchmarks.__main__ import main
from benchmarks._shed import shedding
from context_manager import SQLiteStore, Window
from context_manager.simulator import Simulator

SEED = 11
WINDOW_MESSAGES = 40


def _history(path: Path, messages: int, *, seed: int = SEED) -> History:
    window = Window(max_tokens=int(mean_message_tokens(seed) * WINDOW_MESSAGES))
    history = History(SQLiteStore(path), "ada", window, seed=seed)
    history.grow_to(messages)
    return history


def test_a_smoke_run_writes_every_figure_the_issue_names(tmp_path: Path) -> None:
    out = tmp_path / "out.json"

    assert main(["--smoke", "--json", str(out)]) in (0, 1)

    report = json.loads(out.read_text())
    assert set(REQUIRED_KEYS) <= set(report)
    assert list(report["compile_steady"]) == list(report["baseline_full"]) == ["40", "80", "160"]
    assert set(report["ratios"]) == {
        "flatness",
        "vs_full",
        "tool_loop",
        "shed_vs_jump",
        "cache_vs_naive",
        "full_window_vs_sdk",
        "reopen_vs_sdk",
        "steady_vs_sdk",
        "cache_bytes_per_agent",
        "evicted_compile_vs_sdk",
        "reopen_fresh_vs_sdk",
        "reopen_cold_vs_sdk",
        "evicted_cold_vs_sdk",
        "wake_vs_sdk",
        "rss_vs_limit",
        "reopen_flatness_full",
        "reopen_flatness_full_seconds",
        "append_kept",
        "telemetry_overhead",
    }
    assert report["ratios"]["append_kept"] == 1.0
    assert report["telemetry_overhead"] == report["ratios"]["telemetry_overhead"] > 0
    assert report["details"]["telemetry"]["spans_exported"] > 0  # the traced side was traced
    side = report["side_by_side"]
    assert side["evicted_compile_cold"] > 0  # the same compile with render snapshots off
    assert set(side["reopen_cold"]) == set(side["reopen"]) == {"40", "80", "160"}
    fresh = side["fresh"]  # each figure from its own child process, beside the SDK there
    assert set(fresh["reopen_fresh"]) == {"80", "160"}
    for figure in (*fresh["reopen_fresh"].values(), fresh["wake"], fresh["evicted_cold"]):
        assert figure["seconds"] > 0
        assert figure["sdk_create"] > 0
    assert fresh["rss"]["agents"] == 5
    reopens, ratios = fresh["reopen_fresh"], report["ratios"]
    # over the request's own create(): the two full windows' requests differ in size
    assert ratios["reopen_flatness_full"] == reopens["160"]["ratio"] / reopens["80"]["ratio"]
    seconds = reopens["160"]["seconds"] / reopens["80"]["seconds"]
    assert ratios["reopen_flatness_full_seconds"] == seconds
    assert report["ratios"]["rss_vs_limit"] > 0
    assert report["append_on_head_lines"] == 0
    assert 0.0 <= report["shed_newest_50"] <= 1.0
    assert 0 < report["cache_read_share"] <= 1
    assert report["cache_read_share_none"] == 0
    assert {"platform", "python", "cpu_count", "memory_gib"} <= set(report["machine"])
    assert report["told_state_entries"] <= report["told_state_cap"]


def test_the_baseline_sends_what_the_compiler_sends_breakpoints_aside(tmp_path: Path) -> None:
    history = _history(tmp_path / "h.db", 150)
    window = history.strategy.max_tokens

    compiled = unmarked(history.cm.compile(history.head).request["messages"])
    rebuilt = full_recompile(history.cm, history.head, window_tokens=window)

    assert rebuilt == compiled


def test_every_thinking_block_a_compile_keeps_verifies_at_the_simulator(tmp_path: Path) -> None:
    history = _history(tmp_path / "h.db", 150)

    request = history.cm.compile(history.head).request
    checks = Simulator().verify(request)

    assert checks
    assert [check.reason for check in checks] == [None] * len(checks)


def test_the_same_seed_stores_the_same_history(tmp_path: Path) -> None:
    one = _history(tmp_path / "one.db", 60)
    two = _history(tmp_path / "two.db", 60)

    assert [m.content for m in one.cm.messages()] == [m.content for m in two.cm.messages()]


def test_told_state_fills_up_to_the_cap_and_never_past_it() -> None:
    quiet_logging()  # the teller's alerts are warnings, one per told drop

    report = told_state(5_000, seed=SEED, cap=50)

    assert report.events == 5_000
    held = [entries for _, entries, _ in report.samples]
    assert max(held) == report.cap == 50
    assert report.entries <= report.cap


def test_shedding_keeps_more_thinking_than_jumping_and_all_of_the_newest_replies() -> None:
    """Issue 15's targets, on a small history (the full run measures 10,000 messages)."""
    figures = shedding(1_000)

    assert figures["shed_newest_50"] == 1.0
    assert figures["shed_kept_blocks"] >= 3 * figures["jump_kept_blocks"]
    assert figures["shed_tokens"] <= figures["budget_tokens"]


def test_the_cache_session_is_one_conversation_and_the_compiler_reads_at_least_the_naive_share(
    tmp_path: Path,
) -> None:
    quiet_logging()

    sessions = cache_sessions(CacheConfig.tiny(), tmp_path)

    assert set(sessions) == set(POLICIES)
    assert len({(s.calls, s.total) for s in sessions.values()}) == 1
    assert sessions["none"].read == 0
    assert sessions["compiler"].read >= sessions["naive"].read > 0
