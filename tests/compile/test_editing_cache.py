"""Cache breakpoints around the server's clearing (issue #30, VENDOR_RULES 29: each clear
invalidates the prompt cache from the cleared point). The compiler marks where the next clear
will change the request and where the previous call's would have, so each clear costs one write
from the previous clear point on, measured by the simulator's prompt cache."""

from __future__ import annotations

import json
from typing import Any

from helpers import THINKING_HEAD, invalid_calls, runtime_on

from context_manager import ClearToolUses, ContextEditing
from context_manager._compile._clear_cache import clear_point, clear_points
from context_manager.runtime import Agent
from context_manager.simulator import Simulator

KEEP = 2
EDITING = ContextEditing(ClearToolUses(trigger_tokens=8_000, keep=KEEP))
CALLS_PER_TURN = 3


def use(n: int, name: str = "read_log") -> dict[str, Any]:
    return {"type": "tool_use", "id": f"t{n}", "name": name, "input": {"n": n}}


def result(n: int) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": f"t{n}", "content": "x"}


def rounds(count: int, names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(count):
        name = names[n] if n < len(names) else "read_log"
        history.append(
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "."}, use(n, name)]}
        )
        history.append({"role": "user", "content": [result(n)]})
    return history


def test_the_clear_point_is_just_before_the_result_the_next_clear_changes() -> None:
    history = rounds(4)  # uses t0..t3; kept: t2, t3; the next clear changes t2's result
    assert clear_point(history, ClearToolUses(keep=2)) == ("messages", 5, 1)  # t2's call
    assert clear_point(history, ClearToolUses(keep=2, clear_inputs=True)) == ("messages", 4, 0)
    # an excluded oldest kept use is never cleared: the point is the next one's
    excluded = rounds(4, ("read_log", "read_log", "memory", "read_log"))
    assert clear_point(excluded, ClearToolUses(keep=2, exclude_tools=["memory"])) == (
        "messages",
        7,
        1,
    )
    assert clear_point(history, ClearToolUses(keep=0)) is None  # everything is cleared already


def test_a_moved_boundary_marks_both_points_and_gives_up_the_stale_previous_end() -> None:
    history = rounds(4)
    moved = clear_points(history, ClearToolUses(keep=2), previous_end=6, over_trigger=True)
    assert moved.points == (("messages", 5, 1), ("messages", 3, 1))
    assert moved.previous_stale
    under = clear_points(history, ClearToolUses(keep=2), previous_end=6, over_trigger=False)
    assert not under.previous_stale  # below the trigger the server clears nothing
    same = clear_points(history, ClearToolUses(keep=2), 8, True)  # no use added since
    assert same.points == (("messages", 5, 1),)
    assert not same.previous_stale


def tool_loop(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Call ``read_log`` ``CALLS_PER_TURN`` times a turn, then answer."""
    done = 0
    for message in reversed(request["messages"]):
        content = message["content"]
        if message["role"] != "user":
            continue
        if not isinstance(content, list) or any(b.get("type") != "tool_result" for b in content):
            break
        done += 1
    if done < CALLS_PER_TURN:
        return [
            {"type": "thinking", "thinking": f"step {done}"},
            {"type": "tool_use", "name": "read_log", "input": {"part": done}},
        ]
    return [{"type": "thinking", "thinking": "done"}, {"type": "text", "text": "All read."}]


def results_sent(request: dict[str, Any]) -> list[Any]:
    return [
        block
        for message in request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


async def test_each_clear_costs_one_cache_write_from_the_previous_clear_point() -> None:
    sim = Simulator(script=tool_loop)
    sizes = iter(range(10_000))
    runtime = runtime_on(sim)
    ada = runtime.register(
        Agent(
            "ada",
            THINKING_HEAD,
            tools={"read_log": lambda _: "log line. " * (200 + 137 * (next(sizes) % 6))},
            editing=EDITING,
        )
    )
    usages: list[Any] = []
    edits: list[Any] = []
    for turn in range(7):
        result = await ada.run_turn(f"Turn {turn}: read the logs please.")
        usages += result.usage
        edits += result.edits

    first_clear = next(k for k, e in enumerate(edits) if e.cleared_tool_uses)
    checked = 0
    for k in range(first_clear + 4, len(usages)):  # once the cleared prefix passes the minimum
        usage, request = usages[k], sim.requests[k]
        assert edits[k].cleared_tool_uses > 0
        assert usage.cache_read_input_tokens > 0, k  # the previous clear point is read
        # what is written is what the server's view changed: the kept results and the newest
        # round, never the window again (the simulator counts a quarter token a character)
        kept = results_sent(request)[-KEEP:]
        changed = sum(len(json.dumps(block)) for block in kept) // 4 + 400
        assert usage.cache_creation_input_tokens <= changed, k
        checked += 1
    assert checked >= 12
    assert invalid_calls(sim) == []
