"""Issue 28 items 7-10: forms real clients recorded as accepted (HTTP 200) are sent as stored.

Each test records replies through the real SDK client on the simulator, on every store, and
judges the next request there: nothing refused, no thinking dropped, none stripped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from helpers import (
    THINKING_HEAD,
    calling_script,
    invalid_calls,
    request_blocks,
    runtime_on,
    thinking_signatures,
    unmarked,
)
from structlog.testing import capture_logs

from context_manager import ContextManager, InFlightThinkingInvalid, Store, ThinkingBinding
from context_manager._compile import EMPTY_REPLY_TEXT
from context_manager.runtime import Agent
from context_manager.simulator import Simulator


def whitespace_script(request: dict[str, Any]) -> list[Any]:
    """A reply opening with ``"\\n\\n"`` before its thinking (as simonw/llm-anthropic recorded)."""
    last = request["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    if any(b.get("type") == "tool_result" for b in content):
        return [{"type": "thinking", "thinking": "the log is in"}, "All is well."]
    if "use tool" in str(content):
        return [
            {"type": "text", "text": "\n\n"},
            {"type": "thinking", "thinking": "reading the log"},
            {"type": "tool_use", "name": "read_log", "input": {}},
        ]
    return [
        {"type": "text", "text": "\n\n"},
        {"type": "thinking", "thinking": "an answer"},
        {"type": "text", "text": "Answered."},
    ]


async def test_a_whitespace_text_block_before_thinking_is_sent_and_the_thinking_kept(
    store: Store,
) -> None:
    sim = Simulator(script=whitespace_script)
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "A question.")
    first = cm.compile(THINKING_HEAD)
    reply = await client.beta.messages.create(**first.request)
    cm.record_reply(reply, first)
    cm.add_message("user", "Please use tool read_log.")
    second = cm.compile(THINKING_HEAD)
    call = await client.beta.messages.create(**second.request)
    cm.record_reply(call, second)
    cm.add_message(
        "user",
        [{"type": "tool_result", "tool_use_id": call.content[-1].id, "content": "fine"}],
    )

    third = cm.compile(THINKING_HEAD)
    await client.beta.messages.create(**third.request)

    assert second.thinking_strip is None
    assert third.thinking_strip is None
    assert unmarked(third.request["messages"][1]["content"][0]) == {"type": "text", "text": "\n\n"}
    assert len(thinking_signatures(third.request)) == 2
    assert invalid_calls(sim) == []


async def test_a_reply_of_one_empty_text_block_keeps_the_turns_around_it_apart(
    store: Store,
) -> None:
    """posit-dev/chatlas recorded an empty reply; the API refuses ``""``, so a placeholder text
    stands for it, as chatlas and ellmer send, instead of merging the two user turns."""
    answers: Iterator[list[Any]] = iter([[{"type": "text", "text": ""}], ["Here now."]])
    sim = Simulator(script=lambda request: next(answers))
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "Say nothing.")
    first = cm.compile(THINKING_HEAD)
    cm.record_reply(await client.beta.messages.create(**first.request), first)
    cm.add_message("user", "Are you there?")

    second = cm.compile(THINKING_HEAD)
    await client.beta.messages.create(**second.request)

    assert unmarked(second.request["messages"]) == [
        {"role": "user", "content": [{"type": "text", "text": "Say nothing."}]},
        {"role": "assistant", "content": [{"type": "text", "text": EMPTY_REPLY_TEXT}]},
        {"role": "user", "content": [{"type": "text", "text": "Are you there?"}]},
    ]
    assert invalid_calls(sim) == []


async def test_a_history_that_starts_with_an_assistant_message_is_sent_as_stored(
    store: Store,
) -> None:
    """pydantic-ai recorded a request opening with an assistant message (HTTP 200)."""
    sim = Simulator()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("assistant", "Hello, I am Ada.")
    cm.add_message("user", "Hello Ada.")

    result = cm.compile(THINKING_HEAD)
    await sim.client().beta.messages.create(**result.request)

    assert unmarked(result.request["messages"]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "Hello, I am Ada."}]},
        {"role": "user", "content": [{"type": "text", "text": "Hello Ada."}]},
    ]
    assert invalid_calls(sim) == []


FORCED_HEAD = attrs.evolve(
    THINKING_HEAD,
    settings={"max_tokens": 2048, "tool_choice": {"type": "tool", "name": "read_log"}},
)
"""A structured-output call: the tool forced, no thinking (the API refuses both together)."""


async def test_a_forced_tool_call_answered_with_user_text_is_sent_as_stored(store: Store) -> None:
    """Mirascope (10 recorded requests) and ellmer (1) answer a forced structured-output call
    with a user text message, and the API took it: no error result is put between them."""
    sim = Simulator(script=calling_script(think=False))
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "Please use tool read_log to extract the book.")
    forced = cm.compile(FORCED_HEAD)
    call = await client.beta.messages.create(**forced.request)
    cm.record_reply(call, forced)
    cm.add_message("user", "Thanks. Which year was it published?")

    result = cm.compile(THINKING_HEAD)
    await client.beta.messages.create(**result.request)

    assert [m["role"] for m in result.request["messages"]] == ["user", "assistant", "user"]
    assert unmarked(result.request["messages"][2]["content"]) == [
        {"type": "text", "text": "Thanks. Which year was it published?"}
    ]
    assert invalid_calls(sim) == []


async def test_a_round_a_crash_cut_is_closed_with_error_results_before_the_next_turn(
    store: Store,
) -> None:
    """The synthetic error result stays for the round the API would refuse open: a crash cut
    it after the call was stored, and the host starts a new turn without ``resume_turn``."""
    sim = Simulator(script=calling_script())
    runtime = runtime_on(sim, store)
    ada = runtime.register(Agent("ada", THINKING_HEAD, tools={"read_log": lambda _: "fine"}))
    ada.context.add_message("user", "Please use tool read_log.")
    first = ada.context.compile(THINKING_HEAD)
    ada.context.record_reply(await sim.client().beta.messages.create(**first.request), first)

    await ada.run_turn("Hello again.")

    sent = sim.requests[-1]["messages"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "text"]
    assert sent[2]["content"][0]["is_error"] is True
    assert invalid_calls(sim) == []


async def test_a_tool_use_id_used_again_in_a_later_round_is_sent_as_stored(store: Store) -> None:
    """pydantic-ai replayed a history another provider made, whose calls reuse one id round
    after round, and the API took it (HTTP 200): each round is answered in turn, so the id is
    sent as stored and every reply's thinking is kept."""
    script = calling_script()

    def same_id(request: dict[str, Any]) -> list[Any]:
        blocks = script(request)
        return [{**b, "id": "0usajhl5"} if b.get("type") == "tool_use" else b for b in blocks]

    sim = Simulator(script=same_id)
    runtime = runtime_on(sim, store)
    ada = runtime.register(Agent("ada", THINKING_HEAD, tools={"read_log": lambda _: "fine"}))

    await ada.run_turn("Please use tool read_log.")
    await ada.run_turn("Please use tool read_log again.")

    sent = sim.requests[-1]
    calls = [b["id"] for b in request_blocks(sent) if b["type"] == "tool_use"]
    answers = [b["tool_use_id"] for b in request_blocks(sent) if b["type"] == "tool_result"]
    assert calls == answers == ["0usajhl5", "0usajhl5"]
    assert len(thinking_signatures(sent)) == 3  # both calls and the first answer
    assert invalid_calls(sim) == []


