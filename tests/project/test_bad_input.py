"""Bad input, one row per test: each gets a clear error or a logged-and-ignored event, nothing
stored is lost, and the turn completes or fails cleanly (the agent runs its next turn).

Everything runs through the real runtime, the real ``anthropic`` client and the simulator; failure
injection uses small real subclasses (a store whose ``append`` fails) or the simulator's knobs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anthropic
import attrs
import pytest
from helpers import NO_SYSTEM_MESSAGES_MODEL
from helpers import notice_texts as notices
from helpers import thinking_signatures as thinking_sent
from structlog.testing import capture_logs

from context_manager import (
    Head,
    MemoryStore,
    MessageMeta,
    SQLiteStore,
    Store,
    StoredMessage,
    ThinkingBinding,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)
from context_manager.runtime import Agent, RetryPolicy, Runtime
from context_manager.simulator import PREFIX_MISMATCH, Simulator

PROBE = {"name": "probe", "description": "Look.", "input_schema": {"type": "object"}}
HEAD = Head(
    model=NO_SYSTEM_MESSAGES_MODEL,
    system="You are Ada.",
    tools=[PROBE],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
FAST = RetryPolicy(attempts=4, base_delay=0.0, max_delay=0.0)
DISK_FULL = "disk full (simulated)"
SDK_WARNS = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
"""The ``anthropic`` SDK's stream accumulator re-serialises ``message_start`` and warns about
a value its typed models do not expect (an unknown type, a non-text path). That warning is the
SDK's; this library ignores such entries, and the turn completes."""


def script(request: dict[str, Any]) -> list[Any]:
    """Think, then call ``probe`` once when asked to ``use probe``; otherwise answer."""
    last = [m for m in request["messages"] if m["role"] != "system"][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    if "use probe" in said and not any(b.get("type") == "tool_result" for b in content):
        return [
            {"type": "thinking", "thinking": "look first"},
            {"type": "tool_use", "name": "probe", "input": {}},
        ]
    return [{"type": "thinking", "thinking": f"on {said[:20]}"}, f"Answer to {said[:30]}"]


def setup(
    store: Store | None = None,
    tool: Callable[[dict[str, Any]], Any] = lambda _: "seen",
    **agent: Any,
) -> tuple[Simulator, Runtime, Agent]:
    sim = Simulator(script=script)
    runtime = Runtime(sim.client(), store or MemoryStore(), retry=FAST)
    ada = runtime.register(Agent("ada", HEAD, tools={"probe": tool}, reasoning=False, **agent))
    return sim, runtime, ada


def events(logs: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [e for e in logs if e["event"] == name]


def assert_sound(sim: Simulator, ada: Agent, before: list[StoredMessage]) -> None:
    """Nothing stored before is lost, no tool call is left open, every call verified.

    A call counts as answered by a result stored before the agent's next reply (a notice may
    stand between them: the runtime's own reading, ``resume_turn``'s).
    """
    after = ada.context.messages()
    assert [m.id for m in before if m.id not in {a.id for a in after}] == []
    for index, message in enumerate(after):
        calls = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
        later = after[index + 1 :]
        upto = next((k for k, m in enumerate(later) if m.role == "assistant"), len(later))
        answered = {
            b.tool_use_id for m in later[:upto] for b in m.content if isinstance(b, ToolResultBlock)
        }
        assert [c for c in calls if c not in answered] == []
    for call in sim.calls:
        if call.status == 200:
            checks = sim.verify({**call.request, "betas": list(call.betas)})
            assert [c for c in checks if c.reason is not None] == []


# malformed and unknown input_transformations


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"type": "thinking_dropped", "reason": PREFIX_MISMATCH}, id="missing-path"),
        pytest.param(
            {
                "type": "thinking_dropped",
                "path": "messages.one.content.0",
                "reason": PREFIX_MISMATCH,
            },
            id="non-numeric",
        ),
        pytest.param(
            {
                "type": "thinking_dropped",
                "path": "messages.-1.content.0",
                "reason": PREFIX_MISMATCH,
            },
            id="negative",
        ),
        pytest.param(
            {
                "type": "thinking_dropped",
                "path": "messages.99.content.0",
                "reason": PREFIX_MISMATCH,
            },
            id="out-of-range",
        ),
        pytest.param(
            {"type": "thinking_dropped", "path": "messages.0.content.0", "reason": PREFIX_MISMATCH},
            id="not-a-thinking-block",
        ),
        pytest.param(
            {"type": "thinking_dropped", "path": 12, "reason": PREFIX_MISMATCH},
            id="path-not-text",
            marks=SDK_WARNS,
        ),
        pytest.param(
            {
                "type": "thinking_dropped",
                "path": "messages.1.content.0" + "0" * 40,
                "reason": PREFIX_MISMATCH,
            },
            id="huge-index",
        ),
    ],
)
async def test_a_malformed_drop_path_is_alerted_as_unplaced_and_tells_and_releases_nothing(
    entry: dict[str, Any],
) -> None:
    sim, _, ada = setup()
    await ada.run_turn("first question")
    before = ada.context.messages()
    sim.malformed_transformations_next([entry])
    with capture_logs() as logs:
        result = await ada.run_turn("second question")
    (alert,) = events(logs, "thinking_binding_loss")
    assert (alert["placed"], alert["unplaced"]) == (0, 1)
    assert len(result.replies) == 1
    assert notices(ada) == []
    await ada.run_turn("third question")
    assert len(thinking_sent(sim.requests[-1])) == 2  # nothing was released
    assert_sound(sim, ada, before)


