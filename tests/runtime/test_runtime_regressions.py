"""Regressions of issue 17 in the runtime: turns, notices and replies, on the simulator."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from helpers import (
    ACTIVATE_TOOL,
    GREP_TOOL,
    READ_LOG_TOOL,
    THINKING_HEAD,
    calling_script,
    message_texts,
    notice_texts,
    request_texts,
    runtime_on,
)

from context_manager import REASONING_LOSS_KIND, Fold, ThinkingBinding
from context_manager.runtime import Agent
from context_manager.simulator import Simulator


@pytest.mark.parametrize("trigger", ["   ", "", "\n\t", [{"type": "text", "text": "  "}]])
async def test_a_blank_trigger_is_refused_and_nothing_is_stored(trigger: object) -> None:
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    with pytest.raises(ValueError, match="blank"):
        await ada.run_turn(trigger)
    assert ada.context.messages(limit=None) == []
    assert sim.requests == []


async def test_a_head_line_never_names_a_reply_older_than_the_newest_one_it_takes() -> None:
    def script(request: dict[str, Any]) -> list[Any]:
        said = json.dumps([m for m in request["messages"] if m["role"] != "system"][-1]["content"])
        if "only think" in said:
            return [{"type": "thinking", "thinking": "pondering"}]
        return [{"type": "thinking", "thinking": "x"}, {"type": "text", "text": "Noted: hello"}]

    sim = Simulator(script=script)
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    await ada.run_turn("only think")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG_TOOL, GREP_TOOL])
    await ada.run_turn("and now")
    assert notice_texts(ada) == [
        "[reasoning] ada: The reasoning behind your earlier replies is no longer in your "
        "context, because your tools changed. Their words are still here. Re-read before "
        "relying on an earlier decision."
    ]


async def test_a_turn_cut_after_its_tool_result_and_a_notice_is_finished_on_resume() -> None:
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(
        Agent("ada", THINKING_HEAD, tools={"read_log": lambda _: "all quiet"})
    )
    cm = ada.context
    cm.add_message("user", "please use tool")
    result = cm.compile(ada.head)
    message = await sim.client().beta.messages.create(**result.request)
    cm.record_reply(message, result)
    (use,) = [b for b in message.content if b.type == "tool_use"]
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}])
    ada.notify("[reasoning] ada: a line stored at the tool round's boundary", REASONING_LOSS_KIND)
    # the process is killed here, before the final reply

    resumed = await ada.resume_turn()

    assert resumed is not None
    last = cm.messages(limit=None)[-1]
    assert last.role == "assistant"
    assert last.content[-1].text == "The log says all is well."  # type: ignore[union-attr]
    assert await ada.resume_turn() is None


async def test_a_reply_recorded_against_a_direct_compile_between_turns_keeps_its_reasoning() -> (
    None
):
    """The line a direct-API compile outside a turn makes is held for its branch and stored
    after the reply recorded against that compile (or as the next turn opens there), never
    between the compile and its reply: the reply then stays valid at the next turn (SPEC 9
    leaves when such a line is stored open; it still rides with the branch's next request)."""
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    ada.head = attrs.evolve(ada.head, system="You are Ada, on call.")
    cm = ada.context
    cm.add_message("user", "a question asked through the direct API")
    result = cm.compile(ada.head)  # strips the first reply: a [reasoning] line is heard
    message = await sim.client().beta.messages.create(**result.request)
    direct = cm.record_reply(message, result)
    strips: list[Any] = []
    cm.on_thinking_strip(lambda strip, key: strips.append(strip))

    await ada.run_turn("and the next turn")

    assert strips == []
    (line,) = notice_texts(ada)
    assert "because your system text changed" in line
    (notice,) = cm.messages(kind=REASONING_LOSS_KIND)
    assert notice.sequence > cm.get_message(direct).sequence
    sent = [
        b["signature"]
        for m in sim.requests[-1]["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "thinking"
    ]
    assert message.content[0].signature in sent


async def test_a_fold_after_a_notice_at_a_tool_round_boundary_keeps_the_result_and_the_line() -> (
    None
):
    """A notice flushed at a tool-round boundary is never folded away before the agent has seen
    it, and the in-flight tool result is kept.

    Append-only changes (SPEC 7b) would append the skill's tool change and lose nothing, so the
    agent runs with ``append_changes=False``: the change is a head change. Under VENDOR_RULES 6
    the open round's reply goes out as recorded and the provider drops its thinking, so the line
    is the drop's (count form), told at the boundary after the first round's result.
    """

    def script(request: dict[str, Any]) -> list[Any]:
        results = json.dumps(request["messages"]).count('"tool_result"')
        if results < 2 and "Ada was asked" not in json.dumps(request["messages"]):
            return [
                {"type": "thinking", "thinking": "step"},
                {"type": "tool_use", "name": "activate_skill", "input": {}},
            ]
        return [{"type": "thinking", "thinking": "done"}, {"type": "text", "text": "Done."}]

    sim = Simulator(script=script)
    fold = Fold(lambda covered: "Ada was asked to use a tool.", trigger_tokens=400, keep_tokens=0)
    head = attrs.evolve(THINKING_HEAD, tools=[ACTIVATE_TOOL])
    ada = Agent("ada", head, strategy=fold, binding=ThinkingBinding(append_changes=False))
    calls: list[int] = []

    def activate(_: dict[str, Any]) -> str:
        calls.append(1)
        if len(calls) == 1:  # the next compile strips: its line waits for the next boundary
            ada.head = attrs.evolve(ada.head, tools=[ACTIVATE_TOOL, GREP_TOOL])
            return "skill active"
        return "second result: " + "grep " * 200  # the next compile folds

    ada.tools["activate_skill"] = activate
    runtime_on(sim).register(ada)
    await ada.run_turn("please use tool")

    line = next(text for text in notice_texts(ada) if text.startswith("[reasoning] ada:"))
    after_fold = " ".join(request_texts(sim.requests[2]))
    assert "Ada was asked to use a tool." in after_fold
    assert "Result of your activate_skill call: second result: grep" in after_fold
    assert line in after_fold
    (summary,) = ada.context.messages(kind="summary")
    assert line not in json.dumps([b.text for b in summary.content])  # type: ignore[union-attr]


async def test_a_line_held_from_a_direct_compile_is_stored_on_its_own_branch_only() -> None:
    """A held line waits for its own branch: a turn on another branch does not store it there,
    and the next turn on its branch stores it as the turn opens (it rides with that request)."""
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    ada.head = attrs.evolve(ada.head, system="You are Ada, on call.")
    cm = ada.context
    cm.compile(ada.head)  # a committing compile on main that is never sent
    cm.fork("side")
    await ada.run_turn("on the side")
    assert cm.messages(branch="main", kind=REASONING_LOSS_KIND) == []
    assert notice_texts(ada) == []  # the fork appends the head change: nothing is lost there

    cm.switch_branch("main")
    turn = await ada.run_turn("back on main")

    (line,) = notice_texts(ada)
    assert "because your system text changed" in line
    assert turn.notices == (cm.messages(kind=REASONING_LOSS_KIND)[0].id,)
    assert line in request_texts(sim.requests[-1])
    assert message_texts(cm, branch="side", kind=REASONING_LOSS_KIND) == []


async def test_a_line_held_past_a_direct_reply_that_calls_a_tool_follows_the_rounds_answer() -> (
    None
):
    """A reply recorded outside a turn that calls a tool keeps the held line waiting (it
    never stands between a call and its result); the next reply recorded there stores it."""
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    cm = ada.context
    cm.add_message("user", "please use tool")
    result = cm.compile(attrs.evolve(ada.head, system="You are Ada, on call."))
    message = await sim.client().beta.messages.create(**result.request)
    cm.record_reply(message, result)
    assert notice_texts(ada) == []
    (use,) = [b for b in message.content if b.type == "tool_use"]
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}])
    result = cm.compile(attrs.evolve(ada.head, system="You are Ada, on call."))
    final = cm.record_reply(await sim.client().beta.messages.create(**result.request), result)

    stored = cm.messages(limit=None)
    assert [m.id for m in stored[-2:]] == [final, cm.messages(kind=REASONING_LOSS_KIND)[0].id]