async def imported_open_round(sim: Simulator, cm: ContextManager) -> Any:
    """A host that talked to the API directly until a tool call, then stored that history
    (reply included, unstamped) to go on through this library: the reply it imported."""
    asked = [{"type": "text", "text": "Please use tool read_log."}]
    head = THINKING_HEAD
    params: dict[str, Any] = {"model": head.model, "system": head.system, "tools": head.tools}
    messages: list[Any] = [{"role": "user", "content": asked}]
    reply = await sim.client().beta.messages.create(**params, messages=messages, **head.settings)
    cm.add_message("user", asked)
    cm.add_message("assistant", [b.model_dump(exclude_none=True) for b in reply.content])
    call = next(b for b in reply.content if b.type == "tool_use")
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": call.id, "content": "fine"}])
    return reply


async def test_an_imported_reply_whose_tool_round_is_open_goes_out_with_its_thinking(
    store: Store,
) -> None:
    """Left out, the open round's reply was filtered, which the API refuses whatever its
    thinking (provider rule 6): the first request after the import was a certain 400. Sent, the
    block verifies, or the provider drops it under ``drop_block``; once the round closes it is
    left out as unstamped and the strip reports it."""
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada")
    reply = await imported_open_round(sim, cm)

    result = cm.compile(THINKING_HEAD)
    answer = await sim.client().beta.messages.create(**result.request)
    cm.record_reply(answer, result)
    cm.add_message("user", "Thanks.")
    after = cm.compile(THINKING_HEAD)

    assert thinking_signatures(result.request) == [reply.content[0].signature]
    assert invalid_calls(sim) == []
    assert after.thinking_strip is not None
    assert after.thinking_strip.replies[0] == cm.messages()[1].id


async def test_an_imported_open_round_under_drop_block_off_is_refused_before_sending(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada", binding=ThinkingBinding(drop_block=False))
    await imported_open_round(sim, cm)
    calls = len(sim.calls)

    with pytest.raises(InFlightThinkingInvalid, match="no stamp"):
        cm.compile(THINKING_HEAD)
    assert len(sim.calls) == calls


@pytest.mark.parametrize(
    ("unsigned", "event"),
    [
        ({"type": "thinking", "thinking": "hmm", "signature": ""}, "unsigned_thinking_left_out"),
        ({"type": "thinking", "thinking": "hmm"}, "malformed_thinking_left_out"),
        ({"type": "redacted_thinking", "data": ""}, "unsigned_thinking_left_out"),
    ],
    ids=["empty-signature", "no-signature", "empty-redacted"],
)
async def test_imported_thinking_without_a_signature_is_left_out_and_logged(
    store: Store, unsigned: dict[str, Any], event: str
) -> None:
    """Frameworks that rebuild reasoning from another provider's history drop the signature;
    the API refuses such a block (provider rule 12). One with no ``signature`` field at all
    was sent as it came (a 400), and an empty one was left out with nothing said."""
    sim = Simulator()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "Hello.")
    reply = cm.add_message("assistant", [unsigned, {"type": "text", "text": "Hi."}])
    cm.add_message("user", "And now?")

    with capture_logs() as logs:
        result = cm.compile(THINKING_HEAD)
    await sim.client().beta.messages.create(**result.request)

    assert unmarked(result.request["messages"][1]["content"]) == [{"type": "text", "text": "Hi."}]
    assert [(e["message_id"], e["block"]) for e in logs if e["event"] == event] == [(reply, 0)]
    assert invalid_calls(sim) == []
    assert len(cm.get_message(reply).content) == 2  # stored as it came