async def test_an_unplaced_drop_beside_a_placed_one_is_told_in_the_at_least_form() -> None:
    sim, _, ada = setup()
    await ada.run_turn("first question")
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    sim.malformed_transformations_next(
        [{"type": "thinking_dropped", "path": "messages.x", "reason": PREFIX_MISMATCH}]
    )
    with capture_logs() as logs:
        await ada.run_turn("second question")
    (alert,) = events(logs, "thinking_binding_loss")
    assert (alert["placed"], alert["unplaced"]) == (1, 1)
    assert notices(ada) == [
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        "reasoning behind at least one of your replies. Their words are still here. Re-read "
        "before relying on an earlier decision."
    ]


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(
            {
                "type": "thinking_summarized",
                "path": "messages.1.content.0",
                "reason": PREFIX_MISMATCH,
            },
            id="unknown-type",
        ),
        pytest.param(
            {
                "type": "thinking_dropped",
                "path": "messages.1.content.0",
                "reason": "cosmic_ray_binding_mismatch",
            },
            id="unknown-reason",
        ),
        pytest.param(
            {"type": "thinking_dropped", "path": "messages.1.content.0"}, id="missing-reason"
        ),
        pytest.param(
            {
                "type": "thinking_mismatch_allowed",
                "path": "messages.1.content.0",
                "reason": PREFIX_MISMATCH,
            },
            id="mismatch-allowed",
        ),
        pytest.param(42, id="a-number"),
        pytest.param("thinking_dropped", id="a-string"),
        pytest.param([1, 2], id="a-list"),
    ],
)
@SDK_WARNS
async def test_an_unknown_transformation_entry_is_ignored_with_a_debug_event(entry: Any) -> None:
    sim, _, ada = setup()
    await ada.run_turn("first question")
    before = ada.context.messages()
    sim.malformed_transformations_next([entry])
    with capture_logs() as logs:
        result = await ada.run_turn("second question")
    assert events(logs, "thinking_binding_loss") == []
    if not (isinstance(entry, dict) and entry.get("type") == "thinking_mismatch_allowed"):
        assert events(logs, "input_transformation_ignored") != []
    assert len(result.replies) == 1
    assert notices(ada) == []
    await ada.run_turn("third question")
    assert len(thinking_sent(sim.requests[-1])) == 2
    assert_sound(sim, ada, before)


# responses and tools


async def test_a_reply_block_of_an_unknown_type_is_kept_and_sent_back_unchanged() -> None:
    future = {"type": "future_block", "payload": {"k": [1, "two"], "nested": {"x": True}}}
    sim = Simulator(script=lambda r: [{"type": "thinking", "thinking": "hm"}, future, "Hello."])
    runtime = Runtime(sim.client(), MemoryStore(), retry=FAST)
    ada = runtime.register(Agent("ada", HEAD, reasoning=False))
    result = await ada.run_turn("first question")
    stored = ada.context.get_message(result.replies[0]).content
    assert UnknownBlock(raw=future) == stored[1]
    await ada.run_turn("second question")
    assert future == sim.requests[-1]["messages"][1]["content"][1]
    assert len(thinking_sent(sim.requests[-1])) == 1
    assert_sound(sim, ada, [])


