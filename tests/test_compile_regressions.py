"""Regressions of issue 17 in the compiler: rendering, budgets and folds, on the simulator."""

from __future__ import annotations

import json

from helpers import THINKING_HEAD, calling_script

from context_manager import ContextManager, Fold, MemoryStore
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

    assert request["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."}, use_a, use_b]},
        {"role": "user", "content": results},
    ]
    reply = await Simulator(script=calling_script()).client().beta.messages.create(**request)
    assert reply.content[-1].text == "The log says all is well."  # type: ignore[union-attr]


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
