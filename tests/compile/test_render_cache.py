"""Cached renders: a re-render from kept pieces sends the same bytes, the per-process bound drops
the least recently compiled branch's render, and releases are read for the window only (#18)."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from context_manager import (
    ContextManager,
    Fold,
    Head,
    MemoryStore,
    ProvenanceEntry,
    Store,
    ThinkingBinding,
    Window,
    estimate_tokens,
    render_cache_bytes,
    render_cache_limit,
    set_render_cache_limit,
    set_render_snapshots,
)
from context_manager._compile._compact import CompactRender
from context_manager._compile._render import RenderState

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[
        {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
    ],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
BINDING = ThinkingBinding(binds=True, drop_block=True)


@pytest.fixture(autouse=True)
def _default_bound() -> Iterator[None]:
    """Every test starts and ends with the default bound."""
    before = render_cache_limit()
    yield
    set_render_cache_limit(before)


@pytest.fixture
def no_snapshots() -> Iterator[None]:
    """Snapshots off: a released render is compacted (one its snapshot backs is dropped)."""
    set_render_snapshots(False)
    yield
    set_render_snapshots(True)


def _reply(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "", "signature": f"sig-{n}"},
        {"type": "text", "text": f"answer {n}"},
    ]


def _grow(cm: ContextManager, turns: int, start: int = 0, *, words: int = 1) -> None:
    for n in range(start, start + turns):
        cm.add_message("user", " ".join(f"question {n}" for _ in range(words)))
        cm.record_reply(_reply(n), cm.compile(HEAD))


def _grown_and_gone() -> tuple[MemoryStore, int]:
    """A store holding 30 long turns whose manager is gone, and the render cache's bytes
    then (what the managers a test opens next add to)."""
    store = MemoryStore()
    grower = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(grower, 30, words=40)
    del grower
    gc.collect()
    return store, render_cache_bytes()


def _bytes(request: dict[str, Any]) -> str:
    return json.dumps(request, sort_keys=True)


def test_a_head_change_rendered_from_kept_pieces_matches_one_rendered_from_the_store() -> None:
    """A head change that re-renders (``append_changes=False``; appended, nothing strips)."""
    store = MemoryStore()
    rewrite = attrs.evolve(BINDING, append_changes=False)
    warm = ContextManager.open(store, namespace="ada", binding=rewrite)
    _grow(warm, 12)
    warm.compile(HEAD)
    other = Head(
        model=HEAD.model, system="You are Ada, on call.", tools=HEAD.tools, settings=HEAD.settings
    )

    from_pieces = warm.compile(other, dry_run=True)
    cold = ContextManager.open(store, namespace="ada", binding=rewrite)
    from_store = cold.compile(other, dry_run=True)

    assert _bytes(from_store.request) == _bytes(from_pieces.request)
    assert from_store.thinking_strip is not None
    assert from_pieces.thinking_strip is not None
    assert from_store.thinking_strip.replies == from_pieces.thinking_strip.replies


def test_a_window_jump_from_kept_pieces_sends_what_a_reopened_manager_sends() -> None:
    store = MemoryStore()
    cm = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(200))
    _grow(cm, 40)

    jumped = cm.compile(HEAD)
    reopened = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(200))

    assert _bytes(reopened.compile(HEAD).request) == _bytes(jumped.request)


def test_a_bound_of_zero_keeps_no_render_and_the_next_compile_sends_the_same_bytes() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada", binding=BINDING)
    _grow(cm, 8)
    kept = cm.compile(HEAD)
    assert render_cache_bytes() > 0

    set_render_cache_limit(0)

    assert render_cache_bytes() == 0
    assert _bytes(cm.compile(HEAD).request) == _bytes(kept.request)
    assert render_cache_bytes() == 0


def test_over_the_bound_the_least_recently_compiled_branch_is_dropped_first() -> None:
    first = ContextManager.open(MemoryStore(), namespace="ada", binding=BINDING)
    second = ContextManager.open(MemoryStore(), namespace="bob", binding=BINDING)
    _grow(first, 6)
    _grow(second, 6)
    first.compile(HEAD)
    second.compile(HEAD)
    held = render_cache_bytes()

    set_render_cache_limit(held - 1, hot_bytes=held)  # the byte bound alone needs room

    assert 0 < render_cache_bytes() < held  # the first manager's render went, the second's stayed
    assert _bytes(first.compile(HEAD).request) == _bytes(first.compile(HEAD).request)


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more bytes"):
        set_render_cache_limit(-1)


def test_releases_are_read_for_the_message_ids_asked(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(cm, 3)
    replies = [m.id for m in cm.messages() if m.role == "assistant"]
    cm.release_thinking(replies[0])
    cm.release_thinking(replies[2], from_block=0)
    key = cm.current_branch_key()

    found = store.releases("ada", key, [replies[0], replies[1]])

    assert [replies[0]] == list(found)
    assert found[replies[0]].from_block == 0
    assert store.binding_record("ada", key, releases=False).releases == {}
    assert {replies[0], replies[2]} == set(store.binding_record("ada", key).releases)


def test_a_fold_planned_from_the_kept_window_sends_what_a_fresh_manager_sends() -> None:
    def summarize(covered: object) -> str:
        return "What happened so far."

    store = MemoryStore()
    grower = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(grower, 12)
    fold = Fold(summarize, trigger_tokens=1, keep_tokens=40)
    warm = ContextManager.open(store, namespace="ada", binding=BINDING)
    warm.compile(HEAD)
    warm.strategy = fold

    folded = warm.compile(HEAD, dry_run=True)
    fresh = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=fold)

    assert _bytes(fresh.compile(HEAD, dry_run=True).request) == _bytes(folded.request)


def test_a_manager_that_is_gone_no_longer_counts_against_the_bound() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada", binding=BINDING)
    _grow(cm, 6)
    cm.compile(HEAD)
    held = render_cache_bytes()
    assert held > 0

    del cm
    gc.collect()

    assert render_cache_bytes() < held


@pytest.mark.usefixtures("no_snapshots")
def test_a_render_pushed_out_of_the_hot_tier_is_kept_smaller_and_compiles_to_the_same_request() -> (
    None
):
    store = MemoryStore()
    cm = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(cm, 30, words=40)  # a compact render's size is mostly its text's, compressed
    hot = cm.compile(HEAD)
    gc.collect()
    held = render_cache_bytes()

    set_render_cache_limit(render_cache_limit(), hot_bytes=0)

    assert 0 < render_cache_bytes() < held / 2
    assert _bytes(cm.compile(HEAD).request) == _bytes(hot.request)


@pytest.mark.usefixtures("no_snapshots")
def test_a_compact_render_extended_by_new_messages_sends_what_a_fresh_manager_sends() -> None:
    store = MemoryStore()
    cm = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(400))
    _grow(cm, 30)
    cm.compile(HEAD)
    for n in range(30, 33):  # each compile restores the compact render, then it is compacted
        set_render_cache_limit(render_cache_limit(), hot_bytes=0)
        assert cm._compiler.held()["states"] == 1
        _grow(cm, 1, start=n)
    cm.add_message("user", "one more question")

    extended = cm.compile(HEAD, dry_run=True)
    fresh = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(400))

    again = fresh.compile(HEAD, dry_run=True)
    assert _bytes(again.request) == _bytes(extended.request)
    assert again.provenance == extended.provenance


def test_waking_an_agent_leaves_the_previous_newest_render_uncompacted_under_a_roomy_bound() -> (
    None
):
    store, base = _grown_and_gone()
    first = ContextManager.open(store, namespace="ada", binding=BINDING)
    sent = first.compile(HEAD)
    one = render_cache_bytes() - base

    second = ContextManager.open(store, namespace="ada", binding=BINDING)
    second.compile(HEAD)

    # both hot (counted at about the same size): the wake compacted nothing
    assert render_cache_bytes() - base > 1.5 * one
    assert _bytes(first.compile(HEAD).request) == _bytes(sent.request)


@pytest.mark.usefixtures("no_snapshots")
def test_a_deferred_render_is_compacted_before_anything_is_dropped_when_the_bound_needs_room() -> (
    None
):
    store, base = _grown_and_gone()
    first = ContextManager.open(store, namespace="ada", binding=BINDING)
    sent = first.compile(HEAD)
    one = render_cache_bytes() - base
    second = ContextManager.open(store, namespace="ada", binding=BINDING)
    second.compile(HEAD)

    set_render_cache_limit(render_cache_bytes() - 1)

    assert first._compiler.held()["states"] == 1  # kept, compact, not dropped
    assert render_cache_bytes() - base < 2 * one
    assert _bytes(first.compile(HEAD).request) == _bytes(sent.request)


def test_the_byte_bound_holds_after_every_compile_of_many_resident_managers() -> None:
    store = MemoryStore()
    grower = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(grower, 20)
    one = render_cache_bytes()
    set_render_cache_limit(3 * one, hot_bytes=one)
    managers = [ContextManager.open(store, namespace="ada", binding=BINDING) for _ in range(6)]

    for _ in range(3):
        for cm in managers:
            cm.compile(HEAD)
            assert render_cache_bytes() <= 3 * one


def test_a_negative_hot_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        set_render_cache_limit(render_cache_limit(), hot_bytes=-1)


def test_the_default_estimate_counted_per_kept_block_equals_the_estimate_of_each_message() -> None:
    store = MemoryStore()
    grower = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(grower, 25, words=7)
    grower.add_message("user", [{"type": "text", "text": "  "}, {"type": "text", "text": "why?"}])
    kept = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(300))
    each = ContextManager.open(
        store,
        namespace="ada",
        binding=BINDING,
        strategy=Window(300),
        estimator=lambda message: estimate_tokens(message),
    )

    counted, estimated = kept.compile(HEAD, dry_run=True), each.compile(HEAD, dry_run=True)

    assert counted.tokens == estimated.tokens
    assert _bytes(counted.request) == _bytes(estimated.request)  # the same window jump


def test_a_manager_the_host_drops_frees_its_render_without_waiting_for_a_collection() -> None:
    gc.collect()
    base = render_cache_bytes()
    cm = ContextManager.open(MemoryStore(), namespace="ada", binding=BINDING)
    _grow(cm, 6)
    cm.compile(HEAD)
    assert render_cache_bytes() > base

    gc.disable()
    try:
        del cm
        assert render_cache_bytes() == base
    finally:
        gc.enable()


def test_a_render_leaves_what_the_host_froze_frozen_and_freezes_nothing_itself() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada", binding=BINDING)
    _grow(cm, 4)
    assert gc.get_freeze_count() == 0
    cm.forget_cache(cm.current_branch_key())
    cm.compile(HEAD)  # a render from the store, with the collector paused
    assert gc.get_freeze_count() == 0

    hosts = [[n] for n in range(100)]
    cm.forget_cache(cm.current_branch_key())
    gc.freeze()
    try:
        cm.compile(HEAD)
        assert gc.get_freeze_count() > 0
        assert not any(o is hosts[0] for o in gc.get_objects())  # still frozen
    finally:
        gc.unfreeze()
    assert any(o is hosts[0] for o in gc.get_objects())


@pytest.mark.usefixtures("no_snapshots")
def test_past_the_hot_bound_the_least_recently_compiled_branch_is_kept_compact() -> None:
    store, base = _grown_and_gone()
    first, second = (ContextManager.open(store, namespace="ada", binding=BINDING) for _ in "ab")
    sent = first.compile(HEAD)
    one = render_cache_bytes() - base
    set_render_cache_limit(render_cache_limit(), hot_bytes=one)

    first.compile(HEAD)  # compiled again: hot
    second.compile(HEAD)
    second.compile(HEAD)  # hot too: over the hot bound, the first is compacted

    assert render_cache_bytes() - base < 1.5 * one
    assert _bytes(first.compile(HEAD).request) == _bytes(sent.request)


def test_a_compact_render_restores_an_entry_of_several_sources_and_one_of_none() -> None:
    store = MemoryStore()
    cm = ContextManager.open(store, namespace="ada", binding=BINDING)
    _grow(cm, 3)
    kept = cm._compiler.cache(cm.current_branch_key()).render
    assert kept is not None
    state = kept[1]
    assert isinstance(state, RenderState)  # hot: just compiled
    one, other = state.provenance[0].sources[0], state.provenance[1].sources[0]
    merged = ProvenanceEntry("message", (one, attrs.evolve(other, signatures={1: "digest"})))
    state = attrs.evolve(
        state, provenance=[merged, ProvenanceEntry("synthetic"), *state.provenance[2:]]
    )

    restored = CompactRender.of(state).restore()

    assert restored == state
    assert restored.provenance[:2] == [merged, ProvenanceEntry("synthetic")]
