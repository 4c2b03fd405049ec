"""A head change judges the kept render's thinking again and gives exactly what a re-render gives.

``_rejudge.rejudged`` takes the render at hand and judges each thinking block it judged again
under the new head (a changed system prompt, another model), rebuilding only the replies whose
sent thinking changed, instead of rendering the window again. The property: the same session
(turns, tool rounds, releases, system and model switches, blank-text and thinking-only replies)
compiled with re-judging and with a re-render at every head change gives the same requests,
strips, unreadable paths and token counts, compile after compile; and every re-judged render
equals the re-render field by field. Then, on every store, a changed system prompt re-judges
and strips every reply's thinking for the head, and a switch back keeps it again.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from helpers import (
    SESSION_BINDING,
    SESSION_HEAD,
    SESSION_STEPS,
    SessionStep,
    differing_fields,
    play_session,
    snapshots_off,
    switched_off,
    windowed_session,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import (
    ContextManager,
    MemoryStore,
    Store,
    Window,
    render_cache_limit,
    set_render_cache_limit,
)
from context_manager._compile import _rejudge
from context_manager._compile._compact import CompactRender
from context_manager._compile._render import RenderState
from context_manager._compile._window import WindowRenderer


@attrs.define
class Checked:
    """How many head changes were re-judged, each compared with a re-render."""

    rejudged: int = 0


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Checked:
    """Every re-judged render is compared with the re-render, field by field."""
    seen = Checked()
    original = WindowRenderer._rejudge_kept

    def checking(self: WindowRenderer, run: Any, cache_key: Any, ctx: Any) -> RenderState | None:
        again = original(self, run, cache_key, ctx)
        if again is None:
            return None
        seen.rejudged += 1
        full = self.full_render(run, ctx, windowed=run.limit)
        assert differing_fields(again, full) == {}
        return again

    monkeypatch.setattr(WindowRenderer, "_rejudge_kept", checking)
    return seen


@given(steps=SESSION_STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_a_session_compiles_the_same_whether_its_head_changes_re_judge_or_re_render(
    steps: list[SessionStep], max_tokens: int
) -> None:
    on = windowed_session(steps, max_tokens)
    with switched_off(_rejudge):
        assert windowed_session(steps, max_tokens) == on


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # counts only
@given(steps=SESSION_STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_every_re_judged_render_equals_the_re_render_field_by_field(
    checked: Checked, steps: list[SessionStep], max_tokens: int
) -> None:
    windowed_session(steps, max_tokens)


def test_the_property_sessions_do_re_judge_their_head_changes(checked: Checked) -> None:
    """The sessions above reach the re-judging (so the properties compare something)."""
    windowed_session([("turn", 3)] * 3 + [("system", 0), ("turn", 2), ("model", 0)], 3_000)
    assert checked.rejudged >= 2


def test_a_changed_system_prompt_strips_every_reply_for_the_head_and_a_switch_back_keeps_them(
    store: Store, checked: Checked
) -> None:
    cm = ContextManager.open(
        store, namespace="ada", binding=SESSION_BINDING, strategy=Window(9_000)
    )
    play_session(cm, [("turn", 2), ("loop", 2), ("turn", 3)])
    kept = cm.compile(SESSION_HEAD, dry_run=True)
    replies = [e.sources[0].message_id for e in kept.provenance if e.sources[0].signatures]
    assert len(replies) == 5

    changed = cm.compile(attrs.evolve(SESSION_HEAD, system="You are Ada, on call."), dry_run=True)
    back = cm.compile(SESSION_HEAD, dry_run=True)

    assert checked.rejudged == 1  # the switch back is the kept render again, as it was
    strip = changed.thinking_strip
    assert strip is not None
    assert (strip.cause, strip.changed) == ("head", ("system",))
    assert sorted(strip.replies) == sorted(replies)
    assert not any(e.sources[0].signatures for e in changed.provenance if e.sources)
    assert back.request == kept.request


def test_a_head_change_re_judges_a_render_kept_compact(checked: Checked) -> None:
    """A host's idle agent keeps its render compact under the per-process bound: its head
    change restores it and judges it again, still without a re-render."""
    ada, bob = (
        ContextManager.open(
            MemoryStore(), namespace=name, binding=SESSION_BINDING, strategy=Window(9_000)
        )
        for name in ("ada", "bob")
    )
    before = render_cache_limit()
    set_render_cache_limit(64 << 20, hot_bytes=1)
    try:
        with snapshots_off():
            play_session(ada, [("turn", 2), ("loop", 2), ("turn", 3)])
            play_session(bob, [("turn", 1)])  # ada's render is kept compact for room
            assert isinstance(_kept_render(ada), CompactRender)
            changed = ada.compile(attrs.evolve(SESSION_HEAD, system="Changed."), dry_run=True)
    finally:
        set_render_cache_limit(before)
    assert checked.rejudged == 1
    strip = changed.thinking_strip
    assert strip is not None
    assert (strip.cause, len(strip.replies)) == ("head", 5)


def _kept_render(cm: ContextManager) -> object:
    """The render ``cm`` keeps for its current branch (the compiler's own cache)."""
    cached = cm._compiler.cache(cm.current_branch_key()).render
    return None if cached is None else cached[1]


def test_a_head_change_re_judges_the_snapshot_of_a_render_dropped_for_room(
    store: Store, checked: Checked
) -> None:
    """An idle agent whose render its store's snapshot backs is dropped from memory: its head
    change restores the snapshot (saved under the other head) and judges it again."""
    ada = ContextManager.open(
        store, namespace="ada", binding=SESSION_BINDING, strategy=Window(9_000)
    )
    bob = ContextManager.open(
        MemoryStore(), namespace="bob", binding=SESSION_BINDING, strategy=Window(9_000)
    )
    before = render_cache_limit()
    set_render_cache_limit(64 << 20, hot_bytes=1)
    try:
        play_session(ada, [("turn", 2), ("loop", 2), ("turn", 3)])
        kept = ada.compile(SESSION_HEAD, dry_run=True)
        play_session(bob, [("turn", 1)])  # ada's render is dropped for room
        assert _kept_render(ada) is None
        changed = ada.compile(attrs.evolve(SESSION_HEAD, system="Changed."), dry_run=True)
        back = ada.compile(SESSION_HEAD, dry_run=True)
    finally:
        set_render_cache_limit(before)
    assert checked.rejudged >= 1
    strip = changed.thinking_strip
    assert strip is not None
    assert (strip.cause, len(strip.replies)) == ("head", 5)
    assert back.request == kept.request
