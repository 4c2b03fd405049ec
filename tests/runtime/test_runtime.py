"""The runtime's whole loop against the simulator, through the real ``anthropic`` client."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import NO_SYSTEM_MESSAGES_MODEL, calling_script
from helpers import notice_texts as notices
from helpers import request_texts as texts

from context_manager import (
    REASONING_LOSS_KIND,
    Fold,
    Head,
    MemoryStore,
    SQLiteStore,
    Store,
    ThinkingBlock,
    render_cache_bytes,
)
from context_manager.runtime import Agent, RetryPolicy, Runtime
from context_manager.simulator import MODEL_MISMATCH, ORGANIZATION_MISMATCH, Simulator

READ_LOG = {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
ACTIVATE = {
    "name": "activate_skill",
    "description": "Grow tools.",
    "input_schema": {"type": "object"},
}
HEAD = Head(
    model=NO_SYSTEM_MESSAGES_MODEL,
    system="You are Ada.",
    tools=[READ_LOG],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
FAST = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.002)


def make(sim: Simulator, store: Store | None = None) -> Runtime:
    return Runtime(sim.client(), store or MemoryStore(), retry=FAST)


async def test_a_head_change_between_turns_is_told_once_at_the_next_boundary_and_sent_next() -> (
    None
):
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": lambda _: "all quiet"}))
    await ada.run_turn("Hello there, Ada.")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG, GREP])
    result = await ada.run_turn("please use tool")
    expected = (
        "[reasoning] ada: The reasoning behind your replies up to the one beginning "
        '"Noted: Hello there, Ada." is no longer in your context, because your tools changed. '
        "Their words are still here. Re-read before relying on an earlier decision."
    )
    assert notices(ada) == [expected]
    assert len(result.notices) == 1
    assert expected in texts(sim.requests[-1])
    assert expected not in texts(sim.requests[-2])
    await ada.run_turn("and again")
    assert notices(ada) == [expected]


async def test_a_skill_that_grows_the_tool_menu_mid_turn_is_told_with_the_this_turn_clause() -> (
    None
):
    """VENDOR_RULES 6 changed this: the open round's reply goes out as recorded under
    ``drop_block``; the provider drops its thinking, and the drop is told (count form)."""
    sim = Simulator(script=calling_script("activate_skill", think=True))
    runtime = make(sim)
    head = attrs.evolve(HEAD, tools=[ACTIVATE])
    ada = Agent("ada", head)

    def activate(_: dict[str, Any]) -> str:
        ada.head = attrs.evolve(ada.head, tools=[ACTIVATE, GREP])
        return "skill active: grep"

    ada.tools["activate_skill"] = activate
    runtime.register(ada)
    await ada.run_turn("please use tool")
    (line,) = notices(ada)
    assert line == (
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        "reasoning behind one of your replies, the one that called activate_skill, one of this "
        "turn's steps. Their words are still here. Re-read before relying on a decision made "
        "since then."
    )


async def test_a_fold_forced_mid_turn_is_told_as_this_turns_step_named_by_its_tool_call() -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    fold = Fold(lambda covered: "Ada was asked to read the log.", trigger_tokens=150, keep_tokens=0)
    ada = runtime.register(
        Agent("ada", HEAD, tools={"read_log": lambda _: "x" * 400}, strategy=fold)
    )
    await ada.run_turn("please use tool")
    (line,) = notices(ada)
    assert line == (
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        "reasoning behind one of your replies, the one that called read_log, one of this turn's "
        "steps. Their words are still here. Re-read before relying on a decision made since then."
    )
    assert len(ada.context.messages(kind="summary")) == 1


async def test_drops_over_three_calls_are_told_once_and_a_quiet_call_ends_the_incident() -> None:
    sim = Simulator(script=calling_script(think=False))
    runtime = make(sim)
    calls = {"n": 0}

    def read_log(_: dict[str, Any]) -> str:
        calls["n"] += 1
        if calls["n"] < 3:  # the next call drops the old reply's reasoning again
            sim.force_drop(paths=["messages.1.content.0"], reason=MODEL_MISMATCH)
        return "line"

    def again(request: dict[str, Any]) -> list[Any]:
        results = sum(
            1
            for m in request["messages"]
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if b.get("type") == "tool_result"
        )
        if results < 3 and "use tool" in json.dumps(request["messages"][2:]):
            return [{"type": "tool_use", "name": "read_log", "input": {}}]
        return [{"type": "text", "text": "done"}]

    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": read_log}))
    sim._script = calling_script(think=True)  # the first reply carries reasoning
    await ada.run_turn("Hello, remember this.")
    sim._script = again
    sim.force_drop(paths=["messages.1.content.0"], reason=MODEL_MISMATCH)
    await ada.run_turn("please use tool three times")
    dropped = [r for r in sim.responses if r.get("input_transformations")]
    assert len(dropped) == 3
    assert len(notices(ada)) == 1
    assert notices(ada)[0].startswith(
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        'reasoning behind one of your replies, the one beginning "Noted: Hello, remember this."'
    )
    sim.force_drop(paths=["messages.1.content.0"], reason=MODEL_MISMATCH)
    await ada.run_turn("once more")
    assert len(notices(ada)) == 2


async def test_a_reply_produced_by_a_call_with_drops_keeps_its_reasoning_on_the_next_call() -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": lambda _: "fine"}))
    await ada.run_turn("first things first")
    sim.force_drop(paths=["messages.1.content.0"], reason=ORGANIZATION_MISMATCH)
    result = await ada.run_turn("please use tool")
    tool_reply = result.replies[0]
    second = sim.requests[-1]
    assert sim.responses[-1]["input_transformations"] == []
    sent = [
        b
        for m in second["messages"]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") == "thinking"
    ]
    stored = ada.context.get_message(tool_reply).content[0]
    first = next(m for m in ada.context.messages(limit=None) if m.role == "assistant").content[0]
    # the dropped block is sent again (issue 28 item 6): the tool reply recorded it before it
    signatures = [first.signature, stored.signature]  # type: ignore[union-attr]
    assert [b["signature"] for b in sent] == signatures
    call = sim.calls[-1]
    assert all(c.reason is None for c in sim.verify({**call.request, "betas": list(call.betas)}))


async def test_the_direct_apis_compile_between_turns_is_heard_and_stored_after_its_reply() -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD))
    await ada.run_turn("hello")
    ada.context.add_message("user", "asked directly")
    result = ada.context.compile(attrs.evolve(HEAD, system="You are Ada, on call."))
    assert notices(ada) == []  # held: stored now, it would stand before the reply
    reply = ada.context.record_reply(
        await sim.client().beta.messages.create(**result.request), result
    )
    (line,) = notices(ada)
    assert "because your system text changed" in line
    assert "this turn's" not in line
    assert ada.context.messages(limit=None)[-1].metadata.kind == REASONING_LOSS_KIND
    assert ada.context.messages(limit=None)[-2].id == reply


async def test_a_compile_before_the_first_turn_is_heard() -> None:
    sim = Simulator()
    runtime = make(sim)
    ada = Agent("ada", HEAD)
    runtime.register(ada)
    ada.context.add_message("user", "imported question")
    ada.context.add_message(
        "assistant",
        [
            {"type": "thinking", "thinking": "", "signature": "imported"},
            {"type": "text", "text": "old"},
        ],
    )
    ada.context.compile(HEAD)
    assert notices(ada) == []  # held until a reply is recorded or a turn opens
    result = await ada.run_turn("a new question")
    (line,) = notices(ada)
    assert 'the one beginning "old"' in line
    stored = ada.context.messages(limit=None)
    assert [m.metadata.kind for m in stored[2:4]] == [REASONING_LOSS_KIND, None]
    assert result.notices == (stored[2].id,)


async def test_nothing_is_told_for_a_removed_agent() -> None:
    sim = Simulator()
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD))
    await ada.run_turn("hello")
    runtime.remove("ada")
    ada.context.compile(attrs.evolve(HEAD, tools=[]))
    assert notices(ada) == []
    assert runtime.teller.told_count("ada") == 0
    with pytest.raises(KeyError, match="registered: none"):
        runtime.remove("ada")


async def test_an_ephemeral_runs_told_state_and_namespace_are_gone_once_it_ends() -> None:
    sim = Simulator()
    store = MemoryStore()
    runtime = make(sim, store)
    async with runtime.ephemeral(Agent("scout", HEAD)) as scout:
        await scout.run_turn("look around")
        scout.head = attrs.evolve(scout.head, tools=[])
        await scout.run_turn("and report")
        assert len(notices(scout)) == 1
        namespace = scout.context.namespace
        assert namespace in store.namespaces()
    assert namespace not in store.namespaces()
    assert scout.teller.told_count("scout") == 0
    assert runtime.teller.told_count() == 0


async def test_a_fork_made_for_a_run_forgets_its_told_state_when_it_ends() -> None:
    sim = Simulator()
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD))
    await ada.run_turn("hello")
    async with ada.forked("what-if") as fork:
        sim.force_drop(paths=["messages.1.content.0"], reason=ORGANIZATION_MISMATCH)
        await fork.run_turn("try something else")
        fork_key = ada.context.current_branch_key()
        assert len(ada.context.messages(kind=REASONING_LOSS_KIND)) == 1
        assert runtime.teller.told_count("ada", fork_key) == 1
    assert ada.context.current_branch().name == "main"
    assert runtime.teller.told_count("ada", fork_key) == 0
    assert [b.name for b in ada.context.list_branches()] == ["main", "what-if"]


async def test_thirty_ephemeral_runs_hold_no_render_record_or_stamp_once_they_end() -> None:
    """SPEC 9/10: a run's caches go when it ends, even while the host keeps its agents."""
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    gc.collect()  # renders of managers gone by now leave the count first
    before = render_cache_bytes()
    kept: list[Agent] = []
    for n in range(30):
        async with runtime.ephemeral(Agent("scout", HEAD)) as scout:
            await scout.run_turn(f"look around {n}, use tool")
            async with scout.forked("what-if"):
                await scout.run_turn("and again")
        kept.append(scout)
    held = [scout.context._compiler.held() for scout in kept]
    assert held == [dict.fromkeys(held[0], 0)] * 30
    assert render_cache_bytes() <= before


