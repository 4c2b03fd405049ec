"""The simulator through the real SDK client, in-process: signing, verifying, drops and replies."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any
from unittest.mock import ANY

import anthropic
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import context_manager.simulator as simulator
from context_manager import TextBlock, ThinkingBlock, ToolUseBlock
from context_manager.simulator import (
    BINDING_BETA,
    MODEL_MISMATCH,
    PREFIX_MISMATCH,
    BlockCheck,
    InvalidRequest,
    Simulator,
)

MODEL = "claude-sim-1"
OTHER_MODEL = "claude-sim-2"
SYSTEM_MODEL = "claude-opus-5-5"
"""A documented model that accepts mid-conversation system messages (VENDOR_RULES 16)."""
SYSTEM = "You are Ada."
TOOLS = [{"name": "read_log", "description": "Read a log.", "input_schema": {"type": "object"}}]


def request(
    messages: list[dict[str, Any]],
    *,
    mode: str | None = "drop_block",
    model: str = MODEL,
    system: Any = SYSTEM,
    tools: list[dict[str, Any]] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """SDK keyword arguments for one call (binding beta on unless ``mode`` is ``None``)."""
    thinking: dict[str, Any] = {"type": "adaptive"}
    out: dict[str, Any] = {"model": model, "max_tokens": 4096, "system": system}
    if mode is not None:
        thinking["block_binding"] = {"prefix_mismatch_behavior": mode}
        out["betas"] = [BINDING_BETA]
    out["thinking"] = thinking
    out["tools"] = copy.deepcopy(TOOLS if tools is None else tools)
    out["messages"] = copy.deepcopy(messages)
    out.update(settings)
    return out


def wire(message: anthropic.types.beta.BetaMessage) -> dict[str, Any]:
    """A reply as the assistant message a client sends back (plain wire dicts)."""
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }


def dropped(message: anthropic.types.beta.BetaMessage) -> list[tuple[str, str]]:
    """``(path, reason)`` of every ``thinking_dropped`` entry of a reply."""
    assert message.input_transformations is not None
    return [(t.path, t.reason) for t in message.input_transformations]


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture(params=["in-process", "loopback"])
async def client(
    request: pytest.FixtureRequest, sim: Simulator
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """The SDK client over the in-process transport, then over the loopback server."""
    if request.param == "in-process":
        async with sim.client() as c:
            yield c
        return
    with sim.serve() as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sim", max_retries=0) as c:
            yield c


async def converse(
    client: anthropic.AsyncAnthropic, turns: Iterable[str], **head: Any
) -> list[dict[str, Any]]:
    """A real history: each user turn sent, each reply fed back as wire dicts."""
    messages: list[dict[str, Any]] = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        reply = await client.beta.messages.create(**request(messages, **head))
        assert dropped(reply) == []
        messages.append(wire(reply))
    return messages


THREE_TURNS = ("first", "second", "third")
EVERY_THINKING_PATH = ["messages.1.content.0", "messages.3.content.0", "messages.5.content.0"]


def next_turn(messages: list[dict[str, Any]], text: str = "next") -> list[dict[str, Any]]:
    return [*messages, {"role": "user", "content": text}]


# Exports ------------------------------------------------------------------------------------------


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(simulator).items()
        if not name.startswith("_") and type(value).__name__ != "module" and name != "annotations"
    }

    assert set(simulator.__all__) == public
    assert len(simulator.__all__) == len(public)


# Create and stream --------------------------------------------------------------------------------


async def test_create_returns_a_signed_thinking_line_and_a_text_line_by_default(
    client: anthropic.AsyncAnthropic,
) -> None:
    reply = await client.beta.messages.create(**request([{"role": "user", "content": "hello"}]))

    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert reply.content[0].thinking == "The user wrote: hello"
    assert reply.content[0].signature != ""
    assert reply.content[1].text == "You said: hello"
    assert (reply.role, reply.model, reply.stop_reason) == ("assistant", MODEL, "end_turn")
    assert reply.input_transformations == []


async def test_a_valid_history_verifies_with_no_drops(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, THREE_TURNS)

    reply = await client.beta.messages.create(**request(next_turn(history)))

    assert dropped(reply) == []
    assert [c.path for c in sim.verify(request(history))] == [(1, 0), (3, 0), (5, 0)]
    assert all(c.ok for c in sim.verify(request(history)))


async def test_replies_fed_back_with_to_param_verify(client: anthropic.AsyncAnthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": "one"}]
    for text in ("two", "three"):
        reply = await client.beta.messages.create(**request(messages))
        messages += [reply.to_param(), {"role": "user", "content": text}]

    reply = await client.beta.messages.create(**request(messages))

    assert dropped(reply) == []


async def test_a_streamed_final_message_round_trips_and_its_signatures_verify(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, ["first"])
    async with client.beta.messages.stream(**request(next_turn(history))) as stream:
        final = await stream.get_final_message()
    created = await client.beta.messages.create(**request(next_turn(history)))

    assert final.input_transformations == []
    assert [b.type for b in final.content] == [b.type for b in created.content]
    assert wire(final)["content"][0]["thinking"] == wire(created)["content"][0]["thinking"]
    assert wire(final)["content"][1]["text"] == wire(created)["content"][1]["text"]
    assert final.usage.input_tokens == created.usage.input_tokens
    assert final.usage.output_tokens == created.usage.output_tokens
    assert sim.responses[-2]["content"] == [b.model_dump(exclude_none=True) for b in final.content]
    fed_back: list[Any] = [*next_turn(history), final.to_param(), {"role": "user", "content": "on"}]
    follow = await client.beta.messages.create(**request(fed_back))
    assert dropped(follow) == []


async def test_the_stream_emits_the_real_event_sequence(client: anthropic.AsyncAnthropic) -> None:
    sim = Simulator(
        script=lambda _: [
            ThinkingBlock("x" * 30, ""),
            "Hello",
            {"type": "tool_use", "name": "read_log", "input": {"path": "/var/log/app.log"}},
        ]
    )
    async with sim.client() as streaming_client:
        stream = await streaming_client.beta.messages.create(
            **request([{"role": "user", "content": "go"}]), stream=True
        )
        events = [event async for event in stream]

    kinds = [e.type if e.type != "content_block_delta" else e.delta.type for e in events]
    assert kinds == [
        "message_start",
        "content_block_start",
        "thinking_delta",
        "thinking_delta",
        "signature_delta",
        "content_block_stop",
        "content_block_start",
        "text_delta",
        "content_block_stop",
        "content_block_start",
        "input_json_delta",
        "input_json_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0].message
    assert (start.content, start.stop_reason, start.input_transformations) == ([], None, [])
    assert events[-2].delta.stop_reason == "tool_use"
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(partial) == {"path": "/var/log/app.log"}


async def test_a_sync_client_creates_the_same_reply(sim: Simulator) -> None:
    with sim.sync_client() as sync_client:
        reply = sync_client.beta.messages.create(**request([{"role": "user", "content": "hi"}]))

    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert sim.verify(request([{"role": "user", "content": "hi"}, wire(reply)])) == [
        BlockCheck((1, 0), "thinking", None)
    ]


# What binds and what does not ---------------------------------------------------------------------


async def test_a_tool_change_drops_every_earlier_block_with_prefix_reason(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)
    more_tools = [*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}]

    reply = await client.beta.messages.create(**request(next_turn(history), tools=more_tools))

    assert dropped(reply) == [(path, PREFIX_MISMATCH) for path in EVERY_THINKING_PATH]


async def test_a_system_change_drops_every_earlier_block_with_prefix_reason(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)

    reply = await client.beta.messages.create(
        **request(next_turn(history), system="You are Ada. Be brief.")
    )

    assert dropped(reply) == [(path, PREFIX_MISMATCH) for path in EVERY_THINKING_PATH]


async def test_a_model_switch_drops_every_earlier_block_with_model_reason(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)

    reply = await client.beta.messages.create(**request(next_turn(history), model=OTHER_MODEL))

    assert dropped(reply) == [(path, MODEL_MISMATCH) for path in EVERY_THINKING_PATH]


async def test_models_of_one_family_read_each_others_blocks() -> None:
    sim = Simulator(
        model_families={MODEL: "sim", OTHER_MODEL: "sim"}, extra_models=["claude-other"]
    )
    async with sim.client() as family_client:
        history = await converse(family_client, THREE_TURNS)
        same_family = await family_client.beta.messages.create(
            **request(next_turn(history), model=OTHER_MODEL)
        )
        other_family = await family_client.beta.messages.create(
            **request(next_turn(history), model="claude-other")
        )

    assert dropped(same_family) == []
    assert dropped(other_family) == [(path, MODEL_MISMATCH) for path in EVERY_THINKING_PATH]


async def test_settings_cache_markers_key_order_and_string_content_never_bind(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)
    marked = json.loads(json.dumps(history), object_pairs_hook=lambda p: dict(reversed(p)))
    marked[0]["content"] = [
        {"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}}
    ]
    marked[4]["content"] = [{"type": "text", "text": "third"}]
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    tools = [{**TOOLS[0], "cache_control": {"type": "ephemeral"}}]

    reply = await client.beta.messages.create(
        **request(
            next_turn(marked),
            system=system,
            tools=tools,
            max_tokens=8192,
            tool_choice={"type": "auto"},
            metadata={"user_id": "u-1"},
            output_config={"effort": "low"},
        )
    )

    assert dropped(reply) == []


async def test_adding_a_deferred_tool_drops_nothing(client: anthropic.AsyncAnthropic) -> None:
    history = await converse(client, THREE_TURNS)
    deferred = {"name": "grep", "input_schema": {"type": "object"}, "defer_loading": True}

    reply = await client.beta.messages.create(
        **request(next_turn(history), tools=[*TOOLS, deferred])
    )

    assert dropped(reply) == []


async def test_removing_a_middle_block_drops_only_blocks_made_while_it_was_present(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)
    history[3]["content"] = history[3]["content"][1:]

    reply = await client.beta.messages.create(**request(next_turn(history)))

    assert dropped(reply) == [("messages.5.content.0", PREFIX_MISMATCH)]


async def test_removing_the_newest_block_or_every_block_drops_nothing(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, THREE_TURNS)
    without_newest = copy.deepcopy(history)
    without_newest[5]["content"] = without_newest[5]["content"][1:]
    without_any = copy.deepcopy(without_newest)
    for i in (1, 3):
        without_any[i]["content"] = without_any[i]["content"][1:]

    assert [c.reason for c in sim.verify(request(without_newest))] == [None, None]
    assert sim.verify(request(without_any)) == []
    reply = await client.beta.messages.create(**request(next_turn(without_newest)))
    assert dropped(reply) == []


async def test_editing_an_earlier_user_message_drops_every_later_block(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)
    history[2]["content"] = "second, edited"

    reply = await client.beta.messages.create(**request(next_turn(history)))

    assert dropped(reply) == [
        ("messages.3.content.0", PREFIX_MISMATCH),
        ("messages.5.content.0", PREFIX_MISMATCH),
    ]


async def test_a_block_made_after_a_drop_binds_to_the_history_without_the_dropped_block(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """VENDOR_RULES 4 and 13 changed the expectation: while the dropped block is still sent, drop
    mode removes every thinking block after it too; once the client removes it, the block made
    without it verifies."""
    history = await converse(client, ["first"])
    more_tools = [*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}]
    messages = next_turn(history)
    reply = await client.beta.messages.create(**request(messages, tools=more_tools))
    messages.append(wire(reply))
    without_dropped = copy.deepcopy(messages)
    without_dropped[1]["content"] = without_dropped[1]["content"][1:]

    checks = sim.verify(request(next_turn(messages), tools=more_tools))
    cleaned = sim.verify(request(next_turn(without_dropped), tools=more_tools))

    assert dropped(reply) == [("messages.1.content.0", PREFIX_MISMATCH)]
    assert checks == [
        BlockCheck((1, 0), "thinking", PREFIX_MISMATCH),
        BlockCheck((3, 0), "thinking", PREFIX_MISMATCH),
    ]
    assert cleaned == [BlockCheck((3, 0), "thinking", None)]


async def test_mid_conversation_system_messages_are_accepted_and_bind_as_prefix(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """VENDOR_RULES 16 changed the expectation: only documented models accept them."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "system", "content": "The user is on call."},
    ]
    reply = await client.beta.messages.create(**request(messages, model=SYSTEM_MODEL))
    history = [*messages, wire(reply)]
    without_system = [history[0], history[2]]

    assert sim.verify(request(history, model=SYSTEM_MODEL)) == [
        BlockCheck((2, 0), "thinking", None)
    ]
    assert sim.verify(request(without_system, model=SYSTEM_MODEL)) == [
        BlockCheck((1, 0), "thinking", PREFIX_MISMATCH)
    ]