async def test_a_tool_that_raises_becomes_an_error_result_and_a_warning_and_the_turn_goes_on() -> (
    None
):
    def broken(_: dict[str, Any]) -> str:
        raise RuntimeError("the probe is on fire")

    sim, _, ada = setup(tool=broken)
    with capture_logs() as logs:
        result = await ada.run_turn("please use probe")
    (warning,) = events(logs, "tool_failed")
    assert warning["log_level"] == "warning"
    assert [c.is_error for c in result.tool_calls] == [True]
    (block,) = sim.requests[-1]["messages"][-1]["content"]
    assert (block["is_error"], block["content"]) == (True, "RuntimeError: the probe is on fire")
    assert result.stop_reason == "end_turn"
    await ada.run_turn("and now?")
    assert_sound(sim, ada, [])


class Opaque:
    """Something a tool might return that no JSON can carry."""


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Opaque(), id="an-object"),
        pytest.param({1, 2}, id="a-set"),
        pytest.param(b"\x00bytes", id="bytes"),
        pytest.param({"when": Opaque()}, id="a-dict-holding-an-object"),
        pytest.param((x for x in range(3)), id="a-generator"),
    ],
)
async def test_a_tool_result_that_cannot_be_sent_becomes_an_error_result_and_a_warning(
    value: Any,
) -> None:
    sim, _, ada = setup(tool=lambda _: value)
    with capture_logs() as logs:
        result = await ada.run_turn("please use probe")
    assert len(events(logs, "tool_result_unsendable")) == 1
    (block,) = sim.requests[-1]["messages"][-1]["content"]
    assert block["is_error"] is True
    assert block["content"].startswith("the tool returned a value that cannot be sent")
    assert result.stop_reason == "end_turn"
    await ada.run_turn("and now?")
    assert_sound(sim, ada, [])


# the store


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param("'not json at all'", id="text"),
        pytest.param("X'FF00FE'", id="binary"),
        pytest.param("42", id="a-number"),
        pytest.param("'null'", id="null"),
        pytest.param("'[1, 2]'", id="a-list"),
        pytest.param("'{\"head\": 5}'", id="wrong-shape"),
    ],
)
async def test_a_corrupt_stamp_row_is_logged_and_its_reply_is_never_sent_with_thinking(
    tmp_path: Path, garbage: str
) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    sim, _, ada = setup(store)
    first = (await ada.run_turn("first question")).replies[0]
    second = (await ada.run_turn("second question")).replies[0]
    store.close()
    db = sqlite3.connect(path)
    db.execute(f"UPDATE messages SET stamp = {garbage} WHERE id = ?", (second,))
    db.commit()
    db.close()
    store = SQLiteStore(path)
    sim, _, ada = setup(store)
    before = ada.context.messages()
    with capture_logs() as logs:
        await ada.run_turn("third question")
    (warning,) = events(logs, "stamp_unreadable")
    assert (warning["message_id"], warning["log_level"]) == (second, "warning")
    sent = thinking_sent(sim.requests[-1])
    first_signature = ada.context.get_message(first).content[0].signature  # type: ignore[union-attr]
    assert sent == [first_signature]  # the corrupt one is left out, the one before it is kept
    assert_sound(sim, ada, before)
    store.close()


class FailingStore(MemoryStore):
    """A real ``MemoryStore`` whose ``append`` raises on its ``fail_on``-th call."""

    def __init__(self) -> None:
        super().__init__()
        self.appends = 0
        self.fail_on: int | None = None

    def append(
        self,
        namespace: str,
        branch: str,
        role: Any,
        content: Any,
        metadata: MessageMeta,
        *,
        stamp: Any = None,
        signatures: Any = (),
    ) -> StoredMessage:
        self.appends += 1
        if self.fail_on is not None and self.appends == self.fail_on:
            raise OSError(DISK_FULL)
        return super().append(
            namespace, branch, role, content, metadata, stamp=stamp, signatures=signatures
        )