async def test_thirty_forked_runs_leave_a_resident_agent_holding_its_main_branch_only() -> None:
    """A fork's render, record, stamps and compile lock go when it ends (bounded over forks)."""
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD))
    await ada.run_turn("hello, use tool")
    main_only = ada.context._compiler.held()
    for n in range(30):
        async with ada.forked(f"what-if-{n}") as fork:
            await fork.run_turn(f"try {n}, use tool")
    held = ada.context._compiler.held()
    assert held["stamps"] <= main_only["stamps"]  # one it shared may go too: re-read on demand
    assert {**held, "stamps": 0} == {**main_only, "stamps": 0}
    assert len(ada.context._async_locks) <= 1
    await ada.run_turn("back on main")
    assert ada.context._compiler.held()["states"] == 1


async def test_a_retried_529_succeeds() -> None:
    sim = Simulator()
    runtime = make(sim)
    ada = runtime.register(Agent("ada", HEAD))
    sim.fail_next(2, status=529)
    result = await ada.run_turn("hello")
    assert len(result.replies) == 1
    assert [r.get("type") for r in sim.responses] == ["error", "error", "message"]


async def test_a_400_is_raised_to_the_caller_and_logged_with_the_compile_id() -> None:
    from structlog.testing import capture_logs

    sim = Simulator()
    runtime = make(sim)
    # max_tokens 0: a request the API refuses (a Head refuses an empty model itself)
    refused = attrs.evolve(HEAD, settings={**HEAD.settings, "max_tokens": 0})
    ada = runtime.register(Agent("ada", refused))
    import anthropic

    with capture_logs() as logs, pytest.raises(anthropic.BadRequestError):
        await ada.run_turn("hello")
    (event,) = [e for e in logs if e["event"] == "provider_rejected"]
    assert event["compile_id"].startswith("cmp_")


