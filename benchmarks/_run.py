"""One run: grow the history once (snapshotting each size), then measure with every size open.

The told-state run goes on in a child process meanwhile; steady compiles are interleaved across
sizes so a change in the machine's load falls on every size, and both sides of a ratio, alike.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from context_manager import Passthrough, Window, set_render_snapshots

from ._append import append_figures
from ._cache import CacheConfig, cache_sessions
from ._compaction import SessionConfig, compaction_figures, with_compaction
from ._editing import EditingConfig, add_editing, editing_figures
from ._fresh import RSS_AGENTS, fresh_process_figures
from ._history import History, mean_message_tokens
from ._places import DatabasePlace, FilePlace, Place
from ._quiet import quiet_logging
from ._report import build_report
from ._resident import resident_memory
from ._scenarios import (
    baseline_compile,
    evicted_compile,
    fold_compile,
    head_change_compile,
    steady_and_tool_loop,
    window_size,
)
from ._sdk import sdk_create
from ._shed import shedding
from ._storage import append_throughput, reopen
from ._telemetry import telemetry_overhead
from ._timing import clock, median, spread, timed
from ._told import ToldReport, told_state

AGENT = "ada"
FOLD_AGENT = "folder"

FOLD_KEEP_SHARE = 4
"""The fold scenario keeps at most a quarter of the window as its tail."""

PROBE_SEED_SALT = 7_919
"""Probes continue a snapshot with their own (seeded) words, apart from the generator's."""


@contextlib.contextmanager
def snapshots_off() -> Iterator[None]:
    """Render snapshots off meanwhile: compiles render from the stored messages."""
    set_render_snapshots(False)
    try:
        yield
    finally:
        set_render_snapshots(True)


@attrs.frozen
class Config:
    """What one run measures, and how many times.

    Attributes:
        sizes: stored-history sizes the steady compile and the baseline are measured at.
        window_messages: the ``Window`` holds about this many stored messages.
        repeats: steady compiles per size.
        worst_repeats: repetitions of each worst case (a whole window re-rendered each).
        baseline_repeats: repetitions of the full-recompile baseline (O(history) each).
        loop_repeats: tool-loop turns.
        reopen_repeats: reopens of each history size.
        tool_calls: model calls per tool-loop turn.
        tool_loop_size: the history size (one of ``sizes``) the tool loop runs at; the SDK's
            own ``create()`` and the ratios against it (issue 18) are measured there too.
        sdk_repeats: ``client.beta.messages.create`` calls timed on the same request.
        appends: durable appends timed for the throughput figure.
        teller_events: events fed to the long-lived agent's teller.
        seed: fixes every history and event stream.
        quick: a ``--quick`` run (recorded in the report).
        teller_in_child: run the told-state scenario in a child process, beside generation.
        shed_messages: the thinking-heavy history the shedding scenario grows.
        cache_session: the prompt-cache session (issue 19), run once per breakpoint policy.
        editing_session: the tool-heavy session, with and without context editing (issue 30).
        compaction_session: the resident session kept inside its window three ways (issue 29).
    """

    sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    window_messages: int = 2_000
    repeats: int = 201
    worst_repeats: int = 15
    baseline_repeats: int = 5
    loop_repeats: int = 21
    reopen_repeats: int = 7
    tool_calls: int = 50
    tool_loop_size: int = 10_000
    sdk_repeats: int = 21
    appends: int = 1_000
    teller_events: int = 1_000_000
    seed: int = 20_260_801
    quick: bool = False
    teller_in_child: bool = True
    shed_messages: int = 10_000
    fresh_repeats: int = 5
    """Child processes per fresh-process figure (each one measurement)."""
    rss_agents: int = RSS_AGENTS
    cache_session: CacheConfig = attrs.field(factory=CacheConfig)
    editing_session: EditingConfig = attrs.field(factory=EditingConfig)
    compaction_session: SessionConfig = attrs.field(factory=SessionConfig)

    def __attrs_post_init__(self) -> None:
        if self.tool_loop_size not in self.sizes:
            raise ValueError(
                f"tool_loop_size {self.tool_loop_size} must be one of the sizes {self.sizes}"
            )

    @classmethod
    def full(cls) -> Config:
        """The full run (README's table)."""
        return cls()

    @classmethod
    def quick_run(cls) -> Config:
        """``--quick``: every size, fewer repetitions; under three minutes on two cores."""
        return cls(
            repeats=61,
            worst_repeats=7,
            baseline_repeats=3,
            loop_repeats=9,
            reopen_repeats=3,
            sdk_repeats=9,
            fresh_repeats=3,
            appends=200,
            quick=True,
            cache_session=CacheConfig(turns=100, tool_changes=(30, 70), fold_at=50),
            editing_session=EditingConfig.quick(),
            compaction_session=SessionConfig.quick(),
        )

    @classmethod
    def tiny(cls) -> Config:
        """Every code path on toy sizes, in seconds (the smoke test's run; figures meaningless)."""
        return cls(
            sizes=(40, 80, 160),
            window_messages=30,
            repeats=3,
            worst_repeats=2,
            baseline_repeats=1,
            loop_repeats=2,
            reopen_repeats=1,
            tool_calls=4,
            tool_loop_size=80,
            sdk_repeats=2,
            shed_messages=400,
            fresh_repeats=1,
            rss_agents=5,
            appends=3,
            teller_events=3_000,
            quick=True,
            cache_session=CacheConfig.tiny(),
            editing_session=EditingConfig.tiny(),
            compaction_session=SessionConfig.tiny(),
        )


