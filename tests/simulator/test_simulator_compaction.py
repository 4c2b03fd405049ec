"""The simulator's on-demand compaction (VENDOR_RULES 23-28), one or more tests per rule, through
the real SDK client: the compaction request and its refusals, swapping the block in, the kept
turns' thinking, changes around a compaction, background swaps and threshold compaction."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anthropic
import pytest
from helpers import TRANSPORTS, Recorder, sdk_client, transformations, wire_reply

from context_manager.simulator import (
    BINDING_BETA,
    COMPACTION_BETA,
    EDITING_BETA,
    OUTPUT_CONFIG_BETA,
    PREFIX_MISMATCH,
    THINKING_DROPPED,
    TOOL_CHANGES_BETA,
    Simulator,
)

Client = anthropic.AsyncAnthropic
OPUS = "claude-opus-5-5"
MYTHOS = "claude-mythos-5-1"
"""Takes on-demand compaction but runs no prefix check: no preserved thinking (rule 25 a)."""
HAIKU = "claude-haiku-5-5"
SYSTEM = "You are Ada."
READ_LOG: dict[str, Any] = {
    "name": "read_log",
    "description": "Read a log.",
    "input_schema": {"type": "object"},
}
GREP: dict[str, Any] = {"name": "grep", "input_schema": {"type": "object"}, "defer_loading": True}
BETAS = [BINDING_BETA, COMPACTION_BETA, TOOL_CHANGES_BETA]
SUMMARIZE = {"type": "summarize"}


def call(
    messages: list[dict[str, Any]],
    *,
    mode: str = "error",
    model: str = OPUS,
    system: Any = SYSTEM,
    tools: list[dict[str, Any]] | None = None,
    betas: Iterable[str] = BETAS,
    **settings: Any,
) -> dict[str, Any]:
    """SDK keyword arguments for one call, in error mode unless told."""
    return {
        "model": model,
        "max_tokens": 4096,
        "system": system,
        "thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": mode}},
        "tools": copy.deepcopy([READ_LOG] if tools is None else tools),
        "messages": copy.deepcopy(messages),
        "betas": list(betas),
        **settings,
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def drops(message: anthropic.types.beta.BetaMessage) -> list[tuple[str, str]]:
    return [(p, r) for t, p, r in transformations(message) if t == THINKING_DROPPED]


def block_of(reply: anthropic.types.beta.BetaMessage) -> dict[str, Any]:
    """The compaction block of a compaction reply, as a client sends it back."""
    assert reply.stop_reason == "compaction"
    assert len(reply.content) == 1
    block = reply.content[0].model_dump(exclude_none=True)
    assert set(block) == {"type", "content", "signature"}
    return block


def summary(block: dict[str, Any]) -> dict[str, Any]:
    """The block in its own assistant message, as rule 24 allows."""
    return {"role": "assistant", "content": [block]}


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture
async def client(sim: Simulator) -> AsyncIterator[Client]:
    async with sim.client() as c:
        yield c


async def converse(
    client: Client, turns: Iterable[str], history: list[dict[str, Any]] | None = None, **head: Any
) -> list[dict[str, Any]]:
    """A real history: each user turn sent, each reply fed back."""
    messages = list(history or [])
    for text in turns:
        messages.append(user(text))
        reply = await client.beta.messages.create(**call(messages, **head))
        messages.append(wire_reply(reply))
    return messages


async def compact(client: Client, messages: list[dict[str, Any]], **head: Any) -> dict[str, Any]:
    head = {"compaction": SUMMARIZE, **head}
    return block_of(await client.beta.messages.create(**call(messages, **head)))


async def kept_setup(client: Client, **head: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Compact exactly the ``messages`` of a request already sent: the block and the kept turn
    (the reply to that request, with its thinking)."""
    history = await converse(client, ("first", "second"), **head)
    sent = [*history, user("third")]
    kept = wire_reply(await client.beta.messages.create(**call(sent, **head)))
    assert kept["content"][0]["type"] == "thinking"
    return await compact(client, sent, **head), [kept]


def refused(err: pytest.ExceptionInfo[anthropic.APIStatusError]) -> tuple[str, str | None]:
    """The message and ``error.details.error_code`` of a refusal."""
    body = err.value.body
    assert isinstance(body, dict)
    error = body["error"]
    return str(error["message"]), (error.get("details") or {}).get("error_code")


