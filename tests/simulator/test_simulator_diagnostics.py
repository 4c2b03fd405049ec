"""The simulator's cache diagnostics, through the real SDK client.

What a user of the simulator can rely on: a request carrying ``diagnostics`` has its fingerprint
kept under its response's id; a later request naming that id gets back the first point where its
prefix diverged (``model_changed``, ``system_changed``, ``tools_changed``, ``messages_changed``
with the missed tokens; ``unavailable`` for another prompt setting; ``previous_message_not_found``),
or ``diagnostics: null`` when it only appended, streamed or not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from helpers import TRANSPORTS, sdk_client, wire_reply

from context_manager.simulator import BINDING_BETA, PREFIX_MISMATCH, Simulator

MODEL = "claude-opus-5-5"
OTHER_MODEL = "claude-fable-5-1"
SYSTEM = "You are Ada, the on-call agent."
TOOLS = [{"name": "read_log", "description": "Read a log.", "input_schema": {"type": "object"}}]
MORE_TOOLS = [*TOOLS, {"name": "page", "description": "Page.", "input_schema": {"type": "object"}}]


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture(params=TRANSPORTS)
async def client(
    request: pytest.FixtureRequest, sim: Simulator
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with sdk_client(sim, request.param) as sdk:
        yield sdk


def body(messages: list[dict[str, Any]], previous: str | None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2048,
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": messages,
        "diagnostics": {"previous_message_id": previous},
    }
    return {**out, **fields}


def miss_type(message: anthropic.types.beta.BetaMessage) -> str | None:
    """The reply's ``cache_miss_reason.type`` (``None``: no divergence reported)."""
    reason = message.diagnostics.cache_miss_reason if message.diagnostics else None
    return None if reason is None else reason.type


async def first_turn(
    client: anthropic.AsyncAnthropic, **fields: Any
) -> tuple[list[dict[str, Any]], anthropic.types.beta.BetaMessage]:
    messages = [{"role": "user", "content": "What failed overnight?"}]
    reply = await client.beta.messages.create(**body(messages, None, **fields))
    return [*messages, wire_reply(reply), {"role": "user", "content": "And now?"}], reply


async def reason_after(
    client: anthropic.AsyncAnthropic, stream: bool = False, **changes: Any
) -> dict[str, Any] | None:
    messages, reply = await first_turn(client)
    request = body(changes.pop("messages", messages), reply.id, **changes)
    if stream:
        async with client.beta.messages.stream(**request) as events:
            second = await events.get_final_message()
    else:
        second = await client.beta.messages.create(**request)
    if second.diagnostics is None:
        return None
    reason = second.diagnostics.cache_miss_reason
    return None if reason is None else reason.model_dump()


