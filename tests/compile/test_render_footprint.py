"""What the per-process bound counts is what a render costs (issue 36), measured by tracemalloc.

A hot render's counted bytes are within ``FOOTPRINT_FACTOR`` of the memory a manager's first
compile really keeps (before, it counted the encoded blocks alone: a tenth to a half of it); a
manager whose render the bound released keeps a small constant, not what it learnt of the
window; and a render its own snapshot backs is dropped rather than compacted, its next compile
restoring the snapshot.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import snapshots_off
from structlog.testing import capture_logs

from context_manager import (
    ContextManager,
    Head,
    Store,
    ThinkingBinding,
    Window,
    render_cache_bytes,
    render_cache_limit,
    set_render_cache_limit,
)
from context_manager._compile._footprint import FOOTPRINT_FACTOR
from context_manager._compile._render import RenderState

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
BINDING = ThinkingBinding(binds=True, drop_block=True)

PER_MANAGER = 64 * 1024
"""What a resident manager may keep once the bound released its render (as in
``test_render_cache_bound``): its objects and its binding record, not its window."""


@pytest.fixture(autouse=True)
def _default_bound() -> Iterator[None]:
    before = render_cache_limit()
    yield
    set_render_cache_limit(before)


def _grow(store: Store, turns: int, words: int) -> None:
    grower = ContextManager.open(store, namespace="ada", binding=BINDING)
    for n in range(turns):
        grower.add_message("user", f"question {n} " + "about the deploy " * words)
        reply = [
            {"type": "thinking", "thinking": f"{n} " + "thought " * words, "signature": f"s{n}"},
            {"type": "text", "text": f"answer {n} " + "the fix " * words},
        ]
        grower.record_reply(reply, grower.compile(HEAD))
    del grower
    gc.collect()


@pytest.fixture
def traced(store: Store) -> Iterator[Traced]:
    try:
        yield Traced(store)
    finally:
        tracemalloc.stop()


class Traced:
    """Managers opened on ``store`` and kept, each measured by tracemalloc."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.kept: list[ContextManager] = []

    def one_compile(self) -> tuple[int, int]:
        """A new manager's first compile: the bytes the bound counts for it, and the bytes
        traced (everything the compile keeps)."""
        if not tracemalloc.is_tracing():  # started after the history grew (faster)
            tracemalloc.start()
        counted = render_cache_bytes()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        cm = ContextManager.open(self.store, namespace="ada", binding=BINDING)
        cm.compile(HEAD)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        self.kept.append(cm)
        return render_cache_bytes() - counted, grown


@pytest.mark.parametrize(("turns", "words"), [(200, 1), (40, 60)], ids=["short", "long"])
@pytest.mark.parametrize("source", ["snapshot", "stored messages"])
def test_the_counted_bytes_of_a_hot_render_are_within_a_stated_factor_of_its_measured_size(
    traced: Traced, turns: int, words: int, source: str
) -> None:
    _grow(traced.store, turns, words)
    traced.one_compile()  # first-use caches of the store and the code, and the snapshot
    if source == "snapshot":
        counted, measured = traced.one_compile()
    else:
        with snapshots_off():
            counted, measured = traced.one_compile()

    assert measured / FOOTPRINT_FACTOR <= counted <= measured * FOOTPRINT_FACTOR


def test_a_manager_whose_render_the_bound_dropped_keeps_a_small_constant(traced: Traced) -> None:
    _grow(traced.store, 300, 1)
    set_render_cache_limit(0)  # each render is dropped after its compile
    traced.one_compile()

    grown = [traced.one_compile()[1] for _ in range(5)]

    assert render_cache_bytes() == 0
    assert sum(grown) / len(grown) <= PER_MANAGER


def _request(cm: ContextManager) -> str:
    request: dict[str, Any] = cm.compile(HEAD).request
    return json.dumps(request, sort_keys=True)


def test_a_render_its_snapshot_backs_is_dropped_when_released_and_its_next_compile_restores_it(
    store: Store,
) -> None:
    _grow(store, 30, 20)
    first = ContextManager.open(store, namespace="ada", binding=BINDING)
    _request(first)  # restores the snapshot the grower saved: it backs this render
    sent = _request(first)  # compiled again: the hot tier's
    held = render_cache_bytes()

    set_render_cache_limit(render_cache_limit(), hot_bytes=0)

    assert render_cache_bytes() == 0  # dropped, not compacted: nothing pickled, nothing kept
    with capture_logs() as logs:
        again = _request(first)
    assert again == sent
    assert any(e["event"] == "render_snapshot_restored" for e in logs)
    assert render_cache_bytes() <= held


def test_a_compacted_render_keeps_the_releases_its_record_forgot_and_gives_them_back(
    store: Store,
) -> None:
    # the record forgets the window when the render is released; the compact render carries
    # its releases, so a later pass of the restoring compile (a shed copies them) sees them all
    cm = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(400))
    for n in range(30):
        cm.add_message("user", f"question {n}")
        reply = [
            {"type": "thinking", "thinking": f"thought {n}", "signature": f"s{n}"},
            {"type": "text", "text": f"answer {n}"},
        ]
        cm.record_reply(reply, cm.compile(HEAD))
    sent = _request(cm)
    record = cm._compiler.record_for(cm.current_branch_key())
    learnt = dict(record.releases)
    assert learnt  # the window jumps released thinking

    with snapshots_off():  # no snapshot backs it: compacted, not dropped
        set_render_cache_limit(render_cache_limit(), hot_bytes=0)
        assert cm._compiler.record_for(cm.current_branch_key()).releases == {}
        again = _request(cm)

    assert again == sent
    key = cm.current_branch_key()
    kept = cm._compiler.cache(key).render
    assert kept is not None
    met = kept[1].sequences if isinstance(kept[1], RenderState) else {}
    window = {mid: release for mid, release in learnt.items() if mid in met}
    assert window  # some released replies are still in the window
    assert cm._compiler.record_for(key).releases == window