# 23: the compaction request ----------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_compaction_request_returns_one_signed_block_and_costs_only_in_iterations(
    transport: str,
) -> None:
    sim = Simulator()
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ("first", "second"))
        reply = await client.beta.messages.create(**call(history, compaction=SUMMARIZE))

    block = block_of(reply)
    assert block["content"].startswith("Summary of 4 messages (digest ")
    assert "user: second" in block["content"]
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (0, 0)
    assert reply.usage.cache_read_input_tokens == reply.usage.cache_creation_input_tokens == 0
    assert reply.usage.iterations is not None
    assert len(reply.usage.iterations) == 1
    cost = reply.usage.iterations[0]
    assert cost.type == "compaction"
    assert cost.input_tokens > 0
    assert cost.output_tokens > 0


async def test_the_summary_is_a_deterministic_function_of_what_it_covers(client: Client) -> None:
    history = await converse(client, ("first", "second"))
    again = await compact(client, history)
    once = await compact(client, history)
    other = await compact(client, [*history[:2], user("something else")])
    told = await compact(
        client, history, compaction={"type": "summarize", "instructions": "Keep names."}
    )

    assert once["content"] == again["content"]
    assert once["signature"] != again["signature"]
    assert other["content"] != once["content"]
    assert told["content"].endswith("Instructions: Keep names.")


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"context_management": {"edits": []}}, "context_management"),
        ({"stop_sequences": ["END"]}, "stop_sequences"),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
            "output_config.format",
        ),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"tool_choice": {"type": "tool", "name": "read_log"}}, "tool_choice"),
        (
            {"output_config": {"task_budget": {"type": "tokens", "total": 9000, "remaining": 10}}},
            "output_config.task_budget.remaining",
        ),
        (
            {"compaction": {"type": "summarize", "instructions": "x" * 16_385}},
            "compaction.instructions",
        ),
    ],
)
async def test_a_compaction_request_refuses_what_rule_23_rejects(
    client: Client, setting: dict[str, Any], named: str
) -> None:
    history = await converse(client, ("first",))
    kwargs = {"compaction": SUMMARIZE, **setting}
    betas = [*BETAS, EDITING_BETA]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(**call(history, betas=betas, **kwargs))
    assert refused(err)[0].startswith(named)


async def test_a_compaction_request_with_an_open_tool_call_or_nothing_to_summarize_is_refused(
    client: Client,
) -> None:
    calling = await client.beta.messages.create(**call([user("please use read_log")]))
    assert calling.stop_reason == "tool_use"
    history = [user("please use read_log"), wire_reply(calling)]
    block = await compact(client, await converse(client, ("first",)))

    with pytest.raises(anthropic.BadRequestError) as open_call:
        await client.beta.messages.create(**call(history, compaction=SUMMARIZE))
    with pytest.raises(anthropic.BadRequestError) as nothing:
        await client.beta.messages.create(
            **call([{"role": "user", "content": [block]}], compaction=SUMMARIZE)
        )

    assert "no result yet" in refused(open_call)[0]
    assert refused(nothing)[1] == "compaction_nothing_to_summarize"


async def test_compaction_needs_its_beta_and_a_model_that_supports_it(client: Client) -> None:
    history = await converse(client, ("first",))
    with pytest.raises(anthropic.BadRequestError) as no_beta:
        await client.beta.messages.create(
            **call(history, betas=[BINDING_BETA], compaction=SUMMARIZE)
        )
    with pytest.raises(anthropic.BadRequestError) as haiku:
        await client.beta.messages.create(**call(history, model=HAIKU, compaction=SUMMARIZE))

    assert COMPACTION_BETA in refused(no_beta)[0]
    assert refused(haiku)[0] == f"model: `{HAIKU}` does not support on-demand compaction"


@pytest.mark.parametrize(
    "stop_reason",
    ["max_tokens", "model_context_window_exceeded", "tool_use", "refusal", "end_turn"],
)
async def test_a_scripted_failed_compaction_is_a_200_with_empty_content(
    sim: Simulator, client: Client, stop_reason: str
) -> None:
    history = await converse(client, ("first",))
    sim.fail_compaction_next(1, stop_reason)
    ordinary = await client.beta.messages.create(**call([*history, user("next")]))
    failed = await client.beta.messages.create(**call(history, compaction=SUMMARIZE))
    after = await client.beta.messages.create(**call(history, compaction=SUMMARIZE))

    assert ordinary.stop_reason == "end_turn"  # an ordinary call does not consume the knob
    assert (failed.stop_reason, failed.content) == (stop_reason, [])
    assert after.stop_reason == "compaction"


