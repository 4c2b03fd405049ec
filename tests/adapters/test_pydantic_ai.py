"""pydantic-ai (the real ``pydantic-ai-slim[anthropic]``) through ``ManagedAsyncAnthropic``.

pydantic-ai #7984: dynamic ``@agent.instructions`` that change every run and a toolset filtered
per run change ``system`` and ``tools`` on every run, so a model with the prefix check refuses the
replayed thinking (400), and pydantic-ai's retry with ``drop_block`` then discards it on every
later call. Through the managed client, the same agent's changes are appended and every reply's
thinking is sent and accepted, across a tool loop with interleaved thinking and a restart.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

import pytest
from helpers import invalid_calls

from context_manager import SQLiteStore, Store, Window
from context_manager.adapters import ManagedAsyncAnthropic
from context_manager.simulator import Simulator

pydantic_ai = pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.capabilities import ProcessHistory  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessagesTypeAdapter,
    ModelRequest,
    UserPromptPart,
)
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings  # noqa: E402
from pydantic_ai.providers.anthropic import AnthropicProvider  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

MODEL = "claude-opus-5-5"
"""Runs the prefix check and takes mid-conversation system messages (VENDOR_RULES 10, 16)."""


def read_log() -> str:
    """Read the log."""
    return "all is well"


def grep(pattern: str) -> str:
    """Search the log for a pattern."""
    return f"no line matches {pattern}"


def issue_7984_agent(client: Any) -> Agent[int, str]:
    """The agent of pydantic-ai #7984: instructions naming the run, a toolset filtered per run."""
    model = AnthropicModel(MODEL, provider=AnthropicProvider(anthropic_client=client))
    toolset = FunctionToolset[int]([read_log, grep]).filtered(
        lambda ctx, tool: tool.name != "grep" or ctx.deps % 2 == 0
    )
    agent: Agent[int, str] = Agent(
        model,
        deps_type=int,
        toolsets=[toolset],
        model_settings=AnthropicModelSettings(
            anthropic_thinking={"type": "adaptive"}, max_tokens=1024
        ),
    )

    @agent.instructions
    def name_the_run(ctx: RunContext[int]) -> str:
        return f"You are Ada, on run {ctx.deps}."

    return agent


async def run_three(agent: Agent[int, str], history: list[Any] | None = None) -> list[Any]:
    """Three runs, each asking for the log (a tool loop: call, result, answer)."""
    for run in range(3):
        result = await agent.run(f"question {run}: use read_log", deps=run, message_history=history)
        history = result.all_messages()
    assert history is not None
    return history


def sent_thinking(request: dict[str, Any]) -> int:
    """Thinking blocks a request replays."""
    return sum(
        1
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "thinking"
    )


def replies_before(request: dict[str, Any]) -> int:
    """Assistant messages a request carries (each reply of this agent thought once)."""
    return sum(1 for message in request["messages"] if message["role"] == "assistant")


@pytest.fixture
def simulator() -> Simulator:
    return Simulator()


async def test_without_the_adapter_the_simulator_refuses_then_drops_the_replayed_thinking(
    simulator: Simulator,
) -> None:
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        await run_three(issue_7984_agent(simulator.client()))
    statuses = [call.status for call in simulator.calls]
    dropped = sum(len(call.dropped) for call in simulator.calls)
    assert 400 in statuses
    assert dropped >= 4
    assert any("rejected a replayed thinking block" in str(w.message) for w in heard)


