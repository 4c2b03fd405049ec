"""The simulator enforces the provider's documented rules (VENDOR_RULES.md), one test per rule,
through the real SDK client, in-process and over the loopback server."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anthropic
import pytest
from helpers import TRANSPORTS, sdk_client, transformations, wire_reply

from context_manager.simulator import (
    BINDING_BETA,
    END_USER_MISMATCH,
    INLINE_TOOLS_BETA,
    MODEL_MISMATCH,
    ORGANIZATION_MISMATCH,
    OUTPUT_CONFIG_BETA,
    PREFIX_MISMATCH,
    SYSTEM_CLEAR_AT_BETA,
    SYSTEM_MESSAGE_MODELS,
    THINKING_DROPPED,
    THINKING_MISMATCH_ALLOWED,
    TOOL_CHANGES_BETA,
    Simulator,
    documented_prefix_check,
    documented_readability,
)

OPUS = "claude-opus-5-5"
FABLE = "claude-fable-5-1"
SONNET_5 = "claude-sonnet-5"
HAIKU = "claude-haiku-5-5"
"""Reads only its own blocks (VENDOR_RULES 9)."""
SYSTEM = "You are Ada."
READ_LOG: dict[str, Any] = {
    "name": "read_log",
    "description": "Read a log.",
    "input_schema": {"type": "object"},
}
GREP: dict[str, Any] = {"name": "grep", "input_schema": {"type": "object"}, "defer_loading": True}
EVERY_BETA = [BINDING_BETA, TOOL_CHANGES_BETA, SYSTEM_CLEAR_AT_BETA, OUTPUT_CONFIG_BETA]


def call(
    messages: list[dict[str, Any]],
    *,
    mode: str | None = "drop_block",
    model: str = OPUS,
    system: Any = SYSTEM,
    tools: list[dict[str, Any]] | None = None,
    betas: Iterable[str] = EVERY_BETA,
    **settings: Any,
) -> dict[str, Any]:
    """SDK keyword arguments for one call; ``mode=None`` leaves ``block_binding`` out."""
    thinking: dict[str, Any] = {"type": "adaptive"}
    if mode is not None:
        thinking["block_binding"] = {"prefix_mismatch_behavior": mode}
    return {
        "model": model,
        "max_tokens": 4096,
        "system": system,
        "thinking": thinking,
        "tools": copy.deepcopy([READ_LOG] if tools is None else tools),
        "messages": copy.deepcopy(messages),
        "betas": list(betas),
        **settings,
    }


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def without_thinking(message: dict[str, Any]) -> dict[str, Any]:
    kept = [b for b in message["content"] if b["type"] not in ("thinking", "redacted_thinking")]
    return {**message, "content": kept}


def drops(message: anthropic.types.beta.BetaMessage) -> list[tuple[str, str]]:
    """``(path, reason)`` of every ``thinking_dropped`` entry."""
    return [(p, r) for t, p, r in transformations(message) if t == THINKING_DROPPED]


Client = anthropic.AsyncAnthropic


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture
async def client(sim: Simulator, transport: str) -> AsyncIterator[Client]:
    async with sdk_client(sim, transport) as c:
        yield c


async def converse(client: Client, turns: Iterable[str], **head: Any) -> list[dict[str, Any]]:
    """A real history: each user turn sent, each reply fed back, no drops along the way."""
    messages: list[dict[str, Any]] = []
    for text in turns:
        messages.append(user(text))
        reply = await client.beta.messages.create(**call(messages, **head))
        assert drops(reply) == []
        messages.append(wire_reply(reply))
    return messages


THREE = ("first", "second", "third")
BLOCKS = ["messages.1.content.0", "messages.3.content.0", "messages.5.content.0"]


# 1-3, 5: the prefix -------------------------------------------------------------------------------


async def test_a_block_binds_the_system_the_tools_and_every_message_before_it(
    client: Client,
) -> None:
    """VENDOR_RULES 1: system, tools and the content before a block are its prefix."""
    history = await converse(client, THREE)
    edited = copy.deepcopy(history)
    edited[2]["content"] = "second, edited"

    system_changed = await client.beta.messages.create(
        **call([*history, user("next")], system="Changed.")
    )
    tools_changed = await client.beta.messages.create(
        **call([*history, user("next")], tools=[READ_LOG, {**GREP, "defer_loading": False}])
    )
    message_changed = await client.beta.messages.create(**call([*edited, user("next")]))

    assert drops(system_changed) == [(p, PREFIX_MISMATCH) for p in BLOCKS]
    assert drops(tools_changed) == [(p, PREFIX_MISMATCH) for p in BLOCKS]
    assert drops(message_changed) == [(p, PREFIX_MISMATCH) for p in BLOCKS[1:]]


async def test_settings_cache_markers_key_order_and_formatting_never_bind(client: Client) -> None:
    """VENDOR_RULES 2: request settings, cache_control, key order and formatting are not
    compared."""
    history = await converse(client, THREE)
    marked = copy.deepcopy(history)
    marked[0]["content"] = [
        {"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}}
    ]
    marked[3] = {"content": marked[3]["content"], "role": "assistant"}

    reply = await client.beta.messages.create(
        **call(
            [*marked, user("next")],
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            max_tokens=8192,
            tool_choice={"type": "none"},
            metadata={"user_id": "u-2"},
            output_config={"effort": "low"},
        )
    )

    assert drops(reply) == []


async def test_a_deferred_tool_binds_only_the_blocks_made_after_its_tool_addition(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 3: a deferred tool joins the prefix once a tool_addition references it."""
    tools = [READ_LOG, GREP]
    history = await converse(client, ["first"], tools=tools)
    addition = {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}],
    }
    history += [user("second"), addition]
    reply = await client.beta.messages.create(**call(history, tools=tools))
    history.append(wire_reply(reply))
    grep_changed = [READ_LOG, {**GREP, "description": "Search."}]

    assert [c.reason for c in sim.verify(call(history, tools=tools))] == [None, None]
    assert [c.reason for c in sim.verify(call(history, tools=grep_changed))] == [
        None,
        PREFIX_MISMATCH,
    ]


