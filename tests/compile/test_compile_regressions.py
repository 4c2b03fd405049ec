"""Regressions of issue 17 in the compiler: rendering, budgets and folds, on the simulator."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import THINKING_HEAD, calling_script, snapshots_off, unmarked

from context_manager import ContextManager, Fold, MemoryStore, OverBudget, ToolResultBlock
from context_manager.simulator import Simulator


async def test_two_assistant_messages_whose_calls_one_user_message_answers_send_both_results() -> (
    None
):
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "Read both logs.")
    use_a = {"type": "tool_use", "id": "toolu_a", "name": "read_log", "input": {"n": 1}}
    use_b = {"type": "tool_use", "id": "toolu_b", "name": "read_log", "input": {"n": 2}}
    cm.add_message("assistant", [{"type": "text", "text": "Reading."}, use_a])
    cm.add_message("assistant", [use_b])
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "log one"},
        {"type": "tool_result", "tool_use_id": "toolu_b", "content": "log two"},
    ]
    cm.add_message("user", results)

    request = cm.compile(THINKING_HEAD).request

    assert unmarked(request["messages"][1:]) == [
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."}, use_a, use_b]},
        {"role": "user", "content": results},
    ]
    reply = await Simulator(script=calling_script()).client().beta.messages.create(**request)
    assert reply.content[-1].text == "The log says all is well."


async def exchanges(cm: ContextManager, sim: Simulator, count: int, budget: int | None) -> None:
    """``count`` user messages, each answered by the simulator through the real SDK client."""
    client = sim.client()
    for n in range(count):
        cm.add_message("user", f"Question number {n}: what about part {n}?")
        result = cm.compile(THINKING_HEAD, budget=budget)
        cm.record_reply(await client.beta.messages.create(**result.request), result)


async def test_a_budget_on_passthrough_sends_the_whole_history_when_it_fits() -> None:
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    await exchanges(cm, sim, 4, None)
    cm.add_message("user", "And the last one?")
    unbudgeted = cm.compile(THINKING_HEAD, dry_run=True)

    budgeted = cm.compile(THINKING_HEAD, budget=100_000)

    assert len(budgeted.request["messages"]) == 9
    assert budgeted.request["messages"] == unbudgeted.request["messages"]
    assert budgeted.thinking_strip is None


async def test_a_budget_on_fold_sends_the_summary_and_every_message_after_what_it_covers() -> None:
    sim = Simulator(script=calling_script())
    fold = Fold(
        lambda covered: "Earlier questions were answered.", trigger_tokens=250, keep_tokens=120
    )
    cm = ContextManager.open(MemoryStore(), namespace="ada", strategy=fold)
    await exchanges(cm, sim, 4, None)
    assert len(cm.messages(kind="summary")) >= 1
    cm.add_message("user", "And the last one?")
    unbudgeted = cm.compile(THINKING_HEAD, dry_run=True)

    budgeted = cm.compile(THINKING_HEAD, budget=100_000)

    assert budgeted.request["messages"] == unbudgeted.request["messages"]
    assert "Earlier questions were answered." in json.dumps(budgeted.request["messages"][0])
    assert len(budgeted.request["messages"]) > 1


async def test_a_budget_too_small_for_the_newest_message_refuses_before_folding() -> None:
    """Issue 17 item 2: ``OverBudget`` is raised before the fold's summary is stored, so no
    fold's strip goes unheard, and the next compile with a budget that fits sends the newest
    user message."""
    sim = Simulator(script=calling_script())
    summaries: list[int] = []

    def summarize(covered: object) -> str:
        summaries.append(1)
        return "Earlier: questions about parts."

    cm = ContextManager.open(
        MemoryStore(), namespace="ada", strategy=Fold(summarize, trigger_tokens=200)
    )
    heard: list[object] = []
    cm.on_thinking_strip(lambda strip, key: heard.append(strip))
    await exchanges(cm, sim, 4, None)
    summaries.clear()
    heard.clear()
    stored = cm.messages(kind="summary")
    cm.add_message("user", "A long last question: " + "why " * 400)

    with pytest.raises(OverBudget):
        cm.compile(THINKING_HEAD, budget=150)

    assert cm.messages(kind="summary") == stored
    assert summaries == []
    assert heard == []
    result = cm.compile(THINKING_HEAD, budget=100_000)
    last = result.request["messages"][-1]["content"]
    assert "A long last question" in json.dumps(last)


async def test_two_concurrent_async_compiles_on_one_branch_fold_once_and_strip_once() -> None:
    """Issue 17 item 3: compiles on one branch are serialized, so an async summarizer that
    yields does not let a second compile store a second summary of the same range."""
    sim = Simulator(script=calling_script())
    calls: list[int] = []

    async def summarize(covered: object) -> str:
        calls.append(1)
        await asyncio.sleep(0.01)
        return "Earlier: questions about parts."

    cm = ContextManager.open(
        MemoryStore(), namespace="ada", strategy=Fold(summarize, trigger_tokens=200)
    )
    client = sim.client()
    for n in range(4):
        cm.add_message("user", f"Question number {n}: what about part {n}? " + "and " * 30)
        result = await cm.compile_async(THINKING_HEAD)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
    folds_before = len(cm.messages(kind="summary"))
    cm.add_message("user", "One more: " + "more " * 100)
    heard: list[object] = []
    cm.on_thinking_strip(lambda strip, key: heard.append(strip))

    first, second = await asyncio.gather(
        cm.compile_async(THINKING_HEAD), cm.compile_async(THINKING_HEAD)
    )

    assert len(cm.messages(kind="summary")) - folds_before <= 1
    assert len(heard) <= 1
    assert first.request["messages"] == second.request["messages"]


def test_a_round_that_kept_a_dropped_budgets_window_renders_what_a_restart_renders() -> None:
    """Found by the compile fuzzing helper. A budget jumped the window at a turn's first call;
    the calls after it, without a budget, kept that start while the tool round was open (rule
    6). Once the round closed, the kept render went on extending from that start while a
    render from the store (a restart, or the render dropped) started at the branch's start
    again: the same stored state sent two different requests (SPEC 7)."""
    sim = Simulator(script=calling_script())
    client = sim.sync_client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    for text in ("The deploy failed. " * 30, "Which build was it? " * 30, "Now use tool."):
        cm.add_message("user", text)
        budget = 200 if text == "Now use tool." else None
        while True:
            result = cm.compile(THINKING_HEAD, budget=budget)
            reply = client.beta.messages.create(**result.request)
            cm.record_reply(reply, result)
            budget = None
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            cm.add_message("user", [ToolResultBlock(c.id, "all is well") for c in calls])
    cm.add_message("user", "And the next one?")

    kept = cm.compile(THINKING_HEAD, dry_run=True)
    cm.forget_cache()
    with snapshots_off():
        cold = cm.compile(THINKING_HEAD, dry_run=True)

    assert kept.request == cold.request
