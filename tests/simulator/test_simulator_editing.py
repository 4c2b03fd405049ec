"""The simulator's server-side context editing (VENDOR_RULES 29), one or more tests per item,
through the real SDK client: the edits change the model's view, the usage and the prompt cache,
never the binding check, which judges what the client sent."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from helpers import TRANSPORTS, Recorder, sdk_client, transformations, wire_reply

from context_manager.simulator import (
    BINDING_BETA,
    CLEARED_RESULT,
    COMPACTION_BETA,
    EDITING_BETA,
    THINKING_DROPPED,
    THRESHOLD_BETA,
    Simulator,
)

Client = anthropic.AsyncAnthropic
OPUS = "claude-opus-5-5"
READ_LOG = {"name": "read_log", "description": "Read a log.", "input_schema": {"type": "object"}}
GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
BETAS = [BINDING_BETA, EDITING_BETA]
LOG = "line " * 400
"""A tool result big enough that clearing it is worth it."""


def trigger(tokens: int = 10) -> dict[str, Any]:
    return {"type": "input_tokens", "value": tokens}


def clear_tools(**options: Any) -> dict[str, Any]:
    return {"edits": [{"type": "clear_tool_uses_20250919", "trigger": trigger(), **options}]}


def call(messages: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """SDK keyword arguments for one call, in error mode (a correct client loses nothing)."""
    return {
        "model": OPUS,
        "max_tokens": 4096,
        "system": "You are Ada.",
        "thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}},
        "tools": [READ_LOG, GREP],
        "messages": copy.deepcopy(messages),
        "betas": BETAS,
        **settings,
    }


@pytest.fixture
def model() -> Recorder:
    return Recorder()


@pytest.fixture
def sim(model: Recorder) -> Simulator:
    return Simulator(script=model, cache_min_tokens=0)


@pytest.fixture
async def client(sim: Simulator) -> AsyncIterator[Client]:
    async with sim.client() as c:
        yield c


async def tool_rounds(client: Client, tools: list[str]) -> list[dict[str, Any]]:
    """One full tool round per name: the call, its result (``LOG``), the reply to it."""
    messages: list[dict[str, Any]] = []
    for name in tools:
        messages.append({"role": "user", "content": f"please use {name}"})
        calling = await client.beta.messages.create(**call(messages))
        messages.append(wire_reply(calling))
        tool_id = calling.content[-1].id
        result = {"type": "tool_result", "tool_use_id": tool_id, "content": f"{name}: {LOG}"}
        messages.append({"role": "user", "content": [result]})
        messages.append(wire_reply(await client.beta.messages.create(**call(messages))))
    return [*messages, {"role": "user", "content": "and now?"}]


def results(request: dict[str, Any]) -> list[str]:
    """The text of every tool result the model saw, in order."""
    return [
        block["content"][0]["text"] if isinstance(block["content"], list) else block["content"]
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


def inputs(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block["input"]
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]


def thinking_per_message(request: dict[str, Any]) -> list[int]:
    return [
        sum(1 for b in m["content"] if b["type"] == "thinking")
        for m in request["messages"]
        if m["role"] == "assistant"
    ]


def edits_of(message: anthropic.types.beta.BetaMessage) -> list[dict[str, Any]]:
    assert message.context_management is not None
    return [edit.model_dump() for edit in message.context_management.applied_edits]


async def test_clearing_tool_uses_changes_the_models_view_and_reports_it(
    client: Client, model: Recorder
) -> None:
    history = await tool_rounds(client, ["read_log", "read_log", "read_log", "read_log"])
    reply = await client.beta.messages.create(
        **call(history, context_management=clear_tools(keep={"type": "tool_uses", "value": 1}))
    )
    plain = await client.beta.messages.create(**call(history))

    seen = model.seen[-2]
    assert results(seen) == [CLEARED_RESULT] * 3 + [f"read_log: {LOG}"]
    [edit] = edits_of(reply)
    assert edit["type"] == "clear_tool_uses_20250919"
    assert edit["cleared_tool_uses"] == 3
    assert edit["cleared_input_tokens"] == plain.usage.input_tokens - reply.usage.input_tokens > 0
    assert transformations(reply) == []  # the client sent its full history: nothing fails


async def test_the_trigger_clear_at_least_keep_exclusions_and_inputs_are_honoured(
    client: Client, model: Recorder
) -> None:
    history = await tool_rounds(client, ["read_log", "grep", "read_log", "grep"])
    high = await client.beta.messages.create(
        **call(history, context_management=clear_tools(trigger=trigger(10**9)))
    )
    too_little = await client.beta.messages.create(
        **call(
            history,
            context_management=clear_tools(clear_at_least={"type": "input_tokens", "value": 10**6}),
        )
    )
    excluded = await client.beta.messages.create(
        **call(
            history,
            context_management=clear_tools(
                keep={"type": "tool_uses", "value": 1},
                exclude_tools=["grep"],
                clear_tool_inputs=True,
            ),
        )
    )

    assert edits_of(high) == []
    assert edits_of(too_little) == []
    assert results(model.seen[-2]) == [
        f"{n}: {LOG}" for n in ("read_log", "grep", "read_log", "grep")
    ]
    seen = model.seen[-1]
    assert results(seen) == [CLEARED_RESULT, f"grep: {LOG}", CLEARED_RESULT, f"grep: {LOG}"]
    assert inputs(seen) == [{}, {}, {}, {}]
    assert edits_of(excluded)[0]["cleared_tool_uses"] == 2


async def test_clearing_thinking_keeps_the_last_turns_and_judges_what_the_client_sent(
    client: Client, model: Recorder
) -> None:
    history = await tool_rounds(client, ["read_log", "grep"])
    keep_one = {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
        ]
    }
    reply = await client.beta.messages.create(**call(history, context_management=keep_one))
    keep_all = await client.beta.messages.create(
        **call(
            history,
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        )
    )

    assert thinking_per_message(model.seen[-2]) == [0, 0, 1, 1]  # one turn: call and answer
    assert edits_of(reply)[0]["cleared_thinking_turns"] == 1
    assert edits_of(reply)[0]["cleared_input_tokens"] > 0
    assert transformations(reply) == []
    assert edits_of(keep_all) == []
    assert thinking_per_message(model.seen[-1]) == [1, 1, 1, 1]
    # the reply's own thinking was made on the full history: it verifies on the next call
    later = await client.beta.messages.create(
        **call([*history, wire_reply(reply), {"role": "user", "content": "more"}])
    )
    assert [t for t, _, _ in transformations(later) if t == THINKING_DROPPED] == []


async def test_clear_thinking_needs_thinking_and_comes_first(client: Client) -> None:
    both = {
        "edits": [
            {"type": "clear_tool_uses_20250919"},
            {"type": "clear_thinking_20251015"},
        ]
    }
    with pytest.raises(anthropic.BadRequestError, match="must be the first edit"):
        await client.beta.messages.create(
            **call([{"role": "user", "content": "hi"}], context_management=both)
        )
    with pytest.raises(anthropic.BadRequestError, match="needs thinking to be enabled"):
        await client.beta.messages.create(
            **call(
                [{"role": "user", "content": "hi"}],
                thinking={"type": "disabled"},
                context_management={"edits": [{"type": "clear_thinking_20251015"}]},
            )
        )


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stream_reports_the_applied_edits_on_its_final_message_delta(
    transport: str,
) -> None:
    sim = Simulator()
    async with sdk_client(sim, transport) as client:
        history = await tool_rounds(client, ["read_log", "read_log"])
        settings = call(
            history, context_management=clear_tools(keep={"type": "tool_uses", "value": 0})
        )
        events = [e async for e in await client.beta.messages.create(**settings, stream=True)]
        async with client.beta.messages.stream(**settings) as stream:
            final = await stream.get_final_message()

    start = next(e for e in events if e.type == "message_start")
    delta = next(e for e in events if e.type == "message_delta")
    assert start.message.context_management is None
    assert delta.context_management is not None
    assert delta.context_management.applied_edits[0].cleared_tool_uses == 2
    assert edits_of(final)[0]["cleared_tool_uses"] == 2


async def test_context_editing_cannot_be_combined_with_compaction_and_needs_its_beta(
    client: Client,
) -> None:
    history = [{"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError, match="cannot be combined with `compaction`"):
        await client.beta.messages.create(
            **call(
                history,
                betas=[*BETAS, COMPACTION_BETA],
                compaction={"type": "summarize"},
                context_management=clear_tools(),
            )
        )
    with pytest.raises(anthropic.BadRequestError, match=EDITING_BETA):
        await client.beta.messages.create(
            **call(history, betas=[BINDING_BETA], context_management=clear_tools())
        )


async def test_threshold_compaction_alone_needs_only_its_own_beta(client: Client) -> None:
    """pydantic-ai sends ``compact_20260112`` under ``compact-2026-01-12`` alone (recorded 200s);
    a clearing edit beside it still needs context editing's beta."""
    history = [{"role": "user", "content": "hi"}]
    compact = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}

    reply = await client.beta.messages.create(
        **call(
            history, betas=[BINDING_BETA, THRESHOLD_BETA], context_management={"edits": [compact]}
        )
    )

    assert reply.role == "assistant"
    with pytest.raises(anthropic.BadRequestError, match=f"edits.1: .*{EDITING_BETA}"):
        await client.beta.messages.create(
            **call(
                history,
                betas=[BINDING_BETA, THRESHOLD_BETA],
                context_management={"edits": [compact, clear_tools()["edits"][0]]},
            )
        )


