"""The simulator's prompt cache and token counting, through the real SDK client.

What a user of the simulator can rely on: ``usage`` splits every request's input into what was
read from the cache, what was written to it and what was neither, as the API reports them; the
cache matches prefixes at breakpoints, per TTL, with the documented lookback and limits; and
``count_tokens`` answers what a call bills, after the same checks a call makes.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest
from helpers import TRANSPORTS, sdk_client, wire_reply

from context_manager.simulator import BINDING_BETA, PREFIX_MISMATCH, Simulator

MODEL = "claude-opus-5-5"
SYSTEM = "You are Ada, the on-call agent. " * 20
TOOLS = [{"name": "read_log", "description": "Read a log.", "input_schema": {"type": "object"}}]
EPHEMERAL = {"type": "ephemeral"}


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sim(clock: Clock) -> Simulator:
    return Simulator(clock=clock, cache_min_tokens=0)


@pytest.fixture(params=TRANSPORTS)
async def client(
    request: pytest.FixtureRequest, sim: Simulator
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with sdk_client(sim, request.param) as sdk:
        yield sdk


def marked(text: str, **marker: Any) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {**EPHEMERAL, **marker}}


def body(messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 2048,
        "system": SYSTEM,
        "tools": copy.deepcopy(TOOLS),
        "thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}},
        "betas": [BINDING_BETA],
        "messages": copy.deepcopy(messages),
    }
    out.update(fields)
    return out


def total(usage: Any) -> int:
    return int(
        usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    )


async def test_a_call_without_breakpoints_reads_and_writes_nothing(
    client: anthropic.AsyncAnthropic,
) -> None:
    reply = await client.beta.messages.create(**body([{"role": "user", "content": "hello"}]))

    assert reply.usage.cache_read_input_tokens == 0
    assert reply.usage.cache_creation_input_tokens == 0
    assert reply.usage.input_tokens > 0


async def test_a_second_call_reads_the_prefix_the_first_wrote_at_its_breakpoint(
    client: anthropic.AsyncAnthropic,
) -> None:
    first_messages = [{"role": "user", "content": [marked("hello")]}]
    first = await client.beta.messages.create(**body(first_messages))
    history = [
        {"role": "user", "content": [marked("hello")]},
        wire_reply(first),
        {"role": "user", "content": [marked("and now?")]},
    ]
    second = await client.beta.messages.create(**body(history))

    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens == total(first.usage)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens > 0
    assert second.usage.input_tokens == 0
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == total(first.usage)
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == 0


async def test_tokens_after_the_last_breakpoint_are_uncached_input(
    client: anthropic.AsyncAnthropic,
) -> None:
    system = [marked(SYSTEM)]
    reply = await client.beta.messages.create(
        **body([{"role": "user", "content": "a long question " * 30}], system=system)
    )
    again = await client.beta.messages.create(
        **body([{"role": "user", "content": "another question " * 30}], system=system)
    )

    assert reply.usage.cache_creation_input_tokens > 0
    assert reply.usage.input_tokens > 0
    assert again.usage.cache_read_input_tokens == reply.usage.cache_creation_input_tokens
    assert total(again.usage) == again.usage.cache_read_input_tokens + again.usage.input_tokens


async def test_a_streamed_reply_reports_the_same_cache_usage(
    client: anthropic.AsyncAnthropic,
) -> None:
    messages = [{"role": "user", "content": [marked("hello")]}]
    await client.beta.messages.create(**body(messages))
    async with client.beta.messages.stream(**body(messages)) as stream:
        final = await stream.get_final_message()

    assert final.usage.cache_read_input_tokens == total(final.usage)
    assert final.usage.cache_creation_input_tokens == 0


async def test_a_changed_earlier_message_misses_and_writes_again(
    client: anthropic.AsyncAnthropic,
) -> None:
    await client.beta.messages.create(
        **body([{"role": "user", "content": [marked("hello")]}], system=[marked(SYSTEM)])
    )
    changed = await client.beta.messages.create(
        **body([{"role": "user", "content": [marked("HELLO")]}], system=[marked(SYSTEM)])
    )

    assert 0 < changed.usage.cache_read_input_tokens < total(changed.usage)
    assert changed.usage.cache_creation_input_tokens > 0


async def test_a_changed_tool_misses_everything_and_a_changed_thinking_setting_misses_messages(
    client: anthropic.AsyncAnthropic,
) -> None:
    messages = [{"role": "user", "content": [marked("hello")]}]
    system = [marked(SYSTEM)]
    await client.beta.messages.create(**body(messages, system=system))
    more_tools = [*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}]
    tools_changed = await client.beta.messages.create(
        **body(messages, system=system, tools=more_tools)
    )
    budget = {"type": "enabled", "budget_tokens": 1024}
    thinking_changed = await client.beta.messages.create(
        **body(messages, system=system, tools=more_tools, thinking=budget, betas=[])
    )

    assert tools_changed.usage.cache_read_input_tokens == 0
    system_tokens = thinking_changed.usage.cache_read_input_tokens
    assert 0 < system_tokens < total(thinking_changed.usage)


async def test_cache_markers_never_change_the_count_or_a_thinking_verdict(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    first = await client.beta.messages.create(**body([{"role": "user", "content": "hello"}]))
    plain = [{"role": "user", "content": "hello"}, wire_reply(first)]
    plain.append({"role": "user", "content": "go on"})
    marked_history = copy.deepcopy(plain)
    marked_history[1]["content"][-1]["cache_control"] = EPHEMERAL
    marked_history[2]["content"] = [marked("go on")]

    bare = await client.beta.messages.count_tokens(**_count_args(body(plain)))
    with_markers = await client.beta.messages.count_tokens(**_count_args(body(marked_history)))

    assert bare.input_tokens == with_markers.input_tokens
    assert [c.reason for c in sim.verify(body(marked_history))] == [None]


async def test_an_entry_lives_for_its_ttl_and_each_read_refreshes_it(
    client: anthropic.AsyncAnthropic, clock: Clock
) -> None:
    messages = [{"role": "user", "content": [marked("hello")]}]
    await client.beta.messages.create(**body(messages))
    clock.now += 240
    read = await client.beta.messages.create(**body(messages))
    clock.now += 240
    refreshed = await client.beta.messages.create(**body(messages))
    clock.now += 301
    expired = await client.beta.messages.create(**body(messages))

    assert read.usage.cache_read_input_tokens > 0
    assert refreshed.usage.cache_read_input_tokens > 0
    assert expired.usage.cache_read_input_tokens == 0
    assert expired.usage.cache_creation_input_tokens == total(expired.usage)


async def test_a_one_hour_entry_outlives_a_five_minute_one(
    client: anthropic.AsyncAnthropic, clock: Clock
) -> None:
    messages = [{"role": "user", "content": [marked("hello", ttl="1h")]}]
    written = await client.beta.messages.create(**body(messages))
    clock.now += 1_800
    read = await client.beta.messages.create(**body(messages))

    assert written.usage.cache_creation is not None
    assert written.usage.cache_creation.ephemeral_1h_input_tokens == total(written.usage)
    assert read.usage.cache_read_input_tokens == total(read.usage)


async def test_a_breakpoint_finds_an_entry_at_most_twenty_blocks_back(
    client: anthropic.AsyncAnthropic,
) -> None:
    def history(after_anchor: list[str]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": "start"}, marked("anchor")]
        if after_anchor:
            del blocks[1]["cache_control"]
            blocks += [{"type": "text", "text": text} for text in after_anchor]
            blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
        return [{"role": "user", "content": blocks}]

    await client.beta.messages.create(**body(history([])))
    near = await client.beta.messages.create(**body(history([f"near {n}" for n in range(19)])))
    far = await client.beta.messages.create(**body(history([f"far {n}" for n in range(20)])))

    assert near.usage.cache_read_input_tokens > 0
    assert far.usage.cache_read_input_tokens == 0


async def test_a_prefix_below_the_minimum_is_processed_but_not_cached(clock: Clock) -> None:
    sim = Simulator(clock=clock)
    messages = [{"role": "user", "content": [marked("hello")]}]
    async with sim.client() as client:
        short = await client.beta.messages.create(**body(messages))
        again = await client.beta.messages.create(**body(messages))

    assert short.usage.cache_creation_input_tokens == 0
    assert again.usage.cache_read_input_tokens == 0
    assert again.usage.input_tokens == total(again.usage)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("five markers", "A maximum of 4 blocks with cache_control may be provided. Found 5."),
        ("thinking marker", "thinking blocks cannot be marked for caching"),
        ("1h after 5m", "ttl='1h' cache_control block must not come after a ttl='5m'"),
        ("bad ttl", "with an optional 'ttl' of '5m' or '1h'"),
    ],
)
async def test_markers_the_api_refuses_are_400s_naming_the_place(
    client: anthropic.AsyncAnthropic, change: str, message: str
) -> None:
    first = await client.beta.messages.create(**body([{"role": "user", "content": "hello"}]))
    reply = wire_reply(first)
    user = [{"role": "user", "content": "hello"}]
    if change == "five markers":
        content = [marked(f"part {n}") for n in range(5)]
        request = body([{"role": "user", "content": content}])
    elif change == "thinking marker":
        reply["content"][0]["cache_control"] = EPHEMERAL
        request = body([*user, reply, {"role": "user", "content": "on"}])
    elif change == "1h after 5m":
        request = body([{"role": "user", "content": [marked("a"), marked("b", ttl="1h")]}])
    else:
        request = body([{"role": "user", "content": [marked("a", ttl="2h")]}])

    with pytest.raises(anthropic.BadRequestError, match=message):
        await client.beta.messages.create(**request)


async def test_a_top_level_cache_control_marks_the_last_block(
    client: anthropic.AsyncAnthropic,
) -> None:
    messages = [{"role": "user", "content": "hello"}]
    await client.beta.messages.create(**body(messages, cache_control=EPHEMERAL))
    again = await client.beta.messages.create(**body(messages))
    marked_again = await client.beta.messages.create(**body(messages, cache_control=EPHEMERAL))

    assert again.usage.cache_read_input_tokens == 0
    assert marked_again.usage.cache_read_input_tokens == total(marked_again.usage)


# count_tokens -------------------------------------------------------------------------------------


def _count_args(request: dict[str, Any]) -> dict[str, Any]:
    """A call's keyword arguments as ``count_tokens`` takes them (no ``max_tokens``)."""
    return {k: v for k, v in request.items() if k != "max_tokens"}


