"""The OpenAI Agents SDK's ``Runner`` with ``TranscriptSession``, on every store.

The model is the SDK's own test double (``agents.testing.ScriptedModel``): the Agents SDK reaches
Claude only through LiteLLM or any-llm (neither installed here; both call out over the network),
so the session is exercised with the SDK's Runner, its tool loop and its own item shapes. The
reasoning item is the one the SDK's LiteLLM route builds from a Claude reply: its signed
``thinking_blocks`` in ``provider_data``, the signatures in ``encrypted_content``.
"""

from __future__ import annotations

from typing import Any

import pytest

from context_manager import ContextManager, Store

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from openai.types.responses import ResponseReasoningItem  # noqa: E402

from context_manager.adapters._records import record_of  # noqa: E402
from context_manager.adapters.openai_agents import (  # noqa: E402
    ITEM_KIND,
    RECORDS_SUFFIX,
    TranscriptSession,
)

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
        provider_data={"thinking_blocks": [block], "model": "claude-opus-5-5"},
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
    assert [i["content"] for i in await TranscriptSession("ada", store).get_items()] == [
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