# Error mode, betas, bad signatures ----------------------------------------------------------------


async def test_error_mode_refuses_with_the_path_of_the_first_failing_block(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, THREE_TURNS)

    with pytest.raises(
        anthropic.BadRequestError, match=r"messages\.1\.content\.0: .*prefix_binding_mismatch"
    ):
        await client.beta.messages.create(
            **request(next_turn(history), mode="error", system="Changed.")
        )


async def test_absent_block_binding_means_error_mode(client: anthropic.AsyncAnthropic) -> None:
    """VENDOR_RULES 8 changed the expectation: a model switch is always a drop, so a changed
    system prompt (a prefix failure) shows the error mode."""
    history = await converse(client, ["first"])
    call = request(next_turn(history), system="Changed.")
    del call["thinking"]["block_binding"]

    with pytest.raises(
        anthropic.BadRequestError, match=r"messages\.1\.content\.0: .*prefix_binding_mismatch"
    ):
        await client.beta.messages.create(**call)


async def test_block_binding_without_the_beta_is_refused(
    client: anthropic.AsyncAnthropic,
) -> None:
    call = request([{"role": "user", "content": "hi"}])
    del call["betas"]

    with pytest.raises(
        anthropic.BadRequestError, match=r"thinking\.block_binding: Extra inputs are not permitted"
    ):
        await client.beta.messages.create(**call)