Progress = Callable[[str], None]


def stderr_progress() -> Progress:
    """Progress lines on stderr, each with the seconds since this was called."""
    started = clock()

    def say(line: str) -> None:
        print(f"[{clock() - started:6.1f} s] {line}", file=sys.stderr, flush=True)

    return say


def _told_quietly(events: int, seed: int) -> ToldReport:
    quiet_logging()
    return told_state(events, seed=seed)


def _snapshot(history: History, place: Place, name: str) -> Place:
    """Copy the store as it is now; ``history`` goes on with the store reopened."""
    history.store.close()
    copy = place.snapshot(name)
    history.attach(place.open())
    return copy


def run(
    config: Config,
    workdir: str | os.PathLike[str],
    *,
    progress: Progress | None = None,
    postgres: str | None = None,
) -> dict[str, Any]:
    """Run every scenario of ``config`` with its stores in ``workdir``; returns the report.

    ``postgres``: a DSN whose role may create databases; the histories then live in PostgreSQL
    databases made (and dropped) by the run instead of SQLite files in ``workdir``. The report's
    keys are described in ``build_report``.
    """
    work = Path(workdir)
    place: Place = (
        FilePlace(work / "history.db") if postgres is None else DatabasePlace.create(postgres)
    )
    try:
        report = _run(config, place, progress, work)
    finally:
        place.cleanup()
    report["store"] = "sqlite" if postgres is None else "postgres"
    return report