async def test_a_scripted_unavailable_compaction_is_a_529_with_its_error_code(
    sim: Simulator, client: Client
) -> None:
    history = await converse(client, ("first",))
    sim.fail_compaction_next()
    with pytest.raises(anthropic.APIStatusError) as err:
        await client.beta.messages.create(**call(history, compaction=SUMMARIZE))

    assert err.value.status_code == 529
    assert err.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert refused(err)[1] == "compaction_unavailable"
    with pytest.raises(ValueError, match="is not one of"):
        sim.fail_compaction_next(1, "pause_turn")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_streamed_compaction_sends_the_whole_block_in_one_content_block_start(
    transport: str,
) -> None:
    sim = Simulator()
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ("first",))
        events = [
            event
            async for event in await client.beta.messages.create(
                **call(history, compaction=SUMMARIZE, stream=True)
            )
        ]
        async with client.beta.messages.stream(**call(history, compaction=SUMMARIZE)) as stream:
            final = await stream.get_final_message()

    kinds = [event.type for event in events]
    assert kinds.count("content_block_start") == 1
    assert "content_block_delta" not in kinds
    start = next(event for event in events if event.type == "content_block_start")
    assert start.content_block.type == "compaction"
    assert start.content_block.content.startswith("Summary of 2 messages")
    assert final.stop_reason == "compaction"
    assert final.content[0].type == "compaction"
    assert final.usage.iterations is not None
    assert final.usage.iterations[0].type == "compaction"


# 24: swapping the block in -----------------------------------------------------------------------


async def test_the_block_goes_first_alone_or_as_the_first_block_of_the_first_message(
    client: Client,
) -> None:
    block, kept = await kept_setup(client)
    own = await client.beta.messages.create(**call([summary(block), *kept, user("fourth")]))
    history = await converse(client, ("first",))
    alone = await compact(client, history)
    merged = await client.beta.messages.create(
        **call([{"role": "user", "content": [alone, {"type": "text", "text": "go on"}]}])
    )

    assert drops(own) == []
    assert own.stop_reason == "end_turn"
    assert merged.stop_reason == "end_turn"


async def test_a_summarized_message_left_in_front_of_the_block_is_misplaced(
    client: Client,
) -> None:
    history = await converse(client, ("first", "second"))
    block = await compact(client, history)
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(**call([user("first"), summary(block), user("third")]))
    assert refused(err)[1] == "compaction_block_misplaced"


async def test_two_blocks_in_one_request_are_refused(client: Client) -> None:
    history = await converse(client, ("first",))
    one, two = await compact(client, history), await compact(client, history)
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(
            **call([{"role": "user", "content": [one, two, {"type": "text", "text": "go"}]}])
        )
    assert "one compaction block" in refused(err)[0]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"signature": "Zm9yZ2Vk"}, "compaction_signature_invalid"),
        ({"content": "A summary I wrote myself."}, "compaction_content_mismatch"),
        ({"citations": None}, None),
    ],
)
async def test_the_block_must_come_back_byte_exact(
    client: Client, change: dict[str, Any], code: str | None
) -> None:
    history = await converse(client, ("first",))
    block = {**await compact(client, history), **change}
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(**call([summary(block), user("second")]))
    message, error_code = refused(err)
    assert error_code == code
    if code is None:
        assert message.startswith("messages.0.content.0.citations: Extra inputs")


async def test_every_request_carrying_a_block_needs_the_beta(client: Client) -> None:
    history = await converse(client, ("first",))
    block = await compact(client, history)
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(
            **call([summary(block), user("second")], betas=[BINDING_BETA])
        )
    assert "'compaction' is not an expected block type" in refused(err)[0]


async def test_compacting_again_covers_the_old_block_and_what_follows_it(client: Client) -> None:
    block, kept = await kept_setup(client)
    swapped = await converse(client, ("fourth",), [summary(block), *kept])
    newer = await compact(client, swapped)
    sent = [summary(newer), user("fifth")]
    reply = await client.beta.messages.create(**call(sent))

    assert "assistant: [earlier summary]" in newer["content"]
    assert reply.stop_reason == "end_turn"