async def test_without_the_beta_a_reply_carries_no_input_transformations(
    client: anthropic.AsyncAnthropic,
) -> None:
    reply = await client.beta.messages.create(
        **request([{"role": "user", "content": "hi"}], mode=None)
    )

    assert reply.input_transformations is None


def flip_byte(signature: str, at: int) -> str:
    """``signature`` with one byte of its decoded payload changed (same length, still base64)."""
    raw = bytearray(base64.b64decode(signature))
    raw[at] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize(
    ("tamper", "match"),
    [
        (lambda b: b.update(signature=flip_byte(b["signature"], 40)), "Invalid `signature`"),
        (lambda b: b.update(signature=""), "Invalid `signature`"),
        (lambda b: b.update(signature="not base64!"), "Invalid `signature`"),
        (lambda b: b.update(signature="RXJyb3JTaWduYXR1cmU="), "Invalid `signature`"),
        (lambda b: b.update(thinking="I never thought this."), "Invalid `signature`"),
    ],
    ids=["tampered", "empty", "malformed", "foreign", "edited-text"],
)
async def test_a_bad_signature_is_refused_in_drop_mode_too(
    client: anthropic.AsyncAnthropic, tamper: Any, match: str
) -> None:
    history = await converse(client, ["first", "second"])
    tamper(history[3]["content"][0])

    with pytest.raises(anthropic.BadRequestError, match=rf"messages\.3\.content\.0: {match}"):
        await client.beta.messages.create(**request(next_turn(history)))


