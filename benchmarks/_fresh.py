"""Reopen and wake in a fresh process, beside the SDK's ``create()`` in the same process (issue 36).

Each measurement runs in its own child process, one task per child, started with ``spawn``: a
new interpreter that imports the library and the SDK (about two seconds, before the clock starts)
and has run nothing of them, as a restarted host is. Nothing a previous measurement cached,
computed on first use or allocated is there. A child forked from a process that had imported
them (a ``forkserver``, which this benchmark used before) also pays a copy-on-write fault for
each inherited page it first writes: the code objects CPython specializes as they first run, the
reference counts it moves. That cost about 3 ms of a 19 ms restore (22 against 19 ms, in runs of
five children each), which a restarted host never pays, and which the SDK's timed calls do not
pay either (an untimed call comes first). The child times from before ``ContextManager.open`` to
the first compiled request, then measures the SDK's own ``client.beta.messages.create(**request)``
of that request (``_sdk.sdk_create``: one untimed call, then the median of a few) in the same
child. The figure is the ratio of the two.

- ``fresh``: a snapshot saved by an earlier process is there (a host restarting after a clean
  run); ``prime`` makes sure of it.
- ``cold``: no usable snapshot (snapshots off: a first run, or after an upgrade of the library).
- ``evicted_cold``: an agent opened and compiled, its render dropped (as the per-process bound
  does), then compiled again with no usable snapshot.
- ``wake``: two agents compiled; the first's render dropped, the second compiled since (the
  newest render); the first's next compile, with whatever the wake does to the second's render.
- ``rss``: under a configured limit, ``RSS_AGENTS`` managers on the agent, each compiled once and
  kept: the RSS growth over the limit (no SDK call).
"""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing
from typing import Any

from context_manager import (
    ContextManager,
    Head,
    set_render_cache_limit,
    set_render_snapshots,
)

from ._history import BINDING
from ._places import Place
from ._quiet import quiet_logging
from ._resident import rss_bytes
from ._sdk import sdk_create
from ._timing import clock, median

SDK_REPEATS = 3
"""The SDK's ``create()`` calls timed in each child (after one untimed call)."""

RSS_AGENTS = 100
"""Managers kept active at once in the ``rss`` measurement (issue 36)."""

RSS_LIMIT = 16 * 2**20
"""The render cache limit the ``rss`` measurement configures."""


def _first_request(store: Any, namespace: str, strategy: Any, head: Head) -> tuple[float, Any]:
    started = clock()
    cm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
    request = cm.compile(head).request
    return clock() - started, request


def _beside_sdk(seconds: float, request: dict[str, Any]) -> dict[str, float]:
    samples, _ = sdk_create(request, SDK_REPEATS)
    sdk = median(samples)
    return {"seconds": seconds, "sdk_create": sdk, "ratio": seconds / sdk if sdk else 0.0}


def child_reopen(place: Place, namespace: str, strategy: Any, head: Head, snapshots: bool) -> Any:
    """A restarted host's first request (snapshot used when ``snapshots``), beside the SDK."""
    quiet_logging()
    set_render_snapshots(snapshots)
    store = place.open()
    try:
        seconds, request = _first_request(store, namespace, strategy, head)
        return _beside_sdk(seconds, request)
    finally:
        store.close()


def child_evicted_cold(place: Place, namespace: str, strategy: Any, head: Head) -> Any:
    """An evicted agent's next compile with no usable snapshot, beside the SDK."""
    quiet_logging()
    store = place.open()
    try:
        cm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        cm.compile(head)
        cm.forget_cache(cm.current_branch_key())
        set_render_snapshots(False)
        started = clock()
        request = cm.compile(head).request
        return _beside_sdk(clock() - started, request)
    finally:
        store.close()


def child_wake(place: Place, namespace: str, strategy: Any, head: Head) -> Any:
    """An evicted agent's first compile after another agent's (the newest render)."""
    quiet_logging()
    store = place.open()
    try:
        asleep = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        asleep.compile(head)
        asleep.forget_cache(asleep.current_branch_key())
        newest = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        newest.compile(head)
        gc.collect()
        started = clock()
        request = asleep.compile(head).request
        return _beside_sdk(clock() - started, request)
    finally:
        store.close()


def child_rss(place: Place, namespace: str, strategy: Any, head: Head, agents: int) -> Any:
    """RSS growth of ``agents`` active managers under ``RSS_LIMIT``."""
    quiet_logging()
    store = place.open()
    try:
        set_render_cache_limit(RSS_LIMIT)
        warm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        warm.compile(head)  # one-time imports and first-use caches before the baseline
        del warm
        gc.collect()
        before = rss_bytes()
        kept = []
        for _ in range(agents):
            cm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
            cm.compile(head)
            kept.append(cm)
        gc.collect()
        growth = rss_bytes() - before
        return {"agents": agents, "limit": RSS_LIMIT, "growth": growth}
    finally:
        store.close()


def fresh_process_figures(
    places: dict[int, Place],
    namespace: str,
    strategy: Any,
    head: Head,
    *,
    at: int,
    largest: int,
    repeats: int,
    agents: int = RSS_AGENTS,
) -> dict[str, Any]:
    """Every fresh-process figure: the median over ``repeats`` children of each, ``at`` and
    ``largest`` messages (reopen with a snapshot at both; the rest at ``at``)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=1, mp_context=context, max_tasks_per_child=1
    ) as pool:

        def each(function: Any, *args: Any, times: int = repeats) -> list[Any]:
            return [pool.submit(function, *args).result() for _ in range(times)]

        def summary(samples: list[dict[str, float]]) -> dict[str, float]:
            return {key: median([s[key] for s in samples]) for key in samples[0]}

        for size in (at, largest):  # a snapshot saved by an earlier process
            each(child_reopen, places[size], namespace, strategy, head, True, times=1)
        figures: dict[str, Any] = {
            "reopen_fresh": {
                str(size): summary(
                    each(child_reopen, places[size], namespace, strategy, head, True)
                )
                for size in (at, largest)
            },
            "reopen_cold": summary(
                each(child_reopen, places[at], namespace, strategy, head, False)
            ),
            "evicted_cold": summary(
                each(child_evicted_cold, places[at], namespace, strategy, head)
            ),
            "wake": summary(each(child_wake, places[at], namespace, strategy, head)),
            "rss": each(child_rss, places[at], namespace, strategy, head, agents, times=1)[0],
        }
    return figures