async def test_a_line_held_for_a_deleted_branch_is_never_stored() -> None:
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    cm = ada.context
    cm.fork("side")
    cm.compile(attrs.evolve(ada.head, system="You are Ada, on call."))  # held for "side"
    cm.switch_branch("main")
    cm.delete_branch("side")

    await ada.run_turn("and on main")

    assert [b.name for b in cm.list_branches()] == ["main"]
    assert notice_texts(ada) == []


async def test_the_default_simulator_calls_a_registered_tool_the_user_asks_for_by_name() -> None:
    sim = Simulator()  # no script: the default one
    runs: list[dict[str, Any]] = []

    def read_log(given: dict[str, Any]) -> str:
        runs.append(given)
        return "ok"

    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD, tools={"read_log": read_log}))

    asked = await ada.run_turn("Please use read_log and tell me what failed.")
    plain = await ada.run_turn("And use grep, too.")  # not offered: answered in words

    assert [(c.name, c.input, c.is_error) for c in asked.tool_calls] == [("read_log", {}, False)]
    assert runs == [{}]
    last = ada.context.get_message(asked.replies[-1]).content[-1]
    assert last.text == "Done."  # type: ignore[union-attr]
    assert plain.tool_calls == ()
    said = ada.context.get_message(plain.replies[-1]).content[-1]
    assert said.text == "You said: And use grep, too."  # type: ignore[union-attr]
