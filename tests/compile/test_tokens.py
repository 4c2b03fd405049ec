"""Exact token counts from ``count_tokens``, through the real SDK client against the simulator.

What a user can rely on: with ``estimator=ApiTokenCounter(client)`` a compile's ``tokens`` is
what the API bills for the request, a steady compile costs at most one ``count_tokens`` call
(none when nothing changed), each new message's count is learned exactly, and a failing endpoint
falls back to the character estimate with one log line.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from structlog.testing import capture_logs

from context_manager import ApiTokenCounter, ContextManager, Head, MemoryStore, estimate_tokens
from context_manager._compile import count_params
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada, the on-call agent.",
    tools=[
        {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
    ],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


def billed(usage: Any) -> int:
    return int(
        usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    )


def converse(cm: ContextManager, client: anthropic.Anthropic, questions: list[str]) -> None:
    for question in questions:
        cm.add_message("user", question)
        result = cm.compile(HEAD)
        cm.record_reply(client.beta.messages.create(**result.request), result)


def test_a_compiles_tokens_are_what_the_api_bills_for_its_request() -> None:
    sim = Simulator()
    client = sim.sync_client()
    cm = ContextManager.open(MemoryStore(), namespace="ada", estimator=ApiTokenCounter(client))
    converse(cm, client, ["first question", "second question"])
    cm.add_message("user", "third question, a little longer than the others")

    result = cm.compile(HEAD)
    reply = client.beta.messages.create(**result.request)

    assert result.tokens == billed(reply.usage)
    assert result.tokens != ContextManager.open(MemoryStore()).compile(HEAD, dry_run=True).tokens


def test_a_steady_compile_makes_at_most_one_count_call_and_none_when_nothing_changed() -> None:
    sim = Simulator()
    client = sim.sync_client()
    counter = ApiTokenCounter(client)
    cm = ContextManager.open(MemoryStore(), namespace="ada", estimator=counter)
    converse(cm, client, ["one", "two", "three"])
    cm.add_message("user", "four")

    before = len(sim.count_calls)
    cm.compile(HEAD)
    after_new = len(sim.count_calls)
    cm.compile(HEAD)
    cm.compile(HEAD, dry_run=True)
    after_same = len(sim.count_calls)

    assert after_new - before == 1
    assert after_same == after_new
    assert counter.calls == after_same


def test_a_new_messages_count_is_learned_exactly() -> None:
    sim = Simulator()
    client = sim.sync_client()
    counter = ApiTokenCounter(client)
    cm = ContextManager.open(MemoryStore(), namespace="ada", estimator=counter)
    converse(cm, client, ["one", "two"])
    without = cm.compile(HEAD).request
    cm.add_message("user", "a new question with a few more words in it")
    with_it = cm.compile(HEAD).request

    exact = (
        client.beta.messages.count_tokens(**count_params(with_it)).input_tokens
        - client.beta.messages.count_tokens(**count_params(without)).input_tokens
    )
    newest = {
        "role": "user",
        "content": [{"type": "text", "text": with_it["messages"][-1]["content"][0]["text"]}],
    }

    assert with_it["messages"][-1]["role"] == "user"
    assert counter(newest) == exact
    assert counter(newest) != estimate_tokens(newest)


def test_a_failing_endpoint_falls_back_to_the_estimate_and_logs_once() -> None:
    unreachable = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="x", max_retries=0)
    counter = ApiTokenCounter(unreachable)
    cm = ContextManager.open(MemoryStore(), namespace="ada", estimator=counter)
    plain = ContextManager.open(MemoryStore(), namespace="ada")
    for each in (cm, plain):
        each.add_message("user", "hello")

    with capture_logs() as logs:
        first = cm.compile(HEAD)
        cm.add_message("assistant", "hi")
        cm.add_message("user", "again")
        cm.compile(HEAD)

    assert first.tokens == plain.compile(HEAD).tokens
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["token_count_failed"]
    assert counter.calls == 2


def test_a_count_function_may_stand_in_for_the_client() -> None:
    seen: list[dict[str, Any]] = []

    def count(params: dict[str, Any]) -> int:
        seen.append(params)
        return 1234

    cm = ContextManager.open(MemoryStore(), namespace="ada", estimator=ApiTokenCounter(count))
    cm.add_message("user", "hello")

    assert cm.compile(HEAD).tokens == 1234
    assert set(seen[0]) == {"model", "messages", "system", "tools", "thinking", "betas"}
    assert "cache_control" not in repr(seen[0])


@pytest.mark.parametrize("turns", [3])
async def test_the_async_runtime_counts_with_a_sync_client_once_per_call(turns: int) -> None:
    sim = Simulator()
    counter = ApiTokenCounter(sim.sync_client())
    runtime = Runtime(sim.client(), MemoryStore())
    agent = runtime.register(Agent(name="ada", head=HEAD))
    agent.context.estimator = counter

    for n in range(turns):
        await agent.run_turn(f"question {n}")

    assert len(sim.calls) == turns
    assert counter.calls == len(sim.count_calls) == turns