async def test_a_tool_that_raises_is_reported_to_the_model_and_the_turn_goes_on() -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim)

    def broken(_: dict[str, Any]) -> str:
        raise ValueError("disk on fire")

    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": broken}))
    result = await ada.run_turn("please use tool")
    assert [c.is_error for c in result.tool_calls] == [True]
    last_user = sim.requests[-1]["messages"][-1]["content"]
    assert last_user[0]["is_error"] is True
    assert last_user[0]["content"] == "ValueError: disk on fire"
    assert result.stop_reason == "end_turn"


async def test_two_agents_in_one_loop_never_see_each_others_messages_or_notices(
    tmp_path: Path,
) -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim, SQLiteStore(tmp_path / "agents.db"))
    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": lambda _: "ada's log"}))
    bob = runtime.register(Agent("bob", HEAD, tools={"read_log": lambda _: "bob's log"}))
    await asyncio.gather(ada.run_turn("ada secret: please use tool"), bob.run_turn("bob secret"))
    bob.head = attrs.evolve(bob.head, tools=[])
    await asyncio.gather(ada.run_turn("ada again"), bob.run_turn("bob again"))
    for request in sim.requests:
        words = json.dumps(request)
        assert not ("ada secret" in words and "bob secret" in words)
    assert notices(ada) == []
    assert len(notices(bob)) == 1
    assert all(m.metadata.target == "bob" for m in bob.context.messages(kind=REASONING_LOSS_KIND))