async def test_a_change_invalidates_only_the_thinking_that_already_follows_it(
    client: Client,
) -> None:
    """VENDOR_RULES 5: editing a message fails the blocks after it, never the ones before."""
    history = await converse(client, THREE)
    history[4]["content"] = [{"type": "text", "text": "third, shortened"}]

    reply = await client.beta.messages.create(**call([*history, user("next")]))

    assert drops(reply) == [("messages.5.content.0", PREFIX_MISMATCH)]


# 4: order -----------------------------------------------------------------------------------------


async def test_removing_the_oldest_thinking_block_keeps_every_later_block_valid(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 4: a leading run of removed blocks leaves no gap."""
    history = await converse(client, THREE)
    history[1] = without_thinking(history[1])
    two_oldest = copy.deepcopy(history)
    two_oldest[3] = without_thinking(two_oldest[3])

    reply = await client.beta.messages.create(**call([*history, user("next")], mode="error"))

    assert drops(reply) == []
    assert [c.reason for c in sim.verify(call(two_oldest))] == [None]


async def test_removing_the_newest_blocks_or_every_block_is_valid(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 4: removing from the end, or everything, is valid."""
    history = await converse(client, THREE)
    newest_gone = copy.deepcopy(history)
    newest_gone[5] = without_thinking(newest_gone[5])
    all_gone = [without_thinking(m) if m["role"] == "assistant" else m for m in history]

    reply = await client.beta.messages.create(**call([*newest_gone, user("next")], mode="error"))

    assert drops(reply) == []
    assert [c.reason for c in sim.verify(call(newest_gone))] == [None, None]
    assert sim.verify(call(all_gone)) == []


async def test_a_gap_in_the_thinking_blocks_fails_every_block_after_it(client: Client) -> None:
    """VENDOR_RULES 4 and 13: a block whose nearest earlier block is not the one it recorded
    fails; error mode names it, drop mode removes it and every later block."""
    history = await converse(client, ["a", "b", "c", "d"])
    history[3] = without_thinking(history[3])

    dropped = await client.beta.messages.create(**call([*history, user("next")]))
    with pytest.raises(
        anthropic.BadRequestError,
        match=r"messages\.5\.content\.0: Invalid `signature` in `thinking` block\. The block is "
        r"bound to a different conversation\. .*prefix_binding_mismatch",  # [PT]'s wording
    ):
        await client.beta.messages.create(**call([*history, user("next")], mode="error"))

    assert drops(dropped) == [
        ("messages.5.content.0", PREFIX_MISMATCH),
        ("messages.7.content.0", PREFIX_MISMATCH),
    ]


async def test_a_block_put_back_invalidates_the_blocks_made_while_it_was_gone(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 4: blocks made without a block recorded no predecessor; putting it back
    puts a thinking block before them."""
    history = await converse(client, ["first"])
    original = copy.deepcopy(history)
    history[1] = without_thinking(history[1])
    history.append(user("second"))
    reply = await client.beta.messages.create(**call(history))
    history.append(wire_reply(reply))
    put_back = [original[1] if i == 1 else m for i, m in enumerate(history)]

    assert [c.reason for c in sim.verify(call(history))] == [None]
    assert [c.reason for c in sim.verify(call(put_back))] == [None, PREFIX_MISMATCH]


# 10: who runs the prefix check --------------------------------------------------------------------

MYTHOS = "claude-mythos-5-1"


@pytest.mark.parametrize("model", [MYTHOS, "claude-opus-5"])
async def test_a_model_that_runs_no_prefix_check_takes_a_changed_prefix_and_a_gap(
    sim: Simulator, transport: str, model: str
) -> None:
    """VENDOR_RULES 10 and [PT]: "Claude Mythos 5.1 and models before Claude Fable 5.1 don't run
    the prefix check"; such a model "accepts the object and reports only model-check drops". A
    changed system, an edited earlier message and a gap all reach the model, even in error mode;
    the same request to Fable 5.1 is refused."""
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ["a", "b", "c"], model=model)
        history[2]["content"] = "b, edited"
        history[3] = without_thinking(history[3])
        changed = [*history, user("next")]

        taken = await client.beta.messages.create(
            **call(changed, model=model, mode="error", system="Changed.")
        )
        with pytest.raises(anthropic.BadRequestError, match="bound to a different conversation"):
            await client.beta.messages.create(
                **call(changed, model=FABLE, mode="error", system="Changed.")
            )

    assert drops(taken) == []
    (answered,) = [c for c in sim.calls[-2:] if c.status == 200]
    seen = answered.request["messages"]  # as the model saw it: the block after the gap is in
    assert next(b["type"] for b in seen[5]["content"]) == "thinking"


def test_the_documented_list_decides_who_runs_the_prefix_check() -> None:
    """VENDOR_RULES 10: Fable 5.1 and Opus 5.5 do; Mythos 5.1 and earlier models do not;
    undocumented ids do (the strict reading)."""
    runs = documented_prefix_check
    assert [runs(m) for m in (FABLE, OPUS, HAIKU, "claude-sonnet-5-5", "claude-sim-1")] == [
        True
    ] * 5
    earlier = ("claude-fable-5", "claude-opus-4-8", SONNET_5, "claude-3-7-sonnet-20250219")
    assert [runs(m) for m in (MYTHOS, *earlier)] == [False] * 5


async def test_a_prefix_check_callable_replaces_the_documented_list(transport: str) -> None:
    sim = Simulator(prefix_check=lambda model: True)
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ["a", "b"], model=MYTHOS)
        reply = await client.beta.messages.create(
            **call([*history, user("next")], model=MYTHOS, system="Changed.")
        )
    assert drops(reply) == [(p, PREFIX_MISMATCH) for p in BLOCKS[:2]]


# 6: the open tool loop ----------------------------------------------------------------------------


def tool_caller(_: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "Read the log first."},
        {"type": "tool_use", "name": "read_log", "input": {}},
    ]


async def test_thinking_in_an_open_tool_loop_cannot_be_modified(transport: str) -> None:
    """VENDOR_RULES 6: the latest assistant message of an open tool loop comes back as made."""
    sim = Simulator(script=tool_caller)
    async with sdk_client(sim, transport) as client:
        reply = await client.beta.messages.create(**call([user("go")]))
        tool_id = reply.content[1].id
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id}]}
        sent = wire_reply(reply)

        unchanged = await client.beta.messages.create(**call([user("go"), sent, result]))
        with pytest.raises(
            anthropic.BadRequestError,
            match=r"messages\.1\.content\.0: `thinking` or `redacted_thinking` blocks in the "
            r"latest assistant message cannot be modified",
        ):
            await client.beta.messages.create(**call([user("go"), without_thinking(sent), result]))

    assert drops(unchanged) == []


# 8-11: models, organizations, end users ---------------------------------------------------------


async def test_an_unreadable_block_is_dropped_never_refused_and_reads_again_after_a_switch_back(
    client: Client,
) -> None:
    """VENDOR_RULES 8: the model check drops (even in error mode); the prefix is intact, so the
    producing model reads the blocks again."""
    history = await converse(client, THREE)

    switched = await client.beta.messages.create(
        **call([*history, user("next")], model=HAIKU, mode="error")
    )
    back = await client.beta.messages.create(**call([*history, user("next")], mode="error"))

    assert drops(switched) == [(p, MODEL_MISMATCH) for p in BLOCKS]
    assert drops(back) == []


async def test_a_block_made_while_an_unreadable_one_was_dropped_reads_after_the_switch_back(
    client: Client,
) -> None:
    """VENDOR_RULES 8 and [PT]: keep sending every block; "when the same history goes back to
    Claude Fable 5.1, its blocks are readable again, along with the earlier model's thinking".
    A dropped block is still in the request, so the block made after it follows it in order."""
    history = await converse(client, ["first"], model=FABLE)
    history.append(user("second"))
    on_opus = await client.beta.messages.create(**call(history, model=OPUS, mode="error"))
    history += [wire_reply(on_opus), user("third")]

    back = await client.beta.messages.create(**call(history, model=FABLE, mode="error"))
    without_fable = [without_thinking(history[1]) if i == 1 else m for i, m in enumerate(history)]
    put_back_later = await client.beta.messages.create(**call(without_fable, model=FABLE))

    assert drops(on_opus) == [("messages.1.content.0", MODEL_MISMATCH)]
    assert drops(back) == []
    assert drops(put_back_later) == []  # the oldest left out: every later block still in order


def test_the_documented_table_decides_who_reads_whose_blocks() -> None:
    """VENDOR_RULES 9: the documented pairs, own blocks always, anything else unreadable."""
    assert documented_readability(FABLE, "claude-mythos-5-1")
    assert documented_readability(FABLE, OPUS)
    assert not documented_readability(FABLE, OPUS, claude_api=False)
    assert documented_readability(FABLE, "claude-opus-5")
    assert documented_readability(OPUS, "claude-sonnet-5")
    assert documented_readability(OPUS, "claude-haiku-5-5")
    assert not documented_readability(OPUS, FABLE)
    assert not documented_readability("claude-haiku-5-5", OPUS)
    assert documented_readability("claude-sim-1", "claude-sim-1")
    assert not documented_readability("claude-sim-2", "claude-sim-1")


async def test_a_readability_callable_replaces_the_documented_table(transport: str) -> None:
    """VENDOR_RULES 9: the table is the simulator's default, not a fixed rule."""
    sim = Simulator(readability=lambda reader, producer: True)
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ["first"], model=FABLE)
        reply = await client.beta.messages.create(**call([*history, user("next")], model=OPUS))

    assert drops(reply) == []


async def test_an_unenforced_account_lets_failing_blocks_reach_the_model(transport: str) -> None:
    """VENDOR_RULES 10: without prefix_mismatch_behavior a failing block is reported as
    thinking_mismatch_allowed (an empty block_binding "means every default" [SDK], so it opts in
    to nothing [PT]); with it, the request is enforced as asked."""
    sim = Simulator(enforced=False)
    async with sdk_client(sim, transport) as client:
        history = await converse(client, ["first", "second"])
        allowed = await client.beta.messages.create(
            **call([*history, user("next")], mode=None, system="Changed.")
        )
        empty = call([*history, user("next")], mode=None, system="Changed.")
        empty["thinking"]["block_binding"] = {}
        allowed_too = await client.beta.messages.create(**empty)
        with pytest.raises(anthropic.BadRequestError, match="prefix_binding_mismatch"):
            await client.beta.messages.create(
                **call([*history, user("next")], mode="error", system="Changed.")
            )

    assert transformations(allowed) == [
        (THINKING_MISMATCH_ALLOWED, "messages.1.content.0", PREFIX_MISMATCH),
        (THINKING_MISMATCH_ALLOWED, "messages.3.content.0", PREFIX_MISMATCH),
    ]
    assert transformations(allowed_too) == transformations(allowed)


async def test_another_organization_or_end_user_is_a_drop_reported_by_precedence(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 11: organization > end_user > model > prefix; never a 400."""
    history = await converse(client, ["first"])
    sim.end_user = "user-b"
    end_user = await client.beta.messages.create(
        **call([*history, user("next")], model=HAIKU, mode="error")
    )
    sim.organization = "org-b"
    organization = await client.beta.messages.create(
        **call([*history, user("next")], model=HAIKU, mode="error", system="Changed.")
    )

    assert drops(end_user) == [("messages.1.content.0", END_USER_MISMATCH)]
    assert drops(organization) == [("messages.1.content.0", ORGANIZATION_MISMATCH)]


@pytest.mark.parametrize("mode", ["error", "drop_block", None])
@pytest.mark.parametrize(
    "spoil",
    [
        lambda b: {**b, "signature": ""},
        lambda b: {**b, "signature": "bm90IG91cnM="},
        lambda b: {**b, "thinking": b["thinking"] + " (edited)"},
    ],
    ids=["empty", "forged", "edited-text"],
)
async def test_an_empty_malformed_or_forged_signature_is_a_400_in_every_mode(
    client: Client, mode: str | None, spoil: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """VENDOR_RULES 12."""
    history = await converse(client, ["first"])
    history[1]["content"][0] = spoil(history[1]["content"][0])

    with pytest.raises(
        anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `signature`"
    ):
        await client.beta.messages.create(**call([*history, user("next")], mode=mode))


# 13-14: controls and reports ----------------------------------------------------------------------


async def test_drop_block_removes_the_failing_block_and_every_later_thinking_block(
    client: Client,
) -> None:
    """VENDOR_RULES 13: each removed block is reported with its path and reason."""
    history = await converse(client, THREE)
    history[2]["content"] = "second, edited"

    reply = await client.beta.messages.create(**call([*history, user("next")]))

    assert transformations(reply) == [
        (THINKING_DROPPED, "messages.3.content.0", PREFIX_MISMATCH),
        (THINKING_DROPPED, "messages.5.content.0", PREFIX_MISMATCH),
    ]


async def test_block_binding_without_its_beta_is_refused(client: Client) -> None:
    """VENDOR_RULES 13: block_binding needs the thinking-binding-controls beta."""
    with pytest.raises(anthropic.BadRequestError, match=r"thinking\.block_binding"):
        await client.beta.messages.create(**call([user("hi")], betas=[]))


async def test_a_streamed_reply_reports_its_drops_on_message_start(client: Client) -> None:
    """VENDOR_RULES 14: input_transformations ride on message_start and the final message."""
    history = await converse(client, ["first"])
    async with client.beta.messages.stream(
        **call([*history, user("next")], system="Changed.")
    ) as stream:
        starts = [event async for event in stream if event.type == "message_start"]
        final = await stream.get_final_message()

    assert [t.path for t in starts[0].message.input_transformations or []] == [
        "messages.1.content.0"
    ]
    assert drops(final) == [("messages.1.content.0", PREFIX_MISMATCH)]


# 16-19: mid-conversation system messages ---------------------------------------------------------


PLACEMENTS = [
    ("first", [{"role": "system", "content": "x"}, user("hi")], "must come right after a `user`"),
    (
        "after-an-assistant-turn",
        [user("hi"), {"role": "assistant", "content": "ok"}, {"role": "system", "content": "x"}],
        "must come right after a `user`",
    ),
    (
        "before-a-user-message",
        [user("hi"), {"role": "system", "content": "x"}, user("again")],
        "cannot come right before a `user` message",
    ),
    (
        "two-adjacent",
        [user("hi"), {"role": "system", "content": "x"}, {"role": "system", "content": "y"}],
        "two adjacent `system` messages",
    ),
]


@pytest.mark.parametrize(
    ("messages", "match"), [p[1:] for p in PLACEMENTS], ids=[p[0] for p in PLACEMENTS]
)
async def test_a_system_message_follows_a_user_message_and_precedes_an_assistant_turn(
    client: Client, messages: list[dict[str, Any]], match: str
) -> None:
    """VENDOR_RULES 16: the accepted shape is user, system, then assistant or the end."""
    accepted = await client.beta.messages.create(
        **call([user("hi"), {"role": "system", "content": "Be brief."}])
    )

    with pytest.raises(anthropic.BadRequestError, match=match):
        await client.beta.messages.create(**call(messages))
    assert accepted.role == "assistant"


async def test_only_documented_or_added_models_accept_system_messages(transport: str) -> None:
    """VENDOR_RULES 16: Sonnet 5 refuses them; the table can be extended."""
    messages = [user("hi"), {"role": "system", "content": "Be brief."}]
    async with sdk_client(Simulator(), transport) as client:
        with pytest.raises(anthropic.BadRequestError, match="not supported on claude-sonnet-5"):
            await client.beta.messages.create(**call(messages, model=SONNET_5))
    extended = Simulator(system_message_models=SYSTEM_MESSAGE_MODELS | {SONNET_5})
    async with sdk_client(extended, transport) as client:
        reply = await client.beta.messages.create(**call(messages, model=SONNET_5))

    assert reply.role == "assistant"


def grep_caller(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Call grep when the model is offered it, else answer in text."""
    if any(tool["name"] == "grep" for tool in request["tools"]):
        return [{"type": "tool_use", "name": "grep", "input": {}}]
    return [{"type": "text", "text": "No grep."}]


async def test_a_tool_added_mid_conversation_is_offered_and_a_removed_one_is_recorded(
    transport: str,
) -> None:
    """VENDOR_RULES 17: tool_addition / tool_removal by reference or inline definition."""
    sim = Simulator(script=grep_caller)
    add = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}
    remove = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "grep"}}
    inline = {
        "type": "tool_addition",
        "tool": {
            "type": "tool_definition",
            "definition": {k: v for k, v in GREP.items() if k != "defer_loading"},
        },
    }
    tools = [READ_LOG, GREP]
    async with sdk_client(sim, transport) as client:
        before = await client.beta.messages.create(**call([user("hi")], tools=tools))
        added = await client.beta.messages.create(
            **call([user("hi"), {"role": "system", "content": [add]}], tools=tools)
        )
        history = [user("hi"), {"role": "system", "content": [add]}, wire_reply(added)]
        result = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": added.content[0].id}],
        }
        history += [result, {"role": "system", "content": [remove]}]
        removed = await client.beta.messages.create(**call(history, tools=tools))
        with pytest.raises(anthropic.BadRequestError, match=INLINE_TOOLS_BETA):
            await client.beta.messages.create(
                **call([user("hi"), {"role": "system", "content": [inline]}], tools=[READ_LOG])
            )
        defined = await client.beta.messages.create(
            **call(
                [user("hi"), {"role": "system", "content": [inline]}],
                tools=[READ_LOG],
                betas=[*EVERY_BETA, INLINE_TOOLS_BETA],
            )
        )

    assert [b.type for b in before.content] == ["text"]
    assert [b.type for b in added.content] == ["tool_use"]
    assert [b.type for b in removed.content] == ["text"]
    assert [b.type for b in defined.content] == ["tool_use"]
    assert [c.unoffered_calls for c in sim.calls if c.status == 200] == [(), (), (), ()]