async def test_count_tokens_answers_what_a_call_bills(client: anthropic.AsyncAnthropic) -> None:
    messages = [{"role": "user", "content": [marked("how many tokens is this?")]}]
    counted = await client.beta.messages.count_tokens(**_count_args(body(messages)))
    billed = await client.beta.messages.create(**body(messages))
    again = await client.beta.messages.create(**body(messages))

    assert counted.input_tokens == total(billed.usage) == total(again.usage)


async def test_count_tokens_reads_and_writes_no_cache(
    client: anthropic.AsyncAnthropic, sim: Simulator
) -> None:
    messages = [{"role": "user", "content": [marked("hello")]}]
    await client.beta.messages.count_tokens(**_count_args(body(messages)))
    billed = await client.beta.messages.create(**body(messages))

    assert billed.usage.cache_read_input_tokens == 0
    assert len(sim.count_calls) == 1
    assert len(sim.calls) == 1


async def test_count_tokens_runs_the_binding_check_as_a_call_does(
    client: anthropic.AsyncAnthropic,
) -> None:
    first = await client.beta.messages.create(**body([{"role": "user", "content": "hello"}]))
    history = [{"role": "user", "content": "HELLO"}, wire_reply(first)]
    history.append({"role": "user", "content": "go on"})
    drop = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    clean = [history[0], {**history[1], "content": history[1]["content"][1:]}, history[2]]

    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0"):
        await client.beta.messages.count_tokens(**_count_args(body(history)))
    dropped = await client.beta.messages.count_tokens(**_count_args(body(history, thinking=drop)))
    without = await client.beta.messages.count_tokens(**_count_args(body(clean, thinking=drop)))
    failed = await client.beta.messages.create(**body(history, thinking=drop))

    assert dropped.input_tokens == without.input_tokens
    assert failed.input_transformations is not None
    assert [t.reason for t in failed.input_transformations] == [PREFIX_MISMATCH]


async def test_count_tokens_refuses_what_it_does_not_take(client: anthropic.AsyncAnthropic) -> None:
    request = _count_args(body([{"role": "user", "content": "hello"}]))

    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Extra inputs"):
        await client.beta.messages.count_tokens(**request, extra_body={"max_tokens": 5})
    with pytest.raises(anthropic.BadRequestError, match="messages: at least one message"):
        await client.beta.messages.count_tokens(**{**request, "messages": []})


def test_the_cache_keeps_its_invariants_under_many_requests(clock: Clock) -> None:
    sim = Simulator(clock=clock, cache_min_tokens=0)
    sim.cache.capacity = 5
    client = sim.sync_client()
    for n in range(12):
        messages = [{"role": "user", "content": [marked(f"question {n}")]}]
        client.beta.messages.create(**body(messages))
        clock.now += 1
        sim._check()

    assert len(sim.cache) == 5