async def test_agent_names_with_control_characters_are_refused_at_registration() -> None:
    runtime = make(Simulator())
    for bad in ["", "a\nb", "tab\there", "x" * 65, " edge"]:
        with pytest.raises(ValueError, match="agent name"):
            runtime.register(Agent(bad, HEAD))


async def test_a_notice_given_mid_turn_waits_for_the_boundary() -> None:
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    ada = Agent("ada", HEAD)

    def read_log(_: dict[str, Any]) -> str:
        assert ada.notify("[ops] deploy frozen", "ops") is None
        return "ok"

    ada.tools["read_log"] = read_log
    runtime.register(ada)
    result = await ada.run_turn("please use tool")
    assert len(result.notices) == 1
    assert "[ops] deploy frozen" in texts(sim.requests[-1])
    assert ada.notify("[ops] thawed", "ops") is not None


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from context_manager import Head, SQLiteStore
    from context_manager.runtime import Agent, Runtime
    from context_manager.simulator import Simulator

    def script(request):
        last = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
        if any(b.get("type") == "tool_result" for b in last):
            return [{"type": "thinking", "thinking": "ok"}, {"type": "text", "text": "done"}]
        call = {"type": "tool_use", "name": "slow", "input": {}}
        return [{"type": "thinking", "thinking": "go"}, call]

    def slow(_):
        print("IN_TOOL", flush=True)
        time.sleep(60)
        return "never"

    tools = [{"name": "slow", "input_schema": {"type": "object"}}]
    settings = {"max_tokens": 1024, "thinking": {"type": "adaptive"}}
    head = Head(model="claude-opus-5-5", system="s", tools=tools, settings=settings)
    runtime = Runtime(Simulator(script=script).client(), SQLiteStore(sys.argv[1]))
    agent = runtime.register(Agent("ada", head, tools={"slow": slow}))
    asyncio.run(agent.run_turn("start"))
    """
)


async def test_a_process_killed_mid_turn_resumes_with_a_valid_next_request(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    for line in child.stdout:  # structlog's default sink shares stdout with the marker
        if line.strip() == "IN_TOOL":
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()

    sim = Simulator(script=calling_script())
    runtime = make(sim, SQLiteStore(path))
    slow = {"name": "slow", "input_schema": {"type": "object"}}
    head = Head(model="claude-opus-5-5", system="s", tools=[slow], settings=HEAD.settings)
    ada = runtime.register(Agent("ada", head))
    result = await ada.resume_turn()
    assert result is not None
    (call,) = sim.calls
    request = call.request
    assert call.dropped == ()
    assert all(c.reason is None for c in sim.verify({**request, "betas": list(call.betas)}))
    results = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
    assert results[0]["is_error"] is True
    assert await ada.resume_turn() is None


class FailingResultsStore(MemoryStore):
    """A real in-memory store whose first write of tool results fails."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def append(
        self, namespace: str, branch: str, role: Any, content: Any, *a: Any, **k: Any
    ) -> Any:
        if not self.failed and any(getattr(b, "tool_use_id", None) for b in content):
            self.failed = True
            raise OSError("disk full")
        return super().append(namespace, branch, role, content, *a, **k)


