"""``ManagedAnthropic`` / ``ManagedAsyncAnthropic``: the real SDK client, managed for one agent.

The framework here is the SDK's own surface, called the way frameworks call it: the whole
parameters every call, its own copy of each reply kept in its list. The client underneath is the
real ``anthropic`` client over the simulator, which checks every request.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import anthropic
import pytest
from helpers import (
    Interleaved,
    framework_copy,
    framework_params,
    invalid_calls,
    thinking_signatures,
)

from context_manager import (
    REASONING_LOSS_KIND,
    ContextManager,
    MemoryStore,
    Store,
    ThinkingBinding,
)
from context_manager.adapters import ManagedAgents, ManagedAnthropic, ManagedAsyncAnthropic
from context_manager.simulator import BINDING_BETA, Simulator


def ask(messages: list[dict[str, Any]], words: str) -> list[dict[str, Any]]:
    messages.append({"role": "user", "content": words})
    return messages


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


async def test_create_returns_the_real_response_and_the_next_call_replays_its_recorded_thinking(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada")
    messages: list[dict[str, Any]] = []
    first = await client.messages.create(**framework_params(ask(messages, "one")))
    assert isinstance(first, anthropic.types.Message)
    messages.append(framework_copy(first, "no-thinking"))
    second = await client.beta.messages.create(**framework_params(ask(messages, "two")))
    assert isinstance(second, anthropic.types.beta.BetaMessage)
    sent = sim.requests[-1]
    assert len(thinking_signatures(sent)) == 1
    assert thinking_signatures(sent)[0] == first.content[0].signature  # type: ignore[union-attr]
    assert invalid_calls(sim) == []


async def test_a_raw_stream_and_the_stream_helper_are_recorded_when_they_end(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada")
    messages: list[dict[str, Any]] = []
    raw = await client.messages.create(**framework_params(ask(messages, "one")), stream=True)
    kinds = [event.type async for event in raw]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    messages.append({"role": "assistant", "content": "You said: one"})
    async with client.beta.messages.stream(**framework_params(ask(messages, "two"))) as stream:
        reply = await stream.get_final_message()
    messages.append(framework_copy(reply, "tagged-thinking"))
    await client.messages.create(**framework_params(ask(messages, "three")))
    assert len(thinking_signatures(sim.requests[-1])) == 2
    stored = client.context("ada").messages()
    assert [m.role for m in stored] == ["user", "assistant"] * 3
    assert invalid_calls(sim) == []


def test_the_sync_client_reconciles_records_and_streams_the_same_way(sim: Simulator) -> None:
    client = ManagedAnthropic(sim.sync_client(), MemoryStore(), agent="ada")
    messages: list[dict[str, Any]] = []
    reply = client.messages.create(**framework_params(ask(messages, "one")))
    messages.append(framework_copy(reply, "no-extras"))
    with client.messages.stream(**framework_params(ask(messages, "two"))) as stream:
        for _ in stream:
            pass
    messages.append({"role": "assistant", "content": "You said: two"})
    events = list(client.beta.messages.create(**framework_params(ask(messages, "3")), stream=True))
    assert events[-1].type == "message_stop"
    assert len(thinking_signatures(sim.requests[-1])) == 2
    assert len(client.context("ada").messages()) == 6


async def test_count_tokens_counts_the_compiled_request_and_stores_nothing(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada")
    messages: list[dict[str, Any]] = []
    reply = await client.messages.create(**framework_params(ask(messages, "one")))
    messages.append(framework_copy(reply, "as-sent"))
    params = framework_params(ask(messages, "two"))
    del params["max_tokens"]
    counted = await client.messages.count_tokens(**params)
    assert counted.input_tokens > 0
    assert len(client.context("ada").messages()) == 2
    assert sim.count_calls[-1].status == 200


async def test_everything_but_messages_is_the_real_clients_and_copies_share_the_agents(
    sim: Simulator,
) -> None:
    real = sim.client()
    client = ManagedAsyncAnthropic(real, MemoryStore(), agent="ada")
    assert client.models is real.models
    assert client.base_url == real.base_url
    assert client.beta.messages.batches is real.beta.messages.batches
    copy = client.with_options(max_retries=0)
    assert copy.agents is client.agents
    await copy.messages.create(**framework_params([{"role": "user", "content": "hi"}]))
    assert len(client.context("ada").messages()) == 2


async def test_an_agent_chosen_per_call_keeps_each_transcript_apart(sim: Simulator) -> None:
    def agent(params: Mapping[str, Any]) -> tuple[str, str]:
        return str(params["metadata"]["user_id"]), "main"

    client = ManagedAsyncAnthropic(sim.client(), MemoryStore(), agent=agent)
    for user in ("ada", "bob"):
        words = [{"role": "user", "content": f"I am {user}"}]
        await client.messages.create(**framework_params(words, metadata={"user_id": user}))
    assert [len(client.context(n).messages()) for n in ("ada", "bob")] == [2, 2]


async def test_a_loss_is_told_at_the_agents_next_call_and_rides_with_that_request(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada")
    messages: list[dict[str, Any]] = []
    model = "claude-fable-5-1"
    reply = await client.messages.create(**framework_params(ask(messages, "one"), model=model))
    messages.append(framework_copy(reply, "as-sent"))
    switched = framework_params(ask(messages, "two"), model="claude-opus-5-5")
    reply = await client.messages.create(**switched)  # Opus 5.5 cannot read Fable's blocks
    messages.append(framework_copy(reply, "as-sent"))
    cm = client.context("ada")
    assert cm.messages(kind=REASONING_LOSS_KIND) == []  # not between a compile and its reply
    assert client.agents.waiting("ada")
    await client.messages.create(**framework_params(ask(messages, "three")))
    notices = cm.messages(kind=REASONING_LOSS_KIND)
    assert len(notices) == 1
    line = notices[0].content[0].text  # type: ignore[union-attr]
    assert line.startswith("[reasoning] ada: The reasoning behind your replies up to")
    assert "because your model changed" in line
    assert "this turn" not in line  # the turn opened at "two", after the reply it names
    sent = [b.get("text") for m in sim.requests[-1]["messages"] for b in m["content"]]
    assert line in sent


async def test_provider_drops_are_placed_released_and_told_at_the_next_call(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada")
    messages: list[dict[str, Any]] = []
    for words in ("one", "two"):
        reply = await client.messages.create(**framework_params(ask(messages, words)))
        messages.append(framework_copy(reply, "as-sent"))
    sim.force_drop()
    reply = await client.messages.create(**framework_params(ask(messages, "three")))
    messages.append(framework_copy(reply, "as-sent"))
    await client.messages.create(**framework_params(ask(messages, "four")))
    cm = client.context("ada")
    notices = cm.messages(kind=REASONING_LOSS_KIND)
    assert len(notices) == 1
    assert "the reasoning behind 2 of your replies" in notices[0].content[0].text  # type: ignore[union-attr]
    assert sim.calls[-1].status == 200
    assert sim.calls[-1].dropped == ()


async def test_a_frameworks_own_drop_block_goes_out_and_a_block_known_to_fail_is_still_not_sent(
    sim: Simulator, store: Store
) -> None:
    binding = ThinkingBinding(drop_block=False)  # only the framework asks for drop_block
    client = ManagedAsyncAnthropic(sim.client(), store, agent="ada", binding=binding)
    thinking = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    own: dict[str, Any] = {"thinking": thinking, "betas": [BINDING_BETA]}
    messages: list[dict[str, Any]] = []
    for words in ("one", "two"):
        reply = await client.beta.messages.create(**framework_params(ask(messages, words), **own))
        messages.append(framework_copy(reply, "as-sent"))
    messages[0] = {"role": "user", "content": "one, reworded"}  # the framework edits its history
    await client.beta.messages.create(**framework_params(ask(messages, "three"), **own))
    sent = sim.calls[-1]
    assert sent.request["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}
    assert thinking_signatures(sent.request) == []  # both replies followed the edited message
    assert sent.dropped == ()
    assert sent.status == 200


async def test_a_rewind_on_a_named_branch_stays_on_the_branch_it_started(
    sim: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(sim.client(), store, agent=("ada", "main"))
    messages: list[dict[str, Any]] = []
    for words in ("one", "two"):
        reply = await client.messages.create(**framework_params(ask(messages, words)))
        messages.append(framework_copy(reply, "as-sent"))
    del messages[2:]  # the framework regenerates from before "two"
    for words in ("two, again", "three"):
        reply = await client.messages.create(**framework_params(ask(messages, words)))
        messages.append(framework_copy(reply, "as-sent"))
    cm = client.context("ada", "main")
    assert cm.current_branch().name == "main~1"
    assert [ref.name for ref in cm.list_branches()] == ["main", "main~1"]
    assert len(thinking_signatures(sim.requests[-1])) == 2
    assert invalid_calls(sim) == []


def test_another_hosts_reply_waits_while_a_call_of_the_agent_is_read_and_compiled(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """Two hosts (two gateways on one database) each take a call of one agent with the same
    messages. Host A's reply comes back while host B is between reading the agent and compiling:
    A's recording waits for B's compile, so B sends exactly the framework's messages; it used to
    record at once, and B sent A's reply as a prefill the framework never asked for."""
    params = framework_params([{"role": "user", "content": "hello"}])
    host_a = ManagedAgents(two_hosts[0], "ada")
    in_flight = host_a.prepare(params)
    reply = sim.sync_client().beta.messages.create(**in_flight.result.request)
    recorded = threading.Event()

    def host_a_records() -> None:
        host_a.finish(in_flight, reply)
        recorded.set()

    def reply_arrives() -> None:  # after host B's first read of the agent's messages
        threading.Thread(target=host_a_records).start()
        recorded.wait(0.5)

    interleaved = Interleaved(two_hosts[1], "read", reply_arrives)
    host_b = ManagedAgents(interleaved, "ada")
    host_b.context("ada")
    interleaved.armed = True
    sent = host_b.prepare(params).result.request["messages"]
    assert recorded.wait(5)
    assert [m["role"] for m in sent] == ["user"]
    stored = ContextManager.open(two_hosts[0], namespace="ada").messages()
    assert [m.role for m in stored] == ["user", "assistant"]