async def test_a_cache_marker_on_the_block_is_a_breakpoint_after_the_summary() -> None:
    sim = Simulator(cache_min_tokens=0)
    async with sim.client() as client:
        history = await converse(client, ("first",))
        block = {**await compact(client, history), "cache_control": {"type": "ephemeral"}}
        first = await client.beta.messages.create(**call([summary(block), user("second")]))
        second = await client.beta.messages.create(**call([summary(block), user("other")]))

    assert first.usage.cache_creation_input_tokens > 0
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


async def test_count_tokens_ignores_the_compaction_parameter(client: Client) -> None:
    history = await converse(client, ("first",))
    plain = call(history)
    plain.pop("max_tokens")
    asked = await client.beta.messages.count_tokens(**{**plain, "compaction": SUMMARIZE})
    counted = await client.beta.messages.count_tokens(**plain)
    assert asked.input_tokens == counted.input_tokens > 0


# 25: the kept turns' thinking --------------------------------------------------------------------


async def test_the_kept_turns_thinking_stays_valid_after_the_swap(client: Client) -> None:
    block, kept = await kept_setup(client)
    reply = await client.beta.messages.create(**call([summary(block), *kept, user("fourth")]))
    assert drops(reply) == []


async def test_thinking_made_after_the_block_is_bound_to_it(client: Client) -> None:
    history = await converse(client, ("first", "second"))
    block = await compact(client, history)
    after = wire_reply(await client.beta.messages.create(**call([summary(block), user("third")])))
    swapped = await client.beta.messages.create(
        **call([summary(block), user("third"), after, user("fourth")])
    )
    unswapped = await client.beta.messages.create(
        **call([*history, user("third"), after, user("fourth")], mode="drop_block")
    )

    assert drops(swapped) == []
    assert drops(unswapped) == [("messages.5.content.0", PREFIX_MISMATCH)]


async def test_a_compaction_on_a_model_without_preserved_thinking_breaks_the_kept_thinking(
    client: Client,
) -> None:
    history = await converse(client, ("first", "second"))
    sent = [*history, user("third")]
    kept = wire_reply(await client.beta.messages.create(**call(sent)))
    block = await compact(client, sent, model=MYTHOS)
    swapped = [summary(block), kept, user("fourth")]

    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(**call(swapped))
    dropped = await client.beta.messages.create(**call(swapped, mode="drop_block"))

    assert refused(err)[0].startswith("messages.1.content.0: Invalid `signature`")
    assert drops(dropped) == [("messages.1.content.0", PREFIX_MISMATCH)]


async def test_kept_turns_sent_changed_or_merged_into_the_summary_lose_their_thinking(
    client: Client,
) -> None:
    block, kept = await kept_setup(client)
    changed = copy.deepcopy(kept)
    changed[0]["content"].append({"type": "text", "text": "An extra line."})
    history = await converse(client, ("first", "second"))
    same_role = await compact(client, history)  # ends on an assistant turn
    kept_after = wire_reply(await client.beta.messages.create(**call([*history, user("x")])))

    edited = await client.beta.messages.create(
        **call(
            [
                summary(block),
                *changed,
                user("a"),
                {"role": "assistant", "content": "ok"},
                user("b"),
            ],
            mode="drop_block",
        )
    )
    skipped = await client.beta.messages.create(
        **call([{"role": "user", "content": [same_role]}, kept_after, user("y")], mode="drop_block")
    )

    assert drops(edited) == []  # the kept block precedes the change: still valid (rule 5)
    assert drops(skipped) == [("messages.1.content.0", PREFIX_MISMATCH)]  # user "x" skipped


async def test_a_first_kept_message_with_the_last_summarized_role_is_merged_into_the_summary(
    client: Client,
) -> None:
    history = await converse(client, ("first",))
    sent = [*history, user("second, part one"), user("second, part two")]
    kept = wire_reply(await client.beta.messages.create(**call(sent)))
    block = await compact(client, sent[:-1])  # ends on the user's first part
    reply = await client.beta.messages.create(
        **call([summary(block), sent[-1], kept, user("third")], mode="drop_block")
    )
    assert drops(reply) == [("messages.2.content.0", PREFIX_MISMATCH)]


