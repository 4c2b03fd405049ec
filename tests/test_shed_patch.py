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

import itertools
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    MemoryStore,
    MessageId,
    Store,
    ThinkingBinding,
    Window,
)
from context_manager._compile import _shed_patch, _stage_shed
from context_manager._compile._render import RenderState

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[{"name": "read_log", "description": "Read.", "input_schema": {"type": "object"}}],
)
OTHER_SYSTEM = attrs.evolve(HEAD, system="You are Ada, on call.")
BINDING = ThinkingBinding(binds=True, drop_block=True, append_changes=False)

Step = tuple[str, int]
"""One step of a session: ``(kind, size)``; see ``_play``."""

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["turn", "turn", "turn", "loop", "release", "system", "blank", "bare"]),
        st.integers(min_value=0, max_value=6),
    ),
    min_size=4,
    max_size=30,
)


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
        mine = attrs.asdict(again, recurse=False) | {"unreported": unreported}
        theirs = attrs.asdict(full, recurse=False)
        del mine["sequences"], theirs["sequences"]  # ages only: ``carry_ages`` fills them after
        assert {k: v for k, v in mine.items() if v != theirs[k]} == {}
        return out

    monkeypatch.setattr(_stage_shed, "shed_thinking", checking)
    return seen


def _thought(size: int, signatures: Iterator[int]) -> dict[str, Any]:
    return {
        "type": "thinking",
        "thinking": "t" * (40 + 90 * size),
        "signature": f"s{next(signatures)}",
    }


def _play(cm: ContextManager, steps: list[Step]) -> list[dict[str, Any]]:
    """Run ``steps`` on ``cm``: every compile's user-visible outcome, ids as sequences."""
    signatures = itertools.count()
    calls = itertools.count()
    replies: list[MessageId] = []
    seen: list[dict[str, Any]] = []
    head = HEAD

    def compiled() -> CompileResult:
        result = cm.compile(head)
        seen.append(_visible(cm, result))
        return result

    for kind, size in steps:
        if kind == "release" and replies:
            cm.release_thinking(replies[size % len(replies)])
            continue
        if kind == "system":
            head = OTHER_SYSTEM if head is HEAD else HEAD
            continue
        cm.add_message("user", f"question {size} " + "q" * (20 * size))
        for _ in range(size if kind == "loop" else 0):
            call = f"toolu_{next(calls)}"
            use = {"type": "tool_use", "id": call, "name": "read_log", "input": {}}
            replies.append(cm.record_reply([_thought(size, signatures), use], compiled()))
            result = {"type": "tool_result", "tool_use_id": call, "content": "r" * (30 * size)}
            cm.add_message("user", [result])
        last: list[dict[str, Any]] = [_thought(size, signatures)]
        if kind == "blank":
            last.append({"type": "text", "text": "  "})
        elif kind != "bare":
            last.append({"type": "text", "text": f"answer {size}"})
        replies.append(cm.record_reply(last, compiled()))
    compiled()
    return seen


def _visible(cm: ContextManager, result: CompileResult) -> dict[str, Any]:
    """What a user sees of ``result``, message ids as stored sequences (equal across stores)."""

    def at(message_id: MessageId) -> int:
        return cm.store.get(cm.namespace, message_id).sequence

    strip = result.thinking_strip
    return {
        "request": result.request,
        "tokens": result.tokens,
        "shed": [at(m) for m in result.shed],
        "strip": None if strip is None else (strip.cause, [at(m) for m in strip.replies]),
        "sources": [[at(s.message_id) for s in e.sources] for e in result.provenance],
    }


def _session(steps: list[Step], max_tokens: int) -> list[dict[str, Any]]:
    cm = ContextManager.open(
        MemoryStore(), namespace="ada", binding=BINDING, strategy=Window(max_tokens)
    )
    return _play(cm, steps)


@given(steps=STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_a_session_compiles_the_same_whether_its_sheds_patch_or_re_render(
    steps: list[Step], max_tokens: int
) -> None:
    patched = _session(steps, max_tokens)
    _shed_patch.ENABLED = False
    try:
        rendered = _session(steps, max_tokens)
    finally:
        _shed_patch.ENABLED = True
    assert patched == rendered


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # counts only
@given(steps=STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_every_patched_shed_equals_the_re_render_field_by_field(
    checked: Checked, steps: list[Step], max_tokens: int
) -> None:
    _session(steps, max_tokens)


def test_the_property_sessions_do_patch_their_sheds(checked: Checked) -> None:
    """The sessions above reach the patch (so the properties compare something)."""
    _session([("turn", 6)] * 4 + [("loop", 6)] * 6, 1_500)
    assert checked.patched >= 2


def test_an_agent_in_a_long_tool_loop_near_its_cap_sheds_by_patching(
    store: Store, checked: Checked
) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(2_500))
    seen = _play(cm, [("turn", 5)] * 3 + [("loop", 6)] * 5 + [("turn", 2)])
    assert checked.patched >= 2
    assert any(outcome["shed"] for outcome in seen)
    shed_then = [outcome["strip"] for outcome in seen if outcome["shed"]]
    assert all(strip is not None and strip[0] in ("messages", "first") for strip in shed_then)


def test_a_render_restored_from_its_snapshot_sheds_by_patching(
    store: Store, checked: Checked
) -> None:
    """A restarted host's render comes from its snapshot, without the window's stored
    messages: its first shed reads the shed replies' range and still patches."""
    first = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(2_500))
    _play(first, [("turn", 5)] * 3)  # under the cap: nothing shed, the snapshot stays usable
    assert checked.patched == 0
    reopened = ContextManager.open(store, namespace="ada", binding=BINDING, strategy=Window(2_500))
    seen = _play(reopened, [("loop", 6)] * 3)
    assert checked.restored >= 1
    assert any(outcome["shed"] for outcome in seen)
