"""A shed patches the render at hand and gives exactly what a re-render under the shed gives.

``_shed_patch.patched`` takes the shed replies' thinking out of the render at hand instead of
rendering the window again. The property: the same session (user turns, tool rounds that stay
open across compiles, thinking of every size, releases, a changed system prompt, blank-text and
thinking-only replies) compiled with the patch and with a re-render at every shed gives the same
requests, the same strips, the same shed replies and token counts, compile after compile; and
at each shed the patched render equals the re-render field by field. Then, on every store, an
agent in a long tool loop near its window's cap sheds through the patch.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from helpers import (
    SESSION_BINDING,
    SESSION_STEPS,
    SessionStep,
    differing_fields,
    play_session,
    switched_off,
    windowed_session,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import (
    ContextManager,
    Store,
    Window,
)
from context_manager._compile import _shed_patch, _stage_shed
from context_manager._compile._render import RenderState


@attrs.define
class Checked:
    """What the checking ``shed_thinking`` saw: sheds patched, and sheds re-rendered."""

    patched: int = 0
    rendered: int = 0
    restored: int = 0
    """Sheds patched on a render kept without its window (restored from a snapshot)."""


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> Checked:
    """Every shed also re-renders, and the patched render must equal the re-render."""
    seen = Checked()
    original = _stage_shed.shed_thinking

    def checking(run: Any, ctx: Any, state: RenderState, target: int, pending: Any) -> Any:
        made: list[tuple[RenderState, Any, list[Any]]] = []
        patch = _shed_patch.patched

        def spy(*args: Any, **kwargs: Any) -> RenderState | None:
            again = patch(*args, **kwargs)
            if again is not None:
                made.append((again, args[1], list(again.unreported)))
            return again

        monkeypatch.setattr(_stage_shed, "patched", spy)
        unwindowed = run.engine.cache(run.key).window is None
        out = original(run, ctx, state, target, pending)
        monkeypatch.setattr(_stage_shed, "patched", patch)
        if not made:
            seen.rendered += 1
            return out
        seen.patched += 1
        seen.restored += unwindowed
        again, shed_ctx, unreported = made[0]
        full = run.engine.full_render(run, shed_ctx, start=state.start, pending=pending)
        # sequences: ages only, ``carry_ages`` fills them after
        differ = differing_fields(again, full, unreported=unreported, sequences=full.sequences)
        assert differ == {}
        again._check()  # its ``signed_from`` bound holds
        return out

    monkeypatch.setattr(_stage_shed, "shed_thinking", checking)
    return seen


@given(steps=SESSION_STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_a_session_compiles_the_same_whether_its_sheds_patch_or_re_render(
    steps: list[SessionStep], max_tokens: int
) -> None:
    on = windowed_session(steps, max_tokens)
    with switched_off(_shed_patch):
        assert windowed_session(steps, max_tokens) == on


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # counts only
@given(steps=SESSION_STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_every_patched_shed_equals_the_re_render_field_by_field(
    checked: Checked, steps: list[SessionStep], max_tokens: int
) -> None:
    windowed_session(steps, max_tokens)


def test_the_property_sessions_do_patch_their_sheds(checked: Checked) -> None:
    """The sessions above reach the patch (so the properties compare something)."""
    windowed_session([("turn", 6)] * 4 + [("loop", 6)] * 6, 1_500)
    assert checked.patched >= 2


def test_an_agent_in_a_long_tool_loop_near_its_cap_sheds_by_patching(
    store: Store, checked: Checked
) -> None:
    cm = ContextManager.open(
        store, namespace="ada", binding=SESSION_BINDING, strategy=Window(2_500)
    )
    seen = play_session(cm, [("turn", 5)] * 3 + [("loop", 6)] * 5 + [("turn", 2)])
    assert checked.patched >= 2
    assert any(outcome["shed"] for outcome in seen)
    shed_then = [outcome["strip"] for outcome in seen if outcome["shed"]]
    assert all(strip is not None and strip[0] in ("messages", "first") for strip in shed_then)


def test_a_render_restored_from_its_snapshot_sheds_by_patching(
    store: Store, checked: Checked
) -> None:
    """A restarted host's render comes from its snapshot, without the window's stored
    messages: its first shed reads the shed replies' range and still patches."""
    first = ContextManager.open(
        store, namespace="ada", binding=SESSION_BINDING, strategy=Window(2_500)
    )
    play_session(first, [("turn", 5)] * 3)  # under the cap: nothing shed, the snapshot stays usable
    assert checked.patched == 0
    reopened = ContextManager.open(
        store, namespace="ada", binding=SESSION_BINDING, strategy=Window(2_500)
    )
    seen = play_session(reopened, [("loop", 6)] * 3)
    assert checked.restored >= 1
    assert any(outcome["shed"] for outcome in seen)