async def test_a_different_system_on_the_compaction_request_breaks_the_kept_thinking(
    client: Client,
) -> None:
    history = await converse(client, ("first", "second"))
    sent = [*history, user("third")]
    kept = wire_reply(await client.beta.messages.create(**call(sent)))
    block = await compact(client, sent, system="You are Bea.", mode="drop_block")
    other_tools = await compact(
        client, sent, tools=[READ_LOG, {**GREP, "defer_loading": False}], mode="drop_block"
    )

    changed = await client.beta.messages.create(
        **call([summary(block), kept, user("fourth")], mode="drop_block")
    )
    tools_changed = await client.beta.messages.create(
        **call([summary(other_tools), kept, user("fourth")], mode="drop_block")
    )
    assert drops(changed) == [("messages.1.content.0", PREFIX_MISMATCH)]
    assert drops(tools_changed) == [("messages.1.content.0", PREFIX_MISMATCH)]


async def test_the_checked_prefix_starts_at_the_newest_block(client: Client) -> None:
    block, kept = await kept_setup(client)
    swapped = await converse(client, ("fourth", "fifth"), [summary(block), *kept])
    newer = await compact(client, swapped)
    after = await converse(client, ("sixth", "seventh"), [summary(newer)])
    reply = await client.beta.messages.create(**call([*after, user("eighth")]))
    assert drops(reply) == []


# 26: changes around a compaction -----------------------------------------------------------------


def tool_lister(request: dict[str, Any]) -> list[dict[str, Any]]:
    names = ",".join(tool["name"] for tool in request["tools"])
    return [
        {"type": "thinking", "thinking": "Listing."},
        {"type": "text", "text": f"tools={names}"},
    ]


async def test_a_tool_added_inside_the_summarized_range_stops_applying_until_stated_again() -> None:
    sim = Simulator(script=tool_lister)
    addition = {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}],
    }
    tools = [READ_LOG, GREP]
    async with sim.client() as client:
        history = [user("first"), addition]
        history.append(wire_reply(await client.beta.messages.create(**call(history, tools=tools))))
        block = await compact(client, history, tools=tools)
        after = await client.beta.messages.create(
            **call([summary(block), user("second")], tools=tools)
        )
        stated = await client.beta.messages.create(
            **call([summary(block), user("second"), addition], tools=tools)
        )

    assert history[-1]["content"][1]["text"] == "tools=read_log,grep"
    assert after.content[1].text == "tools=read_log"
    assert stated.content[1].text == "tools=read_log,grep"


async def test_a_system_message_between_the_block_and_the_kept_turns_breaks_their_thinking(
    client: Client,
) -> None:
    block, kept = await kept_setup(client)
    effort = {"role": "system", "content": [], "output_config": {"effort": "low"}}
    sent: list[dict[str, Any]] = [
        {"role": "user", "content": [block]},
        effort,
        *kept,
        user("fourth"),
    ]
    betas = [*BETAS, OUTPUT_CONFIG_BETA]
    plain = await client.beta.messages.create(
        **call([{"role": "user", "content": [block]}, *kept, user("fourth")])
    )
    reply = await client.beta.messages.create(**call(sent, mode="drop_block", betas=betas))
    assert drops(plain) == []
    assert drops(reply) == [("messages.2.content.0", PREFIX_MISMATCH)]


# 27: background compaction -----------------------------------------------------------------------


async def test_a_background_swap_keeps_the_thinking_produced_while_it_ran(client: Client) -> None:
    history = await converse(client, ("first", "second"))
    held = len(history)
    running = client.beta.messages.create(**call(history, compaction=SUMMARIZE))
    history = await converse(client, ("third", "fourth"), history)  # meanwhile, append-only
    block = block_of(await running)
    swapped = [summary(block), *history[held:]]
    reply = await client.beta.messages.create(**call([*swapped, user("fifth")]))

    assert len(swapped) == 5
    assert drops(reply) == []


# 28: threshold compaction ------------------------------------------------------------------------


