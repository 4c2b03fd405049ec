"""The OpenAI Agents SDK's ``Runner`` with ``TranscriptSession``, on every store.

The protocol tests use the SDK's own model double (``agents.testing.ScriptedModel``) with the
reasoning item the SDK's LiteLLM route builds from a Claude reply (its signed ``thinking_blocks``
in ``provider_data``, the signatures in ``encrypted_content``). The last test runs a real Agents
SDK agent on Claude: the SDK's ``LitellmModel`` with its base URL at the gateway, which answers
from the simulator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import invalid_calls, serve, thinking_signatures

from context_manager import ContextManager, Store, ThinkingBlock
from context_manager.adapters import AGENT_HEADER, gateway_app
from context_manager.simulator import Simulator

agents = pytest.importorskip("agents")

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from openai.types.responses import ResponseReasoningItem  # noqa: E402

from context_manager.adapters._records import record_of  # noqa: E402
from context_manager.adapters.openai_agents import (  # noqa: E402
    ITEM_KIND,
    RECORDS_SUFFIX,
    TranscriptSession,
)

MODEL = "claude-opus-5-5"
OFFLINE = RunConfig(tracing_disabled=True)
THINKING = {"type": "thinking", "thinking": "the log first", "signature": "sig-abc-123"}


@function_tool
def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


def reasoning(turn: int) -> ResponseReasoningItem:
    """The reasoning item the SDK's LiteLLM route makes of a Claude reply's thinking."""
    block = {**THINKING, "signature": f"{THINKING['signature']}-{turn}"}
    return ResponseReasoningItem(
        id="__fake_id__",
        type="reasoning",
        summary=[],
        encrypted_content=block["signature"],
        provider_data={"thinking_blocks": [block], "model": "claude-opus-5-5"},  # type: ignore[call-arg]
    )


def tool_turn(model: ScriptedModel, turn: int) -> None:
    """One question's model calls: think, call ``read_log``; then answer."""
    model.enqueue([reasoning(turn), function_call("read_log", {}, call_id=f"call-{turn}")])
    model.enqueue([assistant_message(f"All quiet ({turn}).", item_id=f"msg-{turn}")])


def agent_on(model: ScriptedModel) -> Agent[Any]:
    return Agent(name="ada", instructions="You are Ada.", model=model, tools=[read_log])


def reasoning_in(items: list[Any]) -> list[dict[str, Any]]:
    return [dict(i) for i in items if isinstance(i, dict) and i.get("type") == "reasoning"]


def test_the_session_meets_the_sdks_session_protocol(store: Store) -> None:
    assert isinstance(TranscriptSession("ada", store), Session)


async def test_a_restarted_session_replays_every_turns_signed_thinking_as_given(
    store: Store,
) -> None:
    first = ScriptedModel()
    tool_turn(first, 1)
    await Runner.run(
        agent_on(first),
        "check the log",
        session=TranscriptSession("ada", store),
        run_config=OFFLINE,
    )
    given = reasoning_in(await TranscriptSession("ada", store).get_items())
    second = ScriptedModel()  # a restart: a new session and model over the same store
    tool_turn(second, 2)
    session = TranscriptSession("ada", store)
    result = await Runner.run(agent_on(second), "again", session=session, run_config=OFFLINE)
    assert result.final_output == "All quiet (2)."
    replayed = second.calls[0].input
    assert isinstance(replayed, list)
    assert reasoning_in(replayed) == given
    assert given[0]["provider_data"]["thinking_blocks"] == [
        {**THINKING, "signature": "sig-abc-123-1"}
    ]
    in_flight = second.calls[1].input
    assert isinstance(in_flight, list)
    assert len(reasoning_in(in_flight)) == 2  # the tool loop's own reasoning goes back too
    kinds = [i.get("type", "message") for i in await session.get_items()]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output", "message"] * 2


async def test_get_items_with_a_limit_gives_the_newest_oldest_first(store: Store) -> None:
    session = TranscriptSession("ada", store)
    items: list[Any] = [{"role": "user", "content": f"q{n}"} for n in range(5)]
    await session.add_items(items)
    assert await session.get_items(limit=2) == items[3:]
    limited = TranscriptSession("ada", store, session_settings={"limit": 3})
    assert await limited.get_items() == items[2:]
    assert await session.get_items(limit=0) == []


async def test_a_popped_item_stays_stored_on_the_branch_the_session_left(store: Store) -> None:
    session = TranscriptSession("ada", store)
    items: list[Any] = [{"role": "user", "content": f"q{n}"} for n in range(3)]
    await session.add_items(items)
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    await session.add_items([{"role": "user", "content": "q2 again"}])
    again: list[Any] = await TranscriptSession("ada", store).get_items()
    assert [i["content"] for i in again] == [
        "q0",
        "q1",
        "q2 again",
    ]
    records = ContextManager.open(store, namespace=f"ada{RECORDS_SUFFIX}")
    assert len(records.messages(branch="main")) == 3  # the popped item is still there


async def test_popping_the_only_item_and_clearing_leave_an_empty_session(store: Store) -> None:
    session = TranscriptSession("ada", store)
    await session.add_items([{"role": "user", "content": "hello"}])
    assert await session.pop_item() == {"role": "user", "content": "hello"}
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([{"role": "user", "content": "hi"}, {"role": "user", "content": "yo"}])
    kept = [m.id for m in session.records.newest(ITEM_KIND)]
    await session.clear_session()
    assert await TranscriptSession("ada", store).get_items() == []
    namespace = f"ada{RECORDS_SUFFIX}"
    cleared = [record_of(store.get(namespace, i))["item"]["content"] for i in kept]
    assert cleared == ["yo", "hi"]  # still stored, off the session's branch


