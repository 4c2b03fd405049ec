"""Token usage per call: on each turn's result, in an operators' event, on the stored reply, and
summed per turn by ``transcript --usage``; the runtime against the simulator, on SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import read_log_script
from structlog.testing import capture_logs

from context_manager import CallUsage, ContextManager, Head, MemoryStore, SQLiteStore, usage_of
from context_manager._cli._main import main
from context_manager.runtime import CALL_USAGE_EVENT, Agent, Runtime
from context_manager.simulator import Simulator

SYSTEM = "You are Ada, the on-call agent. Keep the service healthy. " * 90
READ_LOG = {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
HEAD = Head(
    model="claude-opus-5-5",
    system=SYSTEM,
    tools=[READ_LOG],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


script = read_log_script("check the log", {})
"""Read the log once per question, then answer."""


def read_log(arguments: dict[str, Any]) -> str:
    return "queue drained, no errors since the deploy. " * 10


def simulated(sim: Simulator) -> list[CallUsage]:
    """What the simulator billed for each call, oldest first."""
    return [CallUsage.from_json(call.response["usage"]) for call in sim.calls]


async def _agent(sim: Simulator, store: Any) -> Agent:
    runtime = Runtime(sim.client(), store)
    return runtime.register(Agent(name="ada", head=HEAD, tools={"read_log": read_log}))


async def test_a_turn_reports_each_calls_usage_and_each_reply_keeps_its_own() -> None:
    sim = Simulator(script=script)
    agent = await _agent(sim, MemoryStore())

    first = await agent.run_turn("what does the log say?")
    second = await agent.run_turn("and now?")

    billed = simulated(sim)
    assert [*first.usage, *second.usage] == billed
    assert len(second.usage) == len(second.replies) == 2
    assert second.total_usage == billed[2] + billed[3]
    assert second.total_usage.cache_read_input_tokens > 0
    stored = [agent.context.get_message(r) for r in [*first.replies, *second.replies]]
    assert [CallUsage.from_json(m.metadata.extra["usage"]) for m in stored] == billed


async def test_each_call_logs_one_call_usage_event_with_its_tokens() -> None:
    sim = Simulator(script=script)
    agent = await _agent(sim, MemoryStore())

    with capture_logs() as logs:
        result = await agent.run_turn("what does the log say?")

    events = [e for e in logs if e["event"] == CALL_USAGE_EVENT]
    assert len(events) == len(result.replies) == 2
    assert all(str(e["compile_id"]).startswith("cmp_") for e in events)
    assert [
        CallUsage(
            e["input_tokens"],
            e["cache_read_input_tokens"],
            e["cache_creation_input_tokens"],
            e["output_tokens"],
        )
        for e in events
    ] == list(result.usage)
    assert {e["agent"] for e in events} == {"ada"}


def test_a_reply_recorded_from_blocks_alone_keeps_no_usage() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "hello")
    result = cm.compile(HEAD)
    reply = cm.record_reply([{"type": "text", "text": "hi"}], result)

    assert cm.get_message(reply).metadata.extra == {}
    assert usage_of([{"type": "text", "text": "hi"}]) is None


async def test_transcript_usage_sums_each_turns_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.db"
    sim = Simulator(script=script)
    store = SQLiteStore(path)
    agent = await _agent(sim, store)
    turns = [await agent.run_turn(q) for q in ("what does the log say?", "and now?")]
    store.close()

    assert main(["transcript", str(path), "--usage", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["transcript", str(path), "--usage"]) == 0
    text = capsys.readouterr().out

    per_turn, total = lines[:-1], lines[-1]["total"]
    assert [CallUsage.from_json(line) for line in per_turn] == [t.total_usage for t in turns]
    assert [line["calls"] for line in per_turn] == [2, 2]
    assert [line["text"] for line in per_turn] == ["what does the log say?", "and now?"]
    whole = CallUsage.total(simulated(sim))
    assert CallUsage.from_json(total) == whole
    assert total["cache_read_share"] == whole.cache_read_input_tokens / whole.total_input
    assert "what does the log say?" in text
    assert f"of {whole.total_input} input tokens" in text


def test_transcript_usage_refuses_kind_and_reasoning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.db"
    cm = ContextManager.open(SQLiteStore(path), namespace="ada")
    cm.add_message("user", "hello")
    cm.store.close()

    assert main(["transcript", str(path), "--usage", "--kind", "summary"]) == 2
    assert "--usage sums every reply's tokens per turn" in capsys.readouterr().err