async def test_a_block_signed_with_another_key_is_refused(client: anthropic.AsyncAnthropic) -> None:
    history = await converse(client, ["first"])
    async with Simulator(key=b"another key").client() as other:
        with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid"):
            await other.beta.messages.create(**request(next_turn(history)))


# Replies: scripts, tools, redacted and omitted thinking -------------------------------------------


async def test_a_script_may_answer_with_blocks_wire_dicts_and_strings() -> None:
    seen: list[dict[str, Any]] = []

    def script(req: dict[str, Any]) -> list[Any]:
        seen.append(req)
        return [
            {"type": "thinking", "thinking": "Check the log."},
            ToolUseBlock("", "read_log", {"path": "/var/log/app.log"}),
            TextBlock("Reading."),
            "Done.",
        ]

    sim = Simulator(script=script)
    async with sim.client() as c:
        reply = await c.beta.messages.create(**request([{"role": "user", "content": "why?"}]))

    assert [b.type for b in reply.content] == ["thinking", "tool_use", "text", "text"]
    tool_use = reply.content[1]
    assert tool_use.id.startswith("toolu_")
    assert tool_use.input == {"path": "/var/log/app.log"}
    assert reply.stop_reason == "tool_use"
    assert seen[0]["messages"] == [{"role": "user", "content": "why?"}]


