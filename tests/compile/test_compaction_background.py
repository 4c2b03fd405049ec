"""Background server compaction (issue 29, provider rule 27), the compaction call's usage, and
``Compact(keep_turns=...)``, through the real SDK client against the simulator.

A slow compaction is the simulator's answer held back by ``CompactionGate`` (the simulator
answered it when it was sent; the client hears it late). Meanwhile the agent's turns go on
append-only on the full history; the block is swapped in before the first call after it
arrives, and the simulator (which enforces rules 23-27 on its own) accepts every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from helpers import (
    FAST_RETRY,
    GREP_TOOL,
    LONG_TURN,
    PROBE_HEAD,
    calling_script,
    cli,
    compaction_calls,
    compaction_gated_client,
    invalid_calls,
    request_blocks,
    runtime_on,
    thinking_signatures,
    unmarked,
)
from structlog.testing import capture_logs

from context_manager import Compact, ContextManager, Fold, SQLiteStore, Store
from context_manager.runtime import Agent, Runtime, TurnResult
from context_manager.simulator import Simulator

LONG = LONG_TURN
TRIGGER = 300


def turn_text(n: int) -> str:
    return f"Turn {n}: {LONG}" + (" Please use tool probe." if n % 3 == 1 else "")


def agent_on(runtime: Runtime, **options: Any) -> Agent:
    return runtime.register(
        Agent(
            "ada",
            PROBE_HEAD,
            tools={"probe": lambda _: "fine"},
            strategy=Compact(TRIGGER, **options),
        )
    )


def gated_agent(
    store: Store, script: Callable[[dict[str, Any]], list[Any]] | None = None
) -> tuple[Simulator, asyncio.Event, Agent]:
    """A simulator (answering with ``script``, by default one calling ``probe`` when asked),
    the gate its compaction answers wait at, and an agent compacting in the background
    through it."""
    sim = Simulator(script=script or calling_script("probe"))
    gate = asyncio.Event()
    runtime = Runtime(compaction_gated_client(sim, gate), store, retry=FAST_RETRY)
    return sim, gate, agent_on(runtime, background=True)


async def until_compaction_sent(ada: Agent, sim: Simulator, start: int = 0) -> int:
    """Run turns until a compaction request was sent; the number of the next turn."""
    for n in range(start, start + 12):
        await ada.run_turn(turn_text(n))
        if compaction_calls(sim):
            return n + 1
    raise AssertionError("no compaction was asked")


async def arrived(ada: Agent) -> None:
    for _ in range(500):
        if ada.background_compaction == "arrived":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the compaction is {ada.background_compaction}")


async def test_the_turns_go_on_while_a_background_compaction_runs_and_the_next_call_swaps_it_in(
    store: Store,
) -> None:
    sim, gate, ada = gated_agent(store)
    n = await until_compaction_sent(ada, sim)
    [ask] = compaction_calls(sim)
    held = len(ask.request["messages"])
    assert ada.background_compaction == "running"

    meanwhile = [await ada.run_turn(turn_text(k)) for k in range(n, n + 3)]  # a tool round too

    assert len(compaction_calls(sim)) == 1  # past the trigger, yet no second compaction
    assert ada.context.messages(kind="compaction") == []
    assert all(r.compaction is None for r in meanwhile)
    full = sim.calls[-1].request  # the full history, append-only since the request was sent
    assert unmarked(full["messages"][:held]) == unmarked(ask.request["messages"])
    made_meanwhile = thinking_signatures(full)

    gate.set()
    await arrived(ada)
    first = len(sim.calls)
    done = await ada.run_turn("And what now?")

    assert done.compaction is not None
    [block] = ada.context.messages(kind="compaction")
    assert block.id == done.compaction
    assert block.metadata.extra["held"] == held
    swapped = sim.calls[first].request  # the first request after the block arrived
    blocks = request_blocks(swapped)
    assert blocks[0]["type"] == "compaction"
    kept = [b for m in full["messages"][held:] for b in m["content"]]
    assert unmarked(blocks[1 : 1 + len(kept)]) == unmarked(kept)  # exactly those dropped
    kept_thinking = [b["signature"] for b in kept if b["type"] == "thinking"]
    assert len(kept_thinking) >= 3
    assert set(kept_thinking) <= set(made_meanwhile) & set(thinking_signatures(swapped))
    assert done.compaction_usage is not None
    assert done.compaction_usage.input_tokens > 0
    assert invalid_calls(sim) == []


async def test_a_crash_while_a_background_compaction_runs_loses_nothing_and_it_is_asked_again(
    sqlite_path: Any,
) -> None:
    sim, gate, ada = gated_agent(SQLiteStore(sqlite_path))
    n = await until_compaction_sent(ada, sim)
    stored = ada.context.messages()
    # the process dies with the compaction in flight; a new one opens the same store
    restarted = Runtime(sim.client(), SQLiteStore(sqlite_path), retry=FAST_RETRY)
    again = agent_on(restarted, background=True)
    assert again.context.messages() == stored
    for k in range(n, n + 3):
        await again.run_turn(turn_text(k))
        if again.context.messages(kind="compaction"):
            break
    again.cancel_compaction()  # one asked at that turn's end, if any: not waited for

    assert len(again.context.messages(kind="compaction")) == 1
    assert again.context.messages()[: len(stored)] == stored
    gate.set()  # the dead process's answer comes back to nobody
    ada.cancel_compaction()
    assert len(again.context.messages(kind="compaction")) == 1
    assert invalid_calls(sim) == []


async def test_an_edit_while_a_background_compaction_runs_abandons_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sim, gate, ada = gated_agent(store)
    await until_compaction_sent(ada, sim)
    first = ada.context.messages()[0]
    ada.context.edit_message(first.id, "Turn 0, as corrected by the host.")
    gate.set()

    with caplog.at_level(logging.WARNING):
        assert await ada.settle_compaction() is None

    assert "compaction_abandoned" in caplog.text
    assert ada.context.messages(kind="compaction") == []
    assert ada.background_compaction == "idle"
    await ada.run_turn("Still there?")
    assert invalid_calls(sim) == []


async def test_a_background_compaction_that_returns_no_block_is_asked_again_after_a_turn(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sim = Simulator(script=calling_script("probe"))
    sim.fail_compaction_next(outcome="refusal")
    ada = agent_on(runtime_on(sim, store), background=True)
    n = await until_compaction_sent(ada, sim)
    stored = ada.context.messages()
    with caplog.at_level(logging.INFO):
        assert await ada.settle_compaction() is None
    assert "compaction_skipped" in caplog.text
    assert ada.context.messages() == stored

    await ada.run_turn(turn_text(n))
    await ada.settle_compaction()

    assert len(compaction_calls(sim)) == 2
    assert len(ada.context.messages(kind="compaction")) == 1
    assert invalid_calls(sim) == []


async def test_a_background_529_compaction_unavailable_goes_through_the_retry_policy(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script("probe"))
    sim.fail_compaction_next(outcome="compaction_unavailable")
    ada = agent_on(runtime_on(sim, store), background=True)
    await until_compaction_sent(ada, sim)
    assert await ada.settle_compaction() is not None
    assert [c.status for c in compaction_calls(sim)] == [529, 200]


async def test_repeated_compactions_without_a_block_fall_back_with_one_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fold = Fold(lambda covered: f"{len(covered)} messages", trigger_tokens=100_000)
    sim = Simulator(script=calling_script("probe"))
    sim.fail_compaction_next(5, outcome="max_tokens")
    ada = runtime_on(sim, store).register(
        Agent(
            "ada",
            PROBE_HEAD,
            tools={"probe": lambda _: "fine"},
            strategy=Compact(TRIGGER, fallback=fold),
        )
    )
    with caplog.at_level(logging.WARNING):
        for n in range(10):
            await ada.run_turn(turn_text(n))
    assert len(compaction_calls(sim)) == 3
    assert ada.context.strategy is fold
    assert caplog.text.count("compaction_fallback") == 1
    assert ada.context.messages(kind="compaction") == []
    assert invalid_calls(sim) == []


async def compacted_agent(sim: Simulator, store: Store, **options: Any) -> tuple[Agent, TurnResult]:
    ada = agent_on(runtime_on(sim, store), **options)
    for n in range(12):
        result = await ada.run_turn(turn_text(n))
        if result.compaction is not None:
            return ada, result
    raise AssertionError("no compaction was stored")


async def test_a_turn_that_compacts_counts_the_compaction_calls_usage(store: Store) -> None:
    sim = Simulator(script=calling_script("probe"))
    _, result = await compacted_agent(sim, store)
    [ask] = compaction_calls(sim)
    [cost] = ask.response["usage"]["iterations"]

    assert result.compaction_usage is not None
    assert result.compaction_usage.total_input == (
        cost["input_tokens"] + cost["cache_read_input_tokens"] + cost["cache_creation_input_tokens"]
    )
    assert result.compaction_usage.output_tokens == cost["output_tokens"] > 0
    calls = sum((u.total_input for u in result.usage), 0)
    assert result.total_usage.total_input == calls + result.compaction_usage.total_input


def test_transcript_usage_counts_the_compaction_call(tmp_path: Any) -> None:
    path = tmp_path / "agent.db"
    done = cli("run", "--db", path, "--agent", "ada", stdin="hello there\n/compact\n")
    assert done.returncode == 0, done.stderr
    store = SQLiteStore(path)
    try:
        messages = ContextManager.open(store, namespace="ada").messages()
    finally:
        store.close()
    [block] = [m for m in messages if m.metadata.kind == "compaction"]
    [cost] = block.metadata.extra["usage"]["iterations"]
    replies = sum(
        m.metadata.extra["usage"]["input_tokens"]
        for m in messages
        if m.role == "assistant" and m.metadata.kind is None
    )

    shown = cli("transcript", path, "--usage", "--json").stdout.splitlines()

    total = json.loads(shown[-1])["total"]
    assert total["calls"] == 2
    assert total["input_tokens"] == replies + cost["input_tokens"]
    assert cost["input_tokens"] > 0


async def test_keep_turns_two_compacts_the_request_before_the_last_and_keeps_both_replies(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script("probe"))
    ada, _ = await compacted_agent(sim, store, keep_turns=2)
    [ask] = compaction_calls(sim)
    at = sim.calls.index(ask)
    assert unmarked(ask.request["messages"]) == unmarked(sim.calls[at - 2].request["messages"])

    first = len(sim.calls)
    await ada.run_turn("And what now?")

    sent = sim.calls[first].request
    assert request_blocks(sent)[0]["type"] == "compaction"
    assert len(thinking_signatures(sent)) == 2  # both kept replies' thinking, still valid
    assert invalid_calls(sim) == []


def test_keep_turns_outside_one_to_sixty_four_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="keep_turns must be a positive int"):
        Compact(TRIGGER, keep_turns=0)
    with pytest.raises(ValueError, match="at most 64 replies are kept"):
        Compact(TRIGGER, keep_turns=65)


def test_the_demo_compacts_a_long_agent_and_its_next_turn_tells_nothing(tmp_path: Any) -> None:
    path = tmp_path / "demo.db"
    done = cli("demo", "--db", path)
    assert done.returncode == 0, done.stderr
    scene = done.stdout.split("== Scene 8/8", 1)[1].split("== Summary", 1)[0]

    assert re.search(r"assistant ⟨compaction: a server summary of everything up to #\d+⟩", scene)
    assert (
        "sent the kept reply's thinking (1 block, valid); [reasoning] lines this turn: 0" in scene
    )
    assert "notice    [reasoning]" not in scene


async def test_a_branch_switch_while_a_background_compaction_runs_abandons_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sim, gate, ada = gated_agent(store)
    await until_compaction_sent(ada, sim)
    ada.context.fork("aside")
    gate.set()

    with caplog.at_level(logging.WARNING):
        assert await ada.settle_compaction() is None

    assert "compaction_abandoned" in caplog.text
    assert ada.context.messages(kind="compaction") == []
    ada.context.switch_branch("main")
    assert ada.context.messages(kind="compaction") == []
    await ada.run_turn("Back on main.")
    assert invalid_calls(sim) == []


async def test_a_tool_added_back_while_a_compaction_of_its_removal_runs_abandons_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Rule 26: the removal the compaction summarizes stops applying once the block is in, so
    the addition appended meanwhile, kept after the block, would add a tool already on offer
    (a 400 on every later request). The compaction is abandoned; the history stays valid."""
    sim, gate, ada = gated_agent(store)
    both = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP_TOOL])
    ada.head = both
    await ada.run_turn(turn_text(0))
    ada.head = PROBE_HEAD  # grep removed: a head change in what will be summarized
    after = await until_compaction_sent(ada, sim, start=1)
    ada.head = both  # added back while the compaction runs
    await ada.run_turn(turn_text(after))
    gate.set()

    with caplog.at_level(logging.WARNING):
        assert await ada.settle_compaction() is None

    assert "compaction_abandoned" in caplog.text
    await ada.run_turn("Still there?")
    assert invalid_calls(sim) == []


