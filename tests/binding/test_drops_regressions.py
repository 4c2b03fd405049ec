"""Regressions of issue 17 in drop placement: a host's multi-round stream, on the simulator."""

from __future__ import annotations

from typing import Any

from helpers import THINKING_HEAD, calling_script

from context_manager import ContextManager, MemoryStore, StoredMessage
from context_manager._binding._stamp import wire_message
from context_manager.simulator import PREFIX_MISMATCH, Simulator


def sent(message: StoredMessage) -> dict[str, Any]:
    """A stored message as a host sends it in an appended round."""
    return wire_message(message)


async def test_a_dropped_block_of_a_stored_appended_round_is_released_and_not_sent_again() -> None:
    sim = Simulator(script=calling_script())
    client = sim.client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "please use tool")
    result = cm.compile(THINKING_HEAD)
    first = await client.beta.messages.create(**result.request)
    reply = cm.record_reply(first, result)
    (use,) = [b for b in first.content if b.type == "tool_use"]
    answer = cm.add_message(
        "user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]
    )
    rounds = [cm.get_message(reply), cm.get_message(answer)]
    streamed = {**result.request, "messages": [*result.request["messages"], *map(sent, rounds)]}
    in_round = f"messages.{len(result.request['messages'])}.content.0"
    sim.force_drop(paths=[in_round], reason=PREFIX_MISMATCH)
    second = await client.beta.messages.create(**streamed)
    assert second.input_transformations
    cm.record_reply(second, result, appended=rounds)

    placed = cm.place_drops(second, result, rounds=rounds)

    assert placed.releases() == ((reply, 0),)
    cm.add_message("user", "And now?")
    following = cm.compile(THINKING_HEAD)
    assert following.thinking_strip is not None
    assert following.thinking_strip.replies == (reply,)
    assert following.request["messages"][1]["content"][0]["type"] != "thinking"