async def test_a_tool_round_fed_back_verifies_and_a_result_for_another_call_is_refused() -> None:
    def script(req: dict[str, Any]) -> list[Any]:
        if req["messages"][-1]["content"][0].get("type") == "tool_result":
            return [{"type": "thinking", "thinking": "Got it."}, "The log is clean."]
        return [
            {"type": "thinking", "thinking": "Read it."},
            {"type": "tool_use", "name": "read_log"},
        ]

    sim = Simulator(script=script)
    async with sim.client() as c:
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": "?"}]}
        ]
        first = await c.beta.messages.create(**request(messages))
        tool_id = first.content[1].id
        stray = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}
        with pytest.raises(
            anthropic.BadRequestError, match=r"messages\.2\.content\.0: unexpected `tool_use_id`"
        ):
            await c.beta.messages.create(**request([*messages, wire(first), stray]))
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id}]}
        second = await c.beta.messages.create(**request([*messages, wire(first), result]))

    assert first.content[1].input == {}
    assert second.stop_reason == "end_turn"
    assert dropped(second) == []
    assert sim.verify(request([*messages, wire(first), result, wire(second)])) == [
        BlockCheck((1, 0), "thinking", None),
        BlockCheck((3, 0), "thinking", None),
    ]


async def test_a_redacted_thinking_block_from_a_script_is_signed_and_verifies() -> None:
    sim = Simulator(script=lambda _: [{"type": "redacted_thinking"}, "Answer."])
    async with sim.client() as c:
        history = await converse(c, ["first", "second"])
        changed = await c.beta.messages.create(**request(next_turn(history), system="Other."))

    assert history[1]["content"][0]["data"] != ""
    assert sim.verify(request(history)) == [
        BlockCheck((1, 0), "redacted_thinking", None),
        BlockCheck((3, 0), "redacted_thinking", None),
    ]
    assert dropped(changed) == [
        ("messages.1.content.0", PREFIX_MISMATCH),
        ("messages.3.content.0", PREFIX_MISMATCH),
    ]


async def test_omitted_display_returns_empty_text_whose_signature_still_verifies(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
    call = request(messages)
    call["thinking"]["display"] = "omitted"
    reply = await client.beta.messages.create(**call)

    follow = await client.beta.messages.create(**request([*messages, wire(reply), *next_turn([])]))

    assert reply.content[0].thinking == ""
    assert dropped(follow) == []


async def test_with_thinking_off_a_reply_has_no_thinking_blocks(
    client: anthropic.AsyncAnthropic,
) -> None:
    call = request([{"role": "user", "content": "hi"}], mode=None)
    call["thinking"] = {"type": "disabled"}

    reply = await client.beta.messages.create(**call)

    assert [b.type for b in reply.content] == ["text"]


async def test_a_failing_script_answers_a_500_naming_the_failure() -> None:
    def script(_: dict[str, Any]) -> list[Any]:
        raise RuntimeError("boom")

    async with Simulator(script=script).client() as c:
        with pytest.raises(
            anthropic.InternalServerError, match="simulator script failed: RuntimeError: boom"
        ):
            await c.beta.messages.create(**request([{"role": "user", "content": "hi"}]))


async def test_the_script_sees_the_request_as_the_model_does_and_emptied_messages_are_fine(
    client: anthropic.AsyncAnthropic,
) -> None:
    seen: list[dict[str, Any]] = []

    def script(req: dict[str, Any]) -> list[Any]:
        seen.append(req)
        return [{"type": "thinking", "thinking": "Only thinking."}]

    sim = Simulator(script=script)
    async with sim.client() as c:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
        only_thinking = await c.beta.messages.create(**request(messages))
        messages += [wire(only_thinking), {"role": "user", "content": "second"}]
        reply = await c.beta.messages.create(**request(messages, system="Changed."))

    assert dropped(reply) == [("messages.1.content.0", PREFIX_MISMATCH)]
    assert seen[-1]["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": []},
        {"role": "user", "content": "second"},
    ]
    assert seen[-1]["system"] == "Changed."


async def test_each_block_of_a_reply_binds_to_the_reply_blocks_before_it() -> None:
    """VENDOR_RULES 4 changed the expectation: removing the reply's first (oldest) block leaves
    the second in order (no thinking block precedes it); the text between still binds."""
    sim = Simulator(
        script=lambda _: [
            {"type": "thinking", "thinking": "Step one."},
            "Between.",
            {"type": "thinking", "thinking": "Step two."},
            "Answer.",
        ]
    )
    async with sim.client() as c:
        history = await converse(c, ["first"])
    without_first = copy.deepcopy(history)
    del without_first[1]["content"][0]
    without_second = copy.deepcopy(history)
    del without_second[1]["content"][2]

    edited_text = copy.deepcopy(history)
    edited_text[1]["content"][1]["text"] = "Changed."

    assert [c.reason for c in sim.verify(request(history))] == [None, None]
    assert [c.reason for c in sim.verify(request(without_first))] == [None]
    assert [c.reason for c in sim.verify(request(without_second))] == [None]
    assert [c.reason for c in sim.verify(request(edited_text))] == [None, PREFIX_MISMATCH]