async def test_through_the_managed_client_no_call_is_refused_and_no_thinking_is_dropped(
    simulator: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada")
    await run_three(issue_7984_agent(client))
    assert [call.status for call in simulator.calls] == [200] * 6
    assert [call.dropped for call in simulator.calls] == [()] * 6
    assert invalid_calls(simulator) == []
    for call in simulator.calls:  # every earlier reply's thinking goes out with every call
        assert sent_thinking(call.request) == replies_before(call.request)


async def test_the_changed_instructions_and_tools_are_appended_and_the_head_stays_as_first_sent(
    simulator: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada")
    await run_three(issue_7984_agent(client))
    systems = {str(call.request.get("system")) for call in simulator.calls}
    tools = {str(call.request.get("tools")) for call in simulator.calls}
    assert len(systems) == 1
    assert "run 0" in systems.pop()
    assert len(tools) == 1
    changes = client.context("ada").messages(kind="head-change")
    texts = [b.text for m in changes for b in m.content if hasattr(b, "text")]
    assert any("You are Ada, on run 1." in t for t in texts)
    assert any("You are Ada, on run 2." in t for t in texts)
    assert any(b.__class__.__name__ == "UnknownBlock" for m in changes for b in m.content)


async def test_a_tool_loop_with_interleaved_thinking_keeps_the_in_flight_reasoning(
    simulator: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada")
    agent = issue_7984_agent(client)
    result = await agent.run("use read_log", deps=0)
    assert result.output == "Done."
    _call, answer = simulator.calls
    in_flight = answer.request["messages"][-2]
    assert in_flight["role"] == "assistant"
    assert [b["type"] for b in in_flight["content"]] == ["thinking", "tool_use"]
    assert answer.status == 200
    assert answer.dropped == ()
    stored = client.context("ada").messages()
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]


async def test_a_streamed_run_is_recorded_and_replays_its_thinking(
    simulator: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada")
    agent = issue_7984_agent(client)
    seen: list[Any] = []

    async def handler(_: Any, events: AsyncIterable[Any]) -> None:
        seen.extend([event async for event in events])

    first = await agent.run("use read_log", deps=0, event_stream_handler=handler)
    await agent.run(
        "again", deps=1, message_history=first.all_messages(), event_stream_handler=handler
    )
    assert seen
    assert all(call.stream for call in simulator.calls)
    assert [call.status for call in simulator.calls] == [200] * 3
    assert [call.dropped for call in simulator.calls] == [()] * 3
    assert sent_thinking(simulator.calls[-1].request) == 2


async def test_a_restart_between_runs_reconciles_the_saved_history_without_a_loss(
    simulator: Simulator, tmp_path: Path
) -> None:
    path = tmp_path / "ada.db"
    first_store = SQLiteStore(path)
    client = ManagedAsyncAnthropic(simulator.client(), first_store, agent="ada")
    history = await run_three(issue_7984_agent(client))
    saved = ModelMessagesTypeAdapter.dump_json(history)
    first_store.close()

    reopened = SQLiteStore(path)
    client = ManagedAsyncAnthropic(simulator.client(), reopened, agent="ada")
    agent = issue_7984_agent(client)
    restored = ModelMessagesTypeAdapter.validate_json(saved)
    result = await agent.run("question 3: use read_log", deps=3, message_history=restored)
    assert result.output == "Done."
    after = simulator.calls[6:]
    assert [call.status for call in after] == [200, 200]
    assert [call.dropped for call in after] == [(), ()]
    assert invalid_calls(simulator) == []
    for call in after:
        assert sent_thinking(call.request) == replies_before(call.request)
    own = [m for m in client.context("ada").messages() if m.metadata.kind is None]
    assert len(own) == 16  # four runs of four messages: nothing was stored twice
    reopened.close()


def keep_last_turn(messages: list[Any]) -> list[Any]:
    """A pydantic-ai history processor: only the newest turn (from the newest user prompt on)."""
    prompts = [
        k
        for k, message in enumerate(messages)
        if isinstance(message, ModelRequest)
        and any(isinstance(part, UserPromptPart) for part in message.parts)
    ]
    return messages[prompts[-1] :] if prompts else messages


def windowed_agent(client: Any) -> Agent[int, str]:
    agent = issue_7984_agent(client)
    return Agent(
        agent.model,
        deps_type=int,
        tools=[read_log],
        capabilities=[ProcessHistory(keep_last_turn)],
        model_settings=AnthropicModelSettings(
            anthropic_thinking={"type": "adaptive"}, max_tokens=1024
        ),
    )


async def test_a_history_processor_that_drops_old_turns_is_followed_and_reported(
    simulator: Simulator, store: Store
) -> None:
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada")
    strips: list[Any] = []
    client.context("ada").on_thinking_strip(lambda strip, _: strips.append(strip))
    await run_three(windowed_agent(client))
    assert [call.status for call in simulator.calls] == [200] * 6
    assert [call.dropped for call in simulator.calls] == [()] * 6
    assert invalid_calls(simulator) == []
    first_words = [call.request["messages"][0]["content"][0]["text"] for call in simulator.calls]
    assert first_words[-1].startswith("question 2")  # the framework's window is what goes out
    assert strips
    assert {strip.cause for strip in strips} == {"messages"}


async def test_with_its_own_strategy_the_library_keeps_what_the_processor_dropped(
    simulator: Simulator, store: Store
) -> None:
    window = Window(max_tokens=200_000)
    client = ManagedAsyncAnthropic(simulator.client(), store, agent="ada", strategy=window)
    await run_three(windowed_agent(client))
    assert [call.status for call in simulator.calls] == [200] * 6
    assert [call.dropped for call in simulator.calls] == [()] * 6
    last = simulator.calls[-1].request
    assert replies_before(last) == 5  # all of it, though pydantic-ai sent its last turn only
    assert sent_thinking(last) == 5
