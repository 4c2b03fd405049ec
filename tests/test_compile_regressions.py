"""Regressions of issue 17 in the compiler: rendering, budgets and folds, on the simulator."""

from __future__ import annotations

from helpers import THINKING_HEAD, calling_script

from context_manager import ContextManager, MemoryStore
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