# Usage --------------------------------------------------------------------------------------------


async def test_input_tokens_leave_out_dropped_blocks(client: anthropic.AsyncAnthropic) -> None:
    history = await converse(client, THREE_TURNS)
    more_tools = [*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}]
    stripped = copy.deepcopy(history)
    for i in (1, 3, 5):
        stripped[i]["content"] = stripped[i]["content"][1:]

    with_drops = await client.beta.messages.create(**request(next_turn(history), tools=more_tools))
    sent_clean = await client.beta.messages.create(**request(next_turn(stripped), tools=more_tools))

    assert len(dropped(with_drops)) == 3
    assert with_drops.usage.input_tokens == sent_clean.usage.input_tokens
    assert with_drops.usage.output_tokens > 0


# Fault knobs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
async def test_fail_next_answers_the_next_calls_with_the_api_error(
    sim: Simulator,
    client: anthropic.AsyncAnthropic,
    status: int,
    error: type[anthropic.APIStatusError],
    kind: str,
) -> None:
    sim.fail_next(2, status=status)
    sim._check()
    call = request([{"role": "user", "content": "hi"}])

    for _ in range(2):
        with pytest.raises(error) as caught:
            await client.beta.messages.create(**call)
        assert caught.value.status_code == status
        assert caught.value.body == {"type": "error", "error": {"type": kind, "message": ANY}}
    reply = await client.beta.messages.create(**call)

    assert reply.stop_reason == "end_turn"
    assert [c.status for c in sim.calls] == [status, status, 200]
    sim._check()


async def test_a_client_asked_to_retry_gets_through_a_failure(sim: Simulator) -> None:
    sim.fail_next(1, status=529)
    async with sim.client(max_retries=2) as retrying:
        reply = await retrying.beta.messages.create(**request([{"role": "user", "content": "hi"}]))

    assert reply.stop_reason == "end_turn"
    assert [c.status for c in sim.calls] == [529, 200]


def test_fail_next_refuses_a_status_it_cannot_simulate(sim: Simulator) -> None:
    with pytest.raises(
        ValueError, match="status 418 cannot be simulated; use one of 429, 500, 529"
    ):
        sim.fail_next(1, status=418)