async def test_sessions_do_not_see_each_others_items(store: Store) -> None:
    await TranscriptSession("ada", store).add_items([{"role": "user", "content": "ada's"}])
    assert await TranscriptSession("bob", store).get_items() == []


async def test_two_hosts_sessions_of_one_id_see_each_others_clears_pops_and_items(
    two_hosts: tuple[Store, Store],
) -> None:
    """Two workers open the same session on one database. What one clears, pops or adds is what
    the other reads next; the other used to go on on the branch the clear hid, so its items
    vanished from the first worker's view."""
    first, second = (TranscriptSession("ada", store) for store in two_hosts)
    await first.add_items([{"role": "user", "content": "one"}])
    assert await second.get_items() == [{"role": "user", "content": "one"}]
    await first.clear_session()
    await first.add_items([{"role": "user", "content": "after the clear"}])
    assert await second.get_items() == [{"role": "user", "content": "after the clear"}]
    await second.add_items([{"role": "user", "content": "from the second"}])
    both = [{"role": "user", "content": "after the clear"}]
    both.append({"role": "user", "content": "from the second"})
    assert await first.get_items() == both
    assert await first.pop_item() == both[-1]
    assert await second.get_items() == both[:1]


# A real Agents SDK agent on Claude: the SDK's LiteLLM model, its base URL at the gateway
# (uvicorn on loopback), which answers from the simulator. Nothing leaves the machine.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list from the network


LITELLM_IMPORT_WARNINGS = pytest.mark.filterwarnings(
    "ignore:Items? .* using the `ReadOnly` qualifier:UserWarning"  # litellm's own types
)


@pytest.fixture
def gateway(store: Store) -> Iterator[tuple[str, Simulator]]:
    pytest.importorskip("uvicorn")
    sim = Simulator()
    with serve(gateway_app(store, simulator_client=sim.client())) as url:
        yield url, sim


def recording(app: Any, bodies: list[dict[str, Any]]) -> Any:
    """``app`` behind an ASGI layer that keeps each request body the framework sent."""

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        if body:
            bodies.append(json.loads(body))
        given = False

        async def replay() -> dict[str, Any]:
            nonlocal given
            if given:
                return {"type": "http.disconnect"}
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return asgi


def claude_agent(url: str, effort: str | None) -> Agent[Any]:
    litellm_model = pytest.importorskip("agents.extensions.models.litellm_model")
    from openai.types.shared import Reasoning

    model = litellm_model.LitellmModel(model=f"anthropic/{MODEL}", base_url=url, api_key="mine")
    settings = ModelSettings(
        reasoning=Reasoning(effort=effort) if effort else None,  # type: ignore[arg-type]
        extra_args=None if effort else {"thinking": {"type": "adaptive"}},
        extra_headers={AGENT_HEADER: "ada"},
    )
    return Agent(
        name="ada",
        instructions="You are Ada.",
        model=model,
        tools=[read_log],
        model_settings=settings,
    )


def recorded_signatures(store: Store) -> list[str]:
    cm = ContextManager.open(store, namespace="ada")
    return [
        b.signature
        for m in cm.messages()
        if m.role == "assistant"
        for b in m.content
        if isinstance(b, ThinkingBlock) and b.signature
    ]


@LITELLM_IMPORT_WARNINGS
async def test_an_agents_sdk_agent_on_claude_keeps_every_replys_thinking_across_a_restart(
    store: Store, gateway: tuple[str, Simulator]
) -> None:
    url, sim = gateway
    questions = ("please use read_log", "and again, please use read_log")
    for question in questions:  # each run a new agent and session: a restart in between
        session = TranscriptSession("ada", store)
        await Runner.run(claude_agent(url, "medium"), question, session=session, run_config=OFFLINE)
    assert len(sim.calls) == 4
    assert [call.status for call in sim.calls] == [200] * 4
    assert [call.dropped for call in sim.calls] == [()] * 4
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 3  # every earlier reply's thinking
    items = await TranscriptSession("ada", store).get_items()
    kept = [
        block["signature"]
        for item in reasoning_in(items)
        for block in item["provider_data"]["thinking_blocks"]
    ]
    assert kept == recorded_signatures(store)
    assert len(kept) == 4


@LITELLM_IMPORT_WARNINGS
async def test_thinking_the_sdk_does_not_replay_is_sent_as_recorded_through_the_gateway(
    store: Store,
) -> None:
    """Thinking turned on without ``reasoning.effort`` (``extra_args``): the SDK replays every
    reply without its thinking, the open tool round's included (the API refuses that); the
    gateway sends the recorded replies."""
    pytest.importorskip("uvicorn")
    sim, bodies = Simulator(), list[Any]()
    with serve(recording(gateway_app(store, simulator_client=sim.client()), bodies)) as url:
        for question in ("please use read_log", "and again, please use read_log"):
            session = TranscriptSession("ada", store)
            await Runner.run(claude_agent(url, None), question, session=session, run_config=OFFLINE)
    assert [b["thinking"] for b in bodies] == [{"type": "adaptive"}] * 4
    assert [thinking_signatures(b) for b in bodies] == [[]] * 4  # the SDK's own replay
    assert [len(thinking_signatures(r)) for r in sim.requests] == [0, 1, 2, 3]
    assert [call.status for call in sim.calls] == [200] * 4
    assert invalid_calls(sim) == []