async def test_a_first_turn_opts_in_with_a_null_id_and_reports_nothing(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    _, reply = await first_turn(client)
    assert reply.diagnostics is None
    assert len(sim.diagnostics) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_that_only_appends_reports_no_divergence(
    client: anthropic.AsyncAnthropic, stream: bool
) -> None:
    assert await reason_after(client, stream=stream) is None


async def test_a_model_switch_is_model_changed_with_every_token_missed(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    reason = await reason_after(client, model=OTHER_MODEL)
    assert reason is not None
    assert reason["type"] == "model_changed"
    first_input = sim.responses[0]["usage"]["input_tokens"]
    assert reason["cache_missed_input_tokens"] == first_input


async def test_new_system_text_is_system_changed(client: anthropic.AsyncAnthropic) -> None:
    reason = await reason_after(client, system=SYSTEM + " Be brief.")
    assert reason is not None
    assert reason["type"] == "system_changed"
    assert reason["cache_missed_input_tokens"] > 0


async def test_an_added_tool_is_tools_changed(client: anthropic.AsyncAnthropic) -> None:
    reason = await reason_after(client, tools=MORE_TOOLS)
    assert reason is not None
    assert reason["type"] == "tools_changed"


async def test_reordered_tools_are_tools_changed(client: anthropic.AsyncAnthropic) -> None:
    messages, reply = await first_turn(client)
    await client.beta.messages.create(**body(messages, reply.id, tools=MORE_TOOLS))
    third = await client.beta.messages.create(
        **body(messages, reply.id, tools=list(reversed(MORE_TOOLS)))
    )
    assert miss_type(third) == "tools_changed"


async def test_an_edited_earlier_message_is_messages_changed_with_the_tokens_after_it(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    messages, _ = await first_turn(client)
    edited = [{"role": "user", "content": "What failed last night?"}, *messages[1:]]
    reason = await reason_after(client, messages=edited)
    assert reason is not None
    assert reason["type"] == "messages_changed"
    # the first message itself changed: nothing of the first request's messages is kept
    tokens = sim.responses[0]["usage"]["input_tokens"]
    assert 0 < reason["cache_missed_input_tokens"] < tokens


async def test_a_cache_marker_moved_is_no_divergence(client: anthropic.AsyncAnthropic) -> None:
    messages, _ = await first_turn(client)
    marked = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "What failed overnight?",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        *messages[1:],
    ]
    assert await reason_after(client, messages=marked) is None


async def test_another_prompt_setting_is_unavailable(client: anthropic.AsyncAnthropic) -> None:
    reason = await reason_after(client, thinking={"type": "adaptive"})
    assert reason == {"type": "unavailable"}


async def test_an_unknown_response_id_is_previous_message_not_found(
    client: anthropic.AsyncAnthropic,
) -> None:
    messages, _ = await first_turn(client)
    reply = await client.beta.messages.create(**body(messages, "msg_never_seen"))
    assert miss_type(reply) == "previous_message_not_found"


async def test_a_request_without_diagnostics_keeps_no_fingerprint(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    messages = [{"role": "user", "content": "What failed overnight?"}]
    request = body(messages, None)
    del request["diagnostics"]
    reply = await client.beta.messages.create(**request)
    assert reply.diagnostics is None
    assert "diagnostics" not in sim.responses[-1]
    follow = [*messages, wire_reply(reply), {"role": "user", "content": "And now?"}]
    second = await client.beta.messages.create(**body(follow, reply.id))
    assert miss_type(second) == "previous_message_not_found"


async def test_another_organization_does_not_find_the_fingerprint(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    messages, reply = await first_turn(client)
    sim.organization = "org-elsewhere"
    second = await client.beta.messages.create(**body(messages, reply.id))
    assert miss_type(second) == "previous_message_not_found"


async def test_a_block_the_provider_dropped_and_the_client_then_left_out_is_no_divergence(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    binding = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    messages, reply = await first_turn(client, thinking=binding, betas=[BINDING_BETA])
    sim.force_drop([(1, 0)], PREFIX_MISMATCH)
    second = await client.beta.messages.create(
        **body(messages, reply.id, thinking=binding), betas=[BINDING_BETA]
    )
    assert [t.type for t in second.input_transformations or []] == ["thinking_dropped"]
    without = [
        messages[0],
        {"role": "assistant", "content": messages[1]["content"][1:]},
        messages[2],
        wire_reply(second),
        {"role": "user", "content": "Thanks."},
    ]
    third = await client.beta.messages.create(
        **body(without, second.id, thinking=binding), betas=[BINDING_BETA]
    )
    assert third.diagnostics is None


@pytest.mark.parametrize(
    ("diagnostics", "message"),
    [
        ("msg_1", "diagnostics: Input should be an object"),
        ({"previous_message_id": 7}, "diagnostics.previous_message_id"),
        ({"previous_message_id": None, "x": 1}, "diagnostics.x: Extra inputs"),
    ],
)
def test_a_malformed_diagnostics_field_is_a_400(diagnostics: Any, message: str) -> None:
    sim = Simulator()
    request = body([{"role": "user", "content": "hi"}], None, diagnostics=diagnostics)
    with sim.sync_client() as client, pytest.raises(anthropic.BadRequestError, match=message):
        client.beta.messages.create(**request)


def test_the_ledger_forgets_the_oldest_fingerprint_past_its_capacity() -> None:
    sim = Simulator()
    sim.diagnostics.capacity = 2
    with sim.sync_client() as client:
        ids = [
            client.beta.messages.create(**body([{"role": "user", "content": "hi"}], None)).id
            for _ in range(3)
        ]
        again = client.beta.messages.create(**body([{"role": "user", "content": "hi"}], ids[0]))
    assert miss_type(again) == "previous_message_not_found"
    sim._check()