async def test_a_reference_adds_only_a_deferred_tool_and_a_loaded_one_comes_back_inline(
    transport: str,
) -> None:
    """VENDOR_RULES 17 documents a reference adding a deferred tool, nothing else: re-adding a
    removed tool declared without ``defer_loading`` by reference is refused (issue 28 item 5),
    and its inline definition is taken."""
    sim = Simulator(script=lambda _: ["Fine."])
    remove = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "read_log"}}
    again = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "read_log"}}
    inline = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": READ_LOG}}
    betas = [*EVERY_BETA, INLINE_TOOLS_BETA]
    async with sdk_client(sim, transport) as client:
        with pytest.raises(anthropic.BadRequestError, match="is not declared with `defer_loading"):
            await client.beta.messages.create(
                **call([user("hi"), {"role": "system", "content": [remove, again]}], betas=betas)
            )
        await client.beta.messages.create(
            **call([user("hi"), {"role": "system", "content": [remove, inline]}], betas=betas)
        )

    assert [c.status for c in sim.calls] == [400, 200]


async def test_a_call_to_a_removed_tool_is_recorded_as_such(transport: str) -> None:
    """VENDOR_RULES 17: the simulator records a reply that calls a tool no longer offered."""
    sim = Simulator(script=lambda _: [{"type": "tool_use", "name": "read_log", "input": {}}])
    remove = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "read_log"}}
    async with sdk_client(sim, transport) as client:
        await client.beta.messages.create(
            **call([user("hi"), {"role": "system", "content": [remove]}])
        )

    assert sim.calls[-1].unoffered_calls == ("read_log",)