async def test_a_tool_added_back_while_compacting_a_request_ending_in_its_removal_is_offered_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The turn that removed grep made no tool call, so the request compacted ends with the
    system message removing it. That removal is summarized all the same (rule 26): grep added
    back while the compaction runs abandons it, and the next turn offers grep once, instead of
    being refused for adding a tool already on offer (\"tool 'grep' is already available\")."""
    offered: list[list[str]] = []
    answer = calling_script("probe")

    def script(request: dict[str, Any]) -> list[Any]:
        offered.append([tool["name"] for tool in request.get("tools", [])])
        return answer(request)

    sim, gate, ada = gated_agent(store, script)
    both = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP_TOOL])
    ada.head = both
    await ada.run_turn("Hello.")
    ada.head = PROBE_HEAD  # grep removed: the next request ends with the removal
    await ada.run_turn(f"Turn 1: {LONG * 4}")  # past the trigger: the compaction is sent
    [ask] = compaction_calls(sim)
    assert ask.request["messages"][-1]["role"] == "system"
    ada.head = both  # added back while the compaction runs
    await ada.run_turn("Turn 2.")
    gate.set()

    with caplog.at_level(logging.WARNING):
        await ada.settle_compaction()
    done = await ada.run_turn("Still there?")

    assert done.stop_reason == "end_turn"
    assert offered[-1] == ["probe", "grep"]
    assert invalid_calls(sim) == []
    assert "compaction_abandoned" in caplog.text
    assert ada.context.messages(kind="compaction") == []