@pytest.mark.parametrize(
    ("fail_on", "what"),
    [
        (1, "the user's message"),
        (2, "the tool-calling reply"),
        (3, "the tool results"),
        (4, "the [reasoning] notice at the boundary"),
        (5, "the final reply"),
    ],
)
async def test_a_store_write_failing_mid_turn_fails_the_turn_cleanly_and_the_next_one_runs(
    fail_on: int, what: str
) -> None:
    store = FailingStore()
    sim, _, ada = setup(store)
    await ada.run_turn("first question")
    ada.head = attrs.evolve(HEAD, system="You are Ada, on call.")  # a notice at the boundary
    before = ada.context.messages()
    store.appends, store.fail_on = 0, fail_on
    with capture_logs() as logs:
        if what.startswith("the [reasoning]"):
            result = await ada.run_turn("please use probe")  # a lost notice never fails a turn
            assert result.stop_reason == "end_turn"
            assert len(events(logs, "[reasoning] line not stored: it still counts as told")) == 1
        else:
            with pytest.raises(OSError, match="disk full"):
                await ada.run_turn("please use probe")
    store.fail_on = None
    await ada.resume_turn()
    result = await ada.run_turn("next question")
    assert result.stop_reason == "end_turn"
    assert ada.turn_state().live is False
    assert_sound(sim, ada, before)


# observers and the provider


async def test_an_observer_that_raises_is_logged_and_the_compile_and_the_teller_go_on() -> None:
    sim, _, ada = setup()

    def broken(strip: Any, key: str) -> None:
        raise ValueError("observer bug")

    ada.context.on_thinking_strip(broken)
    await ada.run_turn("first question")
    ada.head = attrs.evolve(HEAD, tools=[])
    with capture_logs() as logs:
        await ada.run_turn("second question")
    (failed,) = events(logs, "strip_observer_failed")
    assert "observer bug" in failed["error"]
    assert len(notices(ada)) == 1
    assert_sound(sim, ada, [])


async def test_a_500_storm_longer_than_the_retries_fails_the_turn_and_resume_recovers() -> None:
    sim, _, ada = setup()
    await ada.run_turn("first question")
    before = ada.context.messages()
    sim.fail_next(FAST.attempts + 1, status=500)
    with capture_logs() as logs, pytest.raises(anthropic.InternalServerError):
        await ada.run_turn("second question")
    assert len(events(logs, "provider_retry")) == FAST.attempts - 1
    (rejected,) = events(logs, "provider_rejected")
    assert (rejected["status"], rejected["log_level"]) == (500, "error")
    assert ada.turn_state().live is False
    result = await ada.resume_turn()  # one more 500 is queued: retried, then answered
    assert result is not None
    assert len(result.replies) == 1
    assert [c.status for c in sim.calls[-2:]] == [500, 200]
    assert_sound(sim, ada, before)


async def test_a_400_in_error_mode_names_the_block_and_the_next_turn_runs() -> None:
    sim, _, ada = setup(binding=ThinkingBinding(drop_block=False))
    await ada.run_turn("first question")
    before = ada.context.messages()
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    with (
        capture_logs() as logs,
        pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0"),
    ):
        await ada.run_turn("second question")
    (rejected,) = events(logs, "provider_rejected")
    assert rejected["status"] == 400
    assert rejected["compile_id"].startswith("cmp_")
    result = await ada.resume_turn()
    assert result is not None
    assert result.stop_reason == "end_turn"
    assert_sound(sim, ada, before)


async def test_a_400_for_a_bad_setting_is_raised_and_the_fixed_head_runs() -> None:
    sim, _, ada = setup()
    await ada.run_turn("first question")
    before = ada.context.messages()
    ada.head = attrs.evolve(HEAD, settings={**HEAD.settings, "max_tokens": 0})
    with capture_logs() as logs, pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        await ada.run_turn("second question")
    assert len(events(logs, "provider_rejected")) == 1
    ada.head = HEAD
    result = await ada.run_turn("third question")
    assert result.stop_reason == "end_turn"
    assert_sound(sim, ada, before)