async def test_threshold_compaction_cannot_run_on_a_request_carrying_an_on_demand_block(
    client: Client,
) -> None:
    history = await converse(client, ("first",))
    block = await compact(client, history)
    edits = {"edits": [{"type": "compact_20260112"}]}
    betas = [*BETAS, EDITING_BETA]
    with pytest.raises(anthropic.BadRequestError) as err:
        await client.beta.messages.create(
            **call([summary(block), user("second")], betas=betas, context_management=edits)
        )
    with pytest.raises(anthropic.BadRequestError) as low:
        await client.beta.messages.create(
            **call(
                [user("second")],
                betas=betas,
                context_management={
                    "edits": [
                        {
                            "type": "compact_20260112",
                            "trigger": {"type": "input_tokens", "value": 100},
                        }
                    ]
                },
            )
        )
    below = await client.beta.messages.create(
        **call([user("second")], betas=betas, context_management=edits)
    )

    assert "cannot run on a request that carries an on-demand compaction block" in refused(err)[0]
    assert "at least 50000" in refused(low)[0]
    assert below.context_management is not None
    assert below.context_management.applied_edits == []


THRESHOLD = {
    "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]
}
BIG = "a long log line " * 13_000
"""About 52,000 input tokens by the simulator's estimate: over the threshold's minimum trigger."""


async def test_a_threshold_compaction_opens_the_reply_with_a_block_that_follows_its_range() -> None:
    seen = Recorder()
    sim = Simulator(script=seen)
    betas = [*BETAS, EDITING_BETA]
    async with sim.client() as client:
        history = await converse(client, (BIG,))
        sent = [*history, user("what now?")]
        reply = await client.beta.messages.create(
            **call(sent, betas=betas, context_management=THRESHOLD)
        )
        later = [*sent, wire_reply(reply), user("and then?")]
        edited = copy.deepcopy(later)
        edited[0]["content"] = "an edit before the block, which the API ignores"
        after = await client.beta.messages.create(
            **call(edited, betas=betas, context_management=THRESHOLD)
        )
        paused = await client.beta.messages.create(
            **call(
                sent,
                betas=betas,
                context_management={
                    "edits": [{**THRESHOLD["edits"][0], "pause_after_compaction": True}]
                },
            )
        )

    assert [b.type for b in reply.content] == ["compaction", "thinking", "text"]
    assert reply.content[0].content.startswith("Summary of 3 messages")
    assert reply.usage.iterations is not None
    assert [i.type for i in reply.usage.iterations] == ["compaction", "message"]
    assert [m["role"] for m in seen.seen[-2]["messages"]] == ["assistant", "user"]
    assert drops(after) == []  # the reply's thinking is bound to the block; the rest is ignored
    assert [m["role"] for m in seen.seen[-1]["messages"]] == ["assistant", "user"]
    assert (paused.stop_reason, [b.type for b in paused.content]) == ("compaction", ["compaction"])


async def test_an_unsigned_block_is_taken_as_a_threshold_block_and_binds_what_follows() -> None:
    """The API returns threshold compaction's blocks without a signature, and pydantic-ai sent
    one back as it came (a recorded 200): it opens its assistant message, what precedes it is
    ignored, and thinking made after it is bound to its summary (provider rule 28)."""
    seen = Recorder()
    sim = Simulator(script=seen)
    unsigned = {"type": "compaction", "content": "Summary: the user said hello."}
    betas = [BINDING_BETA, "compact-2026-01-12"]
    opened = [user("Hello!"), {"role": "assistant", "content": [unsigned]}, user("And then?")]
    async with sim.client() as client:
        reply = await client.beta.messages.create(**call(opened, betas=betas))
        later = [*opened, wire_reply(reply), user("Go on.")]
        edited = copy.deepcopy(later)
        edited[0]["content"] = "an edit before the block, which the API ignores"
        after = await client.beta.messages.create(**call(edited, betas=betas))
        changed = copy.deepcopy(later)
        changed[1]["content"][0]["content"] = "Summary: something else."
        broken = await client.beta.messages.create(**call(changed, betas=betas, mode="drop_block"))

    assert [m["role"] for m in seen.seen[0]["messages"]] == ["assistant", "user"]
    assert reply.content[0].type == "thinking"
    assert drops(after) == []  # bound to the block's summary; the message before it is ignored
    assert [path for path, _ in drops(broken)] == ["messages.3.content.0"]
    with pytest.raises(anthropic.BadRequestError, match="signature: Field required"):
        await sim.client().beta.messages.create(
            **call(
                [user("Hello!"), {"role": "assistant", "content": [{**unsigned, "signature": ""}]}],
                betas=betas,
            )
        )