async def two_hosts(sqlite_path: Any) -> tuple[Simulator, asyncio.Event, Agent, Agent]:
    """Host B compacting in the background through a gate (its compaction in flight when this
    returns) and host A on the same file and simulator, compacting in the foreground."""
    sim = Simulator(script=calling_script("probe"))
    gate = asyncio.Event()
    gated = Runtime(compaction_gated_client(sim, gate), SQLiteStore(sqlite_path), retry=FAST_RETRY)
    host_b = agent_on(gated, background=True)
    await until_compaction_sent(host_b, sim)
    host_a = agent_on(Runtime(sim.client(), SQLiteStore(sqlite_path), retry=FAST_RETRY))
    return sim, gate, host_a, host_b


async def test_a_compaction_another_host_stored_meanwhile_abandons_this_hosts_older_one(
    sqlite_path: Any,
) -> None:
    """Rule 24 (only the newest block is sent) with rule 27: host A compacts and goes on while
    host B's compaction of an older request runs; B's block arriving later is not swapped in
    (it stood before turns A's block summarized, and the thinking made after A's block was
    dropped for its prefix), and B's next turn builds on A's block."""
    sim, gate, host_a, host_b = await two_hosts(sqlite_path)
    for n in range(20, 32):
        await host_a.run_turn(turn_text(n))
        if host_a.context.messages(kind="compaction"):
            break
    [newer] = host_a.context.messages(kind="compaction")
    await host_a.run_turn("Anything after the summary?")
    gate.set()

    with capture_logs() as logs:
        assert await host_b.settle_compaction() is None

    [abandoned] = [e for e in logs if e["event"] == "compaction_abandoned"]
    assert abandoned["reason"] == "another compaction or fold was stored on the branch while it ran"
    assert [m.id for m in host_b.context.messages(kind="compaction")] == [newer.id]
    await host_b.run_turn("Host B again: where are we?")
    assert request_blocks(sim.calls[-1].request)[0]["type"] == "compaction"
    assert invalid_calls(sim) == []


async def test_an_edit_another_host_made_while_a_background_compaction_runs_abandons_it(
    sqlite_path: Any,
) -> None:
    sim, gate, host_a, host_b = await two_hosts(sqlite_path)
    first = host_a.context.messages()[0]
    host_a.context.edit_message(first.id, "Turn 0, as corrected on the other host.")
    gate.set()

    with capture_logs() as logs:
        assert await host_b.settle_compaction() is None

    [abandoned] = [e for e in logs if e["event"] == "compaction_abandoned"]
    assert abandoned["reason"] == "a stored message was edited while it ran"
    assert host_b.context.messages(kind="compaction") == []
    await host_b.run_turn("Still there?")
    assert invalid_calls(sim) == []