async def test_a_notice_waiting_when_a_round_fails_is_held_until_the_round_is_answered() -> None:
    sim = Simulator(script=calling_script())
    store = FailingResultsStore()
    runtime = make(sim, store)
    ada = runtime.register(Agent("ada", HEAD, tools={"read_log": lambda _: "fine"}))
    await ada.run_turn("hello")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG, GREP])
    with pytest.raises(OSError, match="disk full"):
        await ada.run_turn("please use tool")
    assert notices(ada) == []
    result = await ada.resume_turn()
    assert result is not None
    messages = ada.context.messages()
    (notice,) = [m for m in messages if m.metadata.kind == REASONING_LOSS_KIND]
    rollback = next(
        m
        for m in messages
        if m.role == "user"
        and m.sequence < notice.sequence
        and any(getattr(b, "tool_use_id", None) for b in m.content)
    )
    assert rollback.sequence < notice.sequence
    assert all(call.dropped == () for call in sim.calls)


async def test_a_switch_to_another_model_and_back_loses_no_reasoning_and_is_told_once() -> None:
    """VENDOR_RULES 8 and [PT]: keep sending every block; the API drops what the current model
    cannot read, and back on the first model every block reads, the other model's too."""
    sim = Simulator(script=calling_script())
    runtime = make(sim)
    fable = Head(model="claude-fable-5-1", system="You are Ada.", settings=HEAD.settings)
    ada = runtime.register(Agent("ada", fable))
    await ada.run_turn("first on Fable")
    await ada.run_turn("second on Fable")
    ada.head = attrs.evolve(fable, model="claude-opus-5-5")
    await ada.run_turn("third on Opus")
    await ada.run_turn("fourth on Opus")
    ada.head = fable
    await ada.run_turn("fifth, back on Fable")

    replies = [m for m in ada.context.messages() if m.role == "assistant"]
    last = sim.requests[-1]["messages"]
    sent = [b["signature"] for m in last for b in m["content"] if b["type"] == "thinking"]
    made = [b.signature for m in replies[:4] for b in m.content if isinstance(b, ThinkingBlock)]
    assert len(made) == 4
    assert sent == made
    assert [[d.reason for d in c.dropped] for c in sim.calls] == [
        [],
        [],
        [MODEL_MISMATCH] * 2,
        [MODEL_MISMATCH] * 2,
        [],
    ]
    assert notices(ada) == [  # told once, at the switch; nothing at the drops or the way back
        "[reasoning] ada: The reasoning behind your replies up to the one beginning "
        '"Noted: second on Fable" is no longer in your context, because your model changed. '
        "Their words are still here. Re-read before relying on an earlier decision."
    ]