async def test_a_forced_drop_takes_only_its_block_and_later_blocks_still_follow_it(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """A dropped block stays in the request as sent, so the block made after it is in order."""
    history = await converse(client, THREE_TURNS)
    sim.force_drop(paths=["messages.3.content.0"], reason="organization_binding_mismatch")
    sim._check()

    reply = await client.beta.messages.create(**request(next_turn(history)))
    again = await client.beta.messages.create(**request(next_turn(history)))
    without = [
        {**m, "content": [b for b in m["content"] if b["type"] != "thinking"]} if i == 3 else m
        for i, m in enumerate(next_turn(history))
    ]
    gap = await client.beta.messages.create(**request(without))

    assert dropped(reply) == [("messages.3.content.0", "organization_binding_mismatch")]
    assert sim.calls[-3].dropped[0].forced is True
    assert dropped(again) == []
    assert dropped(gap) == [("messages.5.content.0", PREFIX_MISMATCH)]


async def test_a_forced_drop_by_predicate_takes_the_chosen_blocks(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, THREE_TURNS)
    sim.force_drop(reason="end_user_binding_mismatch", predicate=lambda i, j, block: i == 5)

    reply = await client.beta.messages.create(**request(next_turn(history)))

    assert dropped(reply) == [("messages.5.content.0", "end_user_binding_mismatch")]


async def test_a_forced_drop_in_error_mode_is_refused_with_its_path(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """VENDOR_RULES 8 changed the expectation: a forced model drop is a drop even in error mode;
    a forced prefix failure is the 400."""
    history = await converse(client, ["first"])
    sim.force_drop(paths=[(1, 0)], reason=MODEL_MISMATCH)
    reply = await client.beta.messages.create(**request(next_turn(history), mode="error"))
    sim.force_drop(paths=[(1, 0)], reason=PREFIX_MISMATCH)

    with pytest.raises(
        anthropic.BadRequestError, match=r"messages\.1\.content\.0: .*prefix_binding_mismatch"
    ):
        await client.beta.messages.create(**request(next_turn(history), mode="error"))
    assert dropped(reply) == [("messages.1.content.0", MODEL_MISMATCH)]


def test_force_drop_refuses_an_unknown_reason_or_path(sim: Simulator) -> None:
    with pytest.raises(ValueError, match="reason 'stale' is not one of"):
        sim.force_drop(reason="stale")
    with pytest.raises(ValueError, match=r"path 'messages\.1' is neither"):
        sim.force_drop(paths=["messages.1"])


async def test_malformed_transformation_entries_reach_the_next_reply_only(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    entries = [{"type": "thinking_dropped", "path": "messages.x.content"}, {"type": "new_kind"}]
    sim.malformed_transformations_next(entries)
    call = request([{"role": "user", "content": "hi"}])

    reply = await client.beta.messages.create(**call)
    later = await client.beta.messages.create(**call)

    assert sim.responses[0]["input_transformations"] == entries
    assert reply.input_transformations is not None
    assert [t.type for t in reply.input_transformations] == ["thinking_dropped", "new_kind"]
    assert later.input_transformations == []


async def test_every_request_is_recorded_with_its_betas_and_reply(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    call = request([{"role": "user", "content": "hi"}], metadata={"user_id": "u-1"})
    body = {k: v for k, v in call.items() if k != "betas"}
    reply = await client.beta.messages.create(**call)
    with pytest.raises(anthropic.BadRequestError):
        await client.beta.messages.create(**{**call, "messages": []})

    assert sim.requests == [body, {**body, "messages": []}]
    assert sim.calls[0].betas == (BINDING_BETA,)
    assert sim.responses[0]["id"] == reply.id
    assert sim.responses[1] == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages: at least one message is required",
        },
    }


async def test_a_drop_is_logged_with_its_paths_and_reasons(
    client: anthropic.AsyncAnthropic,
) -> None:
    history = await converse(client, ["first"])

    with structlog.testing.capture_logs() as logs:
        await client.beta.messages.create(**request(next_turn(history), system="Other."))

    assert [e for e in logs if e["event"] == "simulator_thinking_dropped"] == [
        {
            "event": "simulator_thinking_dropped",
            "log_level": "info",
            "paths": ["messages.1.content.0"],
            "reasons": [PREFIX_MISMATCH],
        }
    ]


# The verifier API ---------------------------------------------------------------------------------


async def test_verify_evaluates_as_drop_mode_without_recording_a_call(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, THREE_TURNS)
    calls = len(sim.calls)

    checks = sim.verify(request(history, mode="error", system="Changed."))

    assert checks == [
        BlockCheck((1, 0), "thinking", PREFIX_MISMATCH),
        BlockCheck((3, 0), "thinking", PREFIX_MISMATCH),
        BlockCheck((5, 0), "thinking", PREFIX_MISMATCH),
    ]
    assert checks[0].path_text == "messages.1.content.0"
    assert len(sim.calls) == calls


async def test_verify_block_says_whether_a_stripped_block_would_still_verify(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, THREE_TURNS)
    block = history[3]["content"][0]
    stripped = copy.deepcopy(history)
    stripped[3]["content"] = stripped[3]["content"][1:]

    assert sim.verify_block(request(stripped), 3, 0, block) is None
    assert sim.verify_block(request(stripped), 3, 1, block) == PREFIX_MISMATCH
    assert sim.verify_block(request(stripped, system="Changed."), 3, 0, block) == PREFIX_MISMATCH
    assert sim.verify_block(request(stripped, model=OTHER_MODEL), 3, 0, block) == MODEL_MISMATCH
    assert (
        sim.verify_block(
            request(stripped), 3, 0, ThinkingBlock(block["thinking"], block["signature"])
        )
        is None
    )


async def test_verify_block_refuses_bad_places_and_unsigned_blocks(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    history = await converse(client, ["first"])
    block = history[1]["content"][0]

    with pytest.raises(IndexError, match="message index 2 out of range"):
        sim.verify_block(request(history), 2, 0, block)
    with pytest.raises(IndexError, match="content index 3 out of range"):
        sim.verify_block(request(history), 1, 3, block)
    with pytest.raises(ValueError, match="only thinking blocks are bound; got a 'text' block"):
        sim.verify_block(request(history), 1, 0, TextBlock("hi"))
    with pytest.raises(InvalidRequest, match=r"messages\.1\.content\.0: Invalid `signature`"):
        sim.verify_block(request(history), 1, 0, {**block, "signature": "x"})


def test_verify_refuses_a_request_the_api_would_refuse(sim: Simulator) -> None:
    with pytest.raises(InvalidRequest, match="messages: at least one message is required"):
        sim.verify(request([]))


async def test_verify_reads_extra_body_as_the_sdk_sends_it(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """A compile's request carries settings the SDK has no keyword for in ``extra_body``; the
    verifier takes the SDK's keyword arguments, so it merges them into the body too."""
    history = await converse(client, ["first", "second"])
    asked = {**request(history), "extra_body": {"top_k": 5}}

    assert [c.reason for c in sim.verify(asked)] == [None, None]
    with pytest.raises(InvalidRequest, match="top_kk: Extra inputs are not permitted"):
        sim.verify({**request(history), "extra_body": {"top_kk": 5}})


# Concurrency --------------------------------------------------------------------------------------


async def test_concurrent_calls_are_all_answered_and_recorded(sim: Simulator) -> None:
    import asyncio

    async with sim.client() as c:
        replies = await asyncio.gather(
            *(
                c.beta.messages.create(**request([{"role": "user", "content": f"n{n}"}]))
                for n in range(20)
            )
        )

    assert sorted(r.content[1].text for r in replies) == sorted(
        f"You said: n{n}" for n in range(20)
    )
    assert len(sim.requests) == len(sim.responses) == 20
    sim._check()


def test_a_forced_drop_is_consumed_once(sim: Simulator) -> None:
    sim.force_drop(reason=PREFIX_MISMATCH)
    with sim.sync_client() as c:
        c.beta.messages.create(**request([{"role": "user", "content": "hi"}]))

    assert sim._faults.forced == []
    sim._check()


# Properties ---------------------------------------------------------------------------------------


async def test_removing_any_one_block_but_the_oldest_fails_every_block_made_after_it(
    sim: Simulator, client: anthropic.AsyncAnthropic
) -> None:
    """VENDOR_RULES 4 changed the expectation: removing the oldest block leaves a valid
    history; removing a later one is a gap (and drop mode removes every block after it)."""
    history = await converse(client, [f"turn {n}" for n in range(5)])
    places = [2 * n + 1 for n in range(5)]

    for k, removed_at in enumerate(places):
        edited = copy.deepcopy(history)
        edited[removed_at]["content"] = edited[removed_at]["content"][1:]
        reasons = {c.path[0]: c.reason for c in sim.verify(request(edited))}

        assert reasons == {
            i: (PREFIX_MISMATCH if n > k > 0 else None) for n, i in enumerate(places) if n != k
        }


MARKABLE = ("text", "tool_use", "tool_result")
"""Block types a client may put a ``cache_control`` marker on (never thinking: a 400)."""

MAX_MARKERS = 4
"""Markers the API accepts in one request."""


def _shuffled(value: Any, data: st.DataObject, marks: list[int] | None = None) -> Any:
    marks = [0] if marks is None else marks
    if isinstance(value, dict):
        keys = data.draw(st.permutations(list(value)))
        out = {k: _shuffled(value[k], data, marks) for k in keys}
        if marks[0] < MAX_MARKERS and out.get("type") in MARKABLE and data.draw(st.booleans()):
            out["cache_control"] = {"type": "ephemeral"}
            marks[0] += 1
        return out
    if isinstance(value, list):
        return [_shuffled(v, data, marks) for v in value]
    return value


@pytest.fixture(scope="module")
def recorded_history() -> tuple[Simulator, list[dict[str, Any]]]:
    sim = Simulator()
    messages: list[dict[str, Any]] = []
    with sim.sync_client() as c:
        for text in THREE_TURNS:
            messages.append({"role": "user", "content": text})
            messages.append(wire(c.beta.messages.create(**request(messages))))
    return sim, messages


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_key_order_and_cache_markers_never_change_a_verdict(
    recorded_history: tuple[Simulator, list[dict[str, Any]]], data: st.DataObject
) -> None:
    sim, history = recorded_history
    shuffled = _shuffled(request(history), data)

    assert [c.reason for c in sim.verify(shuffled)] == [None, None, None]