async def test_count_tokens_counts_the_edited_request_and_the_original(client: Client) -> None:
    history = await tool_rounds(client, ["read_log", "read_log"])
    asked = call(history, context_management=clear_tools(keep={"type": "tool_uses", "value": 0}))
    asked.pop("max_tokens")
    counted = await client.beta.messages.count_tokens(**asked)
    asked.pop("context_management")
    whole = await client.beta.messages.count_tokens(**asked)

    assert counted.context_management is not None
    assert counted.context_management.original_input_tokens == whole.input_tokens
    assert counted.input_tokens < whole.input_tokens


async def test_each_clear_invalidates_the_prompt_cache_from_the_cleared_point(
    client: Client,
) -> None:
    history = await tool_rounds(client, ["read_log", "read_log", "read_log"])
    marked = copy.deepcopy(history)
    marked[-1] = {
        "role": "user",
        "content": [{"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}}],
    }
    first = await client.beta.messages.create(**call(marked))
    again = await client.beta.messages.create(**call(marked))
    cleared = await client.beta.messages.create(
        **call(marked, context_management=clear_tools(keep={"type": "tool_uses", "value": 2}))
    )
    cleared_again = await client.beta.messages.create(
        **call(marked, context_management=clear_tools(keep={"type": "tool_uses", "value": 2}))
    )

    whole = first.usage.cache_creation_input_tokens + first.usage.input_tokens
    assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens > 0
    assert cleared.usage.cache_read_input_tokens < again.usage.cache_read_input_tokens
    assert cleared.usage.cache_creation_input_tokens > 0  # one write from the cleared point on
    assert cleared_again.usage.cache_read_input_tokens == cleared.usage.cache_creation_input_tokens
    assert whole > cleared.usage.cache_creation_input_tokens