async def test_a_clear_at_message_stays_in_the_prefix_but_leaves_the_models_view(
    transport: str,
) -> None:
    """VENDOR_RULES 18: shown until a later user message exists; deleting it later is a
    change."""
    seen: list[list[str]] = []

    def record(request: dict[str, Any]) -> list[dict[str, Any]]:
        seen.append([m["role"] for m in request["messages"]])
        return [{"type": "thinking", "thinking": "ok"}, {"type": "text", "text": "ok"}]

    sim = Simulator(script=record)
    note = {"role": "system", "content": "Just this turn.", "clear_at": "next_user_message"}
    async with sdk_client(sim, transport) as client:
        first = await client.beta.messages.create(**call([user("hi"), note]))
        history = [user("hi"), note, wire_reply(first), user("next")]
        await client.beta.messages.create(**call(history))
        deleted = [history[0], history[2], history[3]]
        without_note = await client.beta.messages.create(**call(deleted))

    assert seen[:2] == [["user", "system"], ["user", "assistant", "user"]]
    assert drops(without_note) == [("messages.1.content.0", PREFIX_MISMATCH)]


async def test_a_per_message_effort_needs_its_beta_and_is_not_part_of_the_prefix(
    sim: Simulator, client: Client
) -> None:
    """VENDOR_RULES 19 (and 2: effort is a setting)."""
    effort = {"role": "system", "content": [], "output_config": {"effort": "low"}}
    betas = [b for b in EVERY_BETA if b != OUTPUT_CONFIG_BETA]

    with pytest.raises(anthropic.BadRequestError, match=OUTPUT_CONFIG_BETA):
        await client.beta.messages.create(**call([user("hi"), effort], betas=betas))
    reply = await client.beta.messages.create(**call([user("hi"), effort]))

    assert reply.role == "assistant"


# 22: display and redacted blocks ------------------------------------------------------------------


async def test_omitted_and_redacted_blocks_are_checked_like_thinking(transport: str) -> None:
    """VENDOR_RULES 22: an empty-text block keeps its signature; redacted blocks bind too."""
    sim = Simulator(
        script=lambda _: [
            {"type": "redacted_thinking"},
            {"type": "thinking", "thinking": "t"},
            "ok",
        ]
    )
    async with sdk_client(sim, transport) as client:
        messages = [user("hi")]
        reply = await client.beta.messages.create(
            **call(messages, thinking={"type": "adaptive", "display": "omitted"})
        )
        history = [*messages, wire_reply(reply), user("next")]
        kept = await client.beta.messages.create(**call(history))
        changed = await client.beta.messages.create(**call(history, system="Changed."))

    assert reply.content[1].thinking == ""
    assert drops(kept) == []
    assert drops(changed) == [
        ("messages.1.content.0", PREFIX_MISMATCH),
        ("messages.1.content.1", PREFIX_MISMATCH),
    ]