def _run(config: Config, place: Place, progress: Progress | None, work: Path) -> dict[str, Any]:
    say = progress or stderr_progress()
    told_job: concurrent.futures.Future[ToldReport] | None = None
    pool: concurrent.futures.ProcessPoolExecutor | None = None
    if config.teller_in_child:
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn")
        )
        told_job = pool.submit(_told_quietly, config.teller_events, config.seed)
    try:
        mean_tokens = mean_message_tokens(config.seed)
        window_tokens = int(mean_tokens * config.window_messages)
        strategy = Window(max_tokens=window_tokens)
        history = History(place.open(), AGENT, strategy, seed=config.seed)
        largest = max(config.sizes)
        generation: dict[str, float] = {}
        stored: dict[str, int] = {}
        copies: dict[int, Place] = {}
        for size in sorted(config.sizes):
            say(f"history: growing to {size:,} messages")
            generation[str(size)], _ = timed(functools.partial(history.grow_to, size))
            stored[str(size)] = history.count
            if size != largest:
                copies[size] = _snapshot(history, place, f"history-{size}")
        folder = History(history.store, FOLD_AGENT, Passthrough(), seed=config.seed + 1)
        folder.grow_to(config.window_messages)
        if told_job is not None:
            say("told state: waiting for the teller run")
            told = told_job.result()
        else:
            say(f"told state: {config.teller_events:,} teller events")
            told = told_state(config.teller_events, seed=config.seed)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    probes = {largest: history}
    for size in config.sizes:
        if size != largest:
            probes[size] = History(
                copies[size].open(),
                AGENT,
                strategy,
                seed=config.seed + PROBE_SEED_SALT + size,
                count=stored[str(size)],
            )
    windows = {str(size): window_size(probe) for size, probe in sorted(probes.items())}
    say(
        f"steady compiles at {', '.join(f'{s:,}' for s in sorted(probes))}, interleaved; "
        f"tool-loop turns of {config.tool_calls} calls at {config.tool_loop_size:,}"
    )
    steady, turns = steady_and_tool_loop(
        probes,
        config.repeats,
        loop_size=config.tool_loop_size,
        loop_repeats=config.loop_repeats,
        calls=config.tool_calls,
    )
    baseline: dict[int, float] = {}
    for size, probe in sorted(probes.items()):
        say(f"full-recompile baseline at {size:,}")
        baseline[size] = median(
            baseline_compile(probe, config.baseline_repeats, window_tokens=window_tokens)
        )
    say("worst cases: a head change, a fold")
    head_change = median(head_change_compile(history, config.worst_repeats))
    fold = median(
        fold_compile(folder, config.worst_repeats, keep_tokens=window_tokens // FOLD_KEEP_SHARE)
    )
    at = config.tool_loop_size
    say(f"side by side at {at:,}: the SDK's create(), a head change, a compile after eviction")
    request = probes[at].cm.compile(probes[at].head, dry_run=True).request
    sdk_samples, body_bytes = sdk_create(request, config.sdk_repeats)
    head_change_at = median(head_change_compile(probes[at], config.worst_repeats))
    evicted = median(evicted_compile(probes[at], config.worst_repeats))
    with snapshots_off():  # the same compile rendering the window from the stored messages
        evicted_cold = median(evicted_compile(probes[at], config.worst_repeats))
    say(f"telemetry: steady compiles at {at:,} with OpenTelemetry tracing on and off")
    telemetry = telemetry_overhead(probes[at], config.repeats)
    for probe in probes.values():
        probe.store.close()

    say(f"store: {config.appends:,} durable appends, reopen at {largest:,}")
    appends = append_throughput(place.open, config.appends)
    places = {size: copies.get(size, place) for size in config.sizes}
    reopens = {
        size: median(
            reopen(places[size].open, AGENT, strategy, history.head, config.reopen_repeats)
        )
        for size in sorted(config.sizes)
    }
    with snapshots_off():  # a restart with no usable snapshot (its first run, or a crash)
        reopens_cold = {
            size: median(
                reopen(places[size].open, AGENT, strategy, history.head, config.reopen_repeats)
            )
            for size in sorted(config.sizes)
        }
    reopened = reopens[largest]
    say(f"resident agents: memory of compiled windows at {at:,}, in a child process")
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as child:
        resident = child.submit(resident_memory, places[at], AGENT, strategy, history.head).result()
    say(f"fresh processes: reopen, wake and memory at {at:,} and reopen at {largest:,}")
    fresh = fresh_process_figures(
        places,
        AGENT,
        strategy,
        history.head,
        at=at,
        largest=largest,
        repeats=config.fresh_repeats,
        agents=config.rss_agents,
    )
    say(f"shedding: two {config.shed_messages:,}-message histories under a third of their tokens")
    shed = shedding(config.shed_messages)
    cache = cache_sessions(config.cache_session, work, say)
    say("append-only: a 200-turn tool-loop session with head changes, append on and off")
    appended = append_figures()
    say("context editing: a tool-heavy session, server clearing against a fold alone")
    editing = editing_figures(config.editing_session, work)
    session = config.compaction_session
    say(f"staying inside the window: a {session.turns}-turn session, Compact / Fold / Window")
    compaction = compaction_figures(session)
    report = build_report(
        shed=shed,
        append=appended,
        telemetry=telemetry,
        config=attrs.asdict(config),
        steady={size: median(samples) for size, samples in steady.items()},
        baseline=baseline,
        tool_loop=median(turns),
        tool_calls=config.tool_calls,
        tool_loop_size=config.tool_loop_size,
        head_change=head_change,
        fold=fold,
        appends_per_second=appends,
        reopen_seconds=reopened,
        told=told,
        cache=cache,
        side_by_side={
            "size": at,
            "sdk_create": median(sdk_samples),
            "request_body_bytes": body_bytes,
            "steady": median(steady[at]),
            "head_change": head_change_at,
            "evicted_compile": evicted,
            "evicted_compile_cold": evicted_cold,
            "reopen": {str(size): seconds for size, seconds in reopens.items()},
            "reopen_cold": {str(size): seconds for size, seconds in reopens_cold.items()},
            "resident": resident,
            "fresh": fresh,
        },
        details={
            "window_tokens": window_tokens,
            "window": windows,
            "stored_messages": stored,
            "generation_seconds": generation,
            "fold_window_messages": folder.count,
            "steady_spread": {str(k): spread(v) for k, v in steady.items()},
            "tool_loop_spread": spread(turns),
        },
    )
    return add_editing(with_compaction(report, compaction), editing)
