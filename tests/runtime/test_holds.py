"""Holds: the bundled runtime holds its agent for a whole turn, across tasks, processes and hosts.

A turn's rounds (a reply and its tool results) are never interleaved with another runtime's turn
on the same agent; a host that finds the agent held waits, then gets ``AgentBusy`` naming the
holder; a holder killed mid-turn frees the agent. Real SQLite files and a real PostgreSQL server
(``tests/conftest.py``), the real SDK client on the simulator, real OS processes.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PROBE_HEAD, StoreWithout, head_json, invalid_calls
from postgres_server import Server
from structlog.testing import capture_logs

from context_manager import (
    AgentBusy,
    ContextManager,
    PostgresStore,
    SQLiteStore,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator

HEAD = PROBE_HEAD
HOST = socket.gethostname()


def texts(message: Any) -> str:
    return " ".join(b.text for b in message.content if isinstance(b, TextBlock))


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """``(kind, where)`` of a database several processes open: a SQLite file or a DSN."""
    if request.param == "sqlite":
        yield "sqlite", str(request.getfixturevalue("sqlite_path"))
    else:
        yield "postgres", request.getfixturevalue("postgres_dsn")


def opened(kind: str, where: str) -> Store:
    return SQLiteStore(where) if kind == "sqlite" else PostgresStore(where)


HOST_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from context_manager import Head, PostgresStore, SQLiteStore
    from context_manager.runtime import Agent, Runtime
    from context_manager.simulator import Simulator
    from helpers import invalid_calls

    kind, where, name, mode, turns = sys.argv[1:6]
    head = Head(**json.loads(sys.argv[6]))

    def probe(args):
        if mode == "stall":
            print("IN TOOL", flush=True)
            time.sleep(120)
        time.sleep(0.05)  # a slow tool: the round stays open a while
        return f"{name} result"

    async def main():
        store = SQLiteStore(where) if kind == "sqlite" else PostgresStore(where)
        sim = Simulator()
        client = sim.client()
        runtime = Runtime(client, store, holder=f"host-{name}", hold_timeout=60)
        agent = runtime.register(Agent(name="ada", head=head, tools={"probe": probe},
                                       reasoning=False))
        print("READY", flush=True)
        sys.stdin.readline()  # both hosts start together
        for n in range(int(turns)):
            await agent.run_turn(f"use probe: {name} turn {n}")
            await asyncio.sleep(0.01)
        print("VERIFIED", len(sim.calls), json.dumps(invalid_calls(sim)), flush=True)
        await client.close()
        store.close()

    asyncio.run(main())
    """
)


def start_host(kind: str, where: str, name: str, mode: str, turns: int) -> subprocess.Popen[str]:
    """A host process running the bundled runtime on agent ``ada``; it waits for a line on
    stdin after printing ``READY``."""
    here = Path(__file__).resolve().parents[1]  # tests/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
    host = subprocess.Popen(
        [sys.executable, "-c", HOST_SCRIPT, kind, where, name, mode, str(turns), head_json(HEAD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert host.stdout is not None
    ready = host.stdout.readline()
    assert ready == "READY\n", ready + (host.stderr.read() if host.stderr else "")
    return host


def go(host: subprocess.Popen[str]) -> None:
    assert host.stdin is not None
    host.stdin.write("go\n")
    host.stdin.flush()


def test_two_processes_running_one_agent_through_the_runtime_never_interleave_a_round(
    shared: tuple[str, str],
) -> None:
    """Two hosts run turns with tool rounds on the same agent and branch at once: each turn is
    whole (trigger, call, its results, answer), nothing is lost or duplicated, the hosts took
    turns, and every request either host compiled verified against the simulator."""
    kind, where = shared
    turns = 5
    store = opened(kind, where)
    try:
        ContextManager.open(store, namespace="ada")  # the agent exists before either host
        hosts = [start_host(kind, where, name, "turns", turns) for name in ("a", "b")]
        for host in hosts:
            go(host)
        outputs = [host.communicate(timeout=180) for host in hosts]
        for host, (_, err) in zip(hosts, outputs, strict=True):
            assert host.returncode == 0, err
        for out, _ in outputs:
            verified = [line.split(maxsplit=2) for line in out.splitlines() if line[:1] == "V"]
            assert [["VERIFIED", str(2 * turns), "[]"]] == verified

        cm = ContextManager.open(store, namespace="ada")
        stored = cm.messages()
        sequences = [m.sequence for m in stored]
        assert sequences == sorted(set(sequences))
        said = [m for m in stored if m.role != "system"]
        assert len(said) == 4 * 2 * turns
        order = []
        for trigger, call, results, answer in (said[i : i + 4] for i in range(0, len(said), 4)):
            by, _, n = texts(trigger).removeprefix("use probe: ").partition(" turn ")
            uses = [b for b in call.content if isinstance(b, ToolUseBlock)]
            answers = [b for b in results.content if isinstance(b, ToolResultBlock)]
            assert (trigger.role, call.role, results.role, answer.role) == (
                "user",
                "assistant",
                "user",
                "assistant",
            )
            assert [u.id for u in uses] == [r.tool_use_id for r in answers]
            assert [r.content for r in answers] == [f"{by} result"]
            assert not any(isinstance(b, ToolUseBlock) for b in answer.content)
            order.append((by, int(n)))
        assert sorted(order) == sorted(itertools.product("ab", range(turns)))
        assert [n for by, n in order if by == "a"] == list(range(turns))
        assert sum(1 for x, y in itertools.pairwise(order) if x[0] != y[0]) >= 1, (
            "the two hosts never took turns"
        )
        sim = Simulator()  # a third host verifies the whole transcript as one request
        assert [c for c in sim.verify(cm.compile(HEAD).request) if c.reason is not None] == []
    finally:
        store.close()


def test_a_held_agent_makes_another_host_wait_then_fail_naming_it_and_a_killed_holder_frees_it(
    shared: tuple[str, str],
) -> None:
    """A host stalled mid-round holds the agent: another host's turn waits its ``hold_timeout``,
    then raises ``AgentBusy`` naming the holder's label, host and pid, and stores nothing.
    SIGKILL the holder: the other host takes the agent at once, rolls the cut round back and
    goes on, with every request valid."""
    kind, where = shared
    store = opened(kind, where)
    sim = Simulator()
    try:
        ContextManager.open(store, namespace="ada")
        holder = start_host(kind, where, "a", "stall", 1)
        try:
            go(holder)
            assert holder.stdout is not None
            assert holder.stdout.readline() == "IN TOOL\n"
            waiting = Runtime(sim.client(), store, holder="host-b", hold_timeout=0.5)
            agent = waiting.register(
                Agent("ada", HEAD, tools={"probe": lambda _: "b"}, reasoning=False)
            )
            before = [m.id for m in agent.context.messages()]
            named = rf"agent 'ada' is held by 'host-a@{HOST}:{holder.pid}'"
            with pytest.raises(AgentBusy, match=named) as busy:
                asyncio.run(agent.run_turn("use probe: b waits"))
            assert busy.value.setting == "hold_timeout"
            assert "raise hold_timeout" in str(busy.value)
            assert [m.id for m in agent.context.messages()] == before  # nothing stored
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.communicate()

        freed = Runtime(sim.client(), store, holder="host-b", hold_timeout=10)
        agent = freed.register(Agent("ada", HEAD, tools={"probe": lambda _: "b"}, reasoning=False))

        async def take_over() -> None:
            assert await agent.resume_turn() is not None  # a's cut round, answered as an error
            await agent.run_turn("use probe: b goes on")

        asyncio.run(take_over())
        said = [m for m in agent.context.messages() if m.role != "system"]
        assert [m.role for m in said] == ["user", "assistant", "user", "assistant"] * 2
        assert texts(said[0]) == "use probe: a turn 0"
        cut = [b for b in said[2].content if isinstance(b, ToolResultBlock)]
        assert [b.is_error for b in cut] == [True]
        assert texts(said[4]) == "use probe: b goes on"
        assert len(sim.calls) == 3
        assert invalid_calls(sim) == []
    finally:
        store.close()


class Stall:
    """A ``probe`` tool that stays inside until ``let_go`` is set; ``inside`` once it entered."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.let_go = asyncio.Event()

    async def probe(self, _: dict[str, Any]) -> str:
        self.inside.set()
        await self.let_go.wait()
        return "a result"

    async def entered(self) -> None:
        while not self.inside.is_set():
            await asyncio.sleep(0.01)


def test_a_turn_holds_its_agent_from_another_runtime_in_the_same_process(store: Store) -> None:
    """Two runtimes on one store run the same agent: while one is mid-round the other waits,
    then raises ``AgentBusy`` naming it and stores nothing; another agent is not held; once
    the turn ends the waiting runtime runs its turn after it, and every request verifies."""
    sim = Simulator()
    stall = Stall()
    first = Runtime(sim.client(), store, holder="first")
    second = Runtime(sim.client(), store, holder="second", hold_timeout=0.3)
    ada = first.register(Agent("ada", HEAD, tools={"probe": stall.probe}, reasoning=False))
    ada_too = second.register(Agent("ada", HEAD, tools={"probe": lambda _: "b"}, reasoning=False))
    bob = second.register(Agent("bob", HEAD, reasoning=False))

    async def both() -> None:
        turn = asyncio.create_task(ada.run_turn("use probe: first"))
        await stall.entered()
        named = rf"agent 'ada' is held by 'first@{HOST}:{os.getpid()}' \(.*held \d+\.\d s\)"
        with pytest.raises(AgentBusy, match=named):
            await ada_too.run_turn("use probe: second")
        await bob.run_turn("bob is not held")
        stall.let_go.set()
        await turn
        await ada_too.run_turn("use probe: second, later")

    asyncio.run(both())
    said = [m for m in ada.context.messages() if m.role != "system"]
    triggers = [texts(m) for m in said if m.role == "user" and texts(m)]
    assert triggers == ["use probe: first", "use probe: second, later"]
    assert [m.role for m in said] == ["user", "assistant", "user", "assistant"] * 2
    assert invalid_calls(sim) == []


def test_a_notice_made_while_another_runtime_holds_the_agent_waits_for_the_next_boundary(
    store: Store,
) -> None:
    """``notify`` outside a turn while another runtime is mid-round on the agent stores
    nothing inside that round; the notice is stored at the notifying agent's next boundary."""
    sim = Simulator()
    stall = Stall()
    first = Runtime(sim.client(), store, holder="first")
    ada = first.register(Agent("ada", HEAD, tools={"probe": stall.probe}, reasoning=False))
    other = Runtime(sim.client(), store).register(Agent("ada", HEAD, reasoning=False))

    async def run() -> tuple[str, ...]:
        turn = asyncio.create_task(ada.run_turn("use probe: first"))
        await stall.entered()
        assert other.notify("the deploy finished") is None
        stall.let_go.set()
        await turn
        result = await other.run_turn("and now?")
        return result.notices

    notices = asyncio.run(run())
    stored = ada.context.messages()
    assert [(m.role, texts(m)) for m in stored if m.role == "system"] == [
        ("system", "the deploy finished")
    ]
    assert [stored[-1].id] == list(notices)
    roles = ["user", "assistant", "user", "assistant", "user", "assistant", "system"]
    assert [m.role for m in stored] == roles
    assert invalid_calls(sim) == []


def test_a_hold_is_no_transaction_writes_inside_commit_at_once_and_it_re_enters(
    store: Store,
) -> None:
    """Inside a hold, each write commits as it is made (a reader sees it while the hold is
    still taken), another agent is never held up, and holding again in the same task does not
    wait for itself."""
    cm = ContextManager.open(store, namespace="ada")
    seen: list[list[str]] = []

    def look() -> None:  # another thread: its own connection or transaction
        seen.append([texts(m) for m in cm.messages()])
        ContextManager.open(store, namespace="bob").add_message("user", "bob writes")

    with cm.hold(timeout=0.5) as hold:
        assert hold.namespace == "ada"
        cm.add_message("user", "written inside")
        with cm.hold(timeout=0.1):
            cm.add_message("user", "inside again")
        reader = threading.Thread(target=look)
        reader.start()
        reader.join(timeout=10)
    assert seen == [["written inside", "inside again"]]
    assert [texts(m) for m in ContextManager.open(store, namespace="bob").messages()] == [
        "bob writes"
    ]


def test_a_cancelled_waiter_leaves_no_hold_and_a_task_started_inside_a_hold_still_waits(
    store: Store,
) -> None:
    """A task started inside a hold (a follow-up turn a tool schedules, say) does not share it:
    it waits like any other, then fails naming the holder. A waiter cancelled while it waits
    leaves nothing held once the holder lets go."""
    cm = ContextManager.open(store, namespace="ada")

    async def enter(timeout: float) -> None:
        async with cm.hold(timeout=timeout):
            pass

    async def run() -> None:
        async with cm.hold(holder="first"):
            with pytest.raises(AgentBusy, match=rf"held by 'first@{HOST}:{os.getpid()}'"):
                await asyncio.create_task(enter(0.2))
            waiter = asyncio.create_task(enter(30))
            await asyncio.sleep(0.1)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        await enter(5)  # the cancelled waiter took the hold after all, and let it go

    asyncio.run(run())


def test_a_hold_timeout_below_zero_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="at least 0"):
        store.hold("ada", timeout=-1)


def test_a_hold_cut_by_a_server_restart_is_logged_and_later_holds_connect_afresh(
    private_postgres: Server,
) -> None:
    """A restart cuts a held agent's session: the turn's end logs ``agent_hold_lost``; the next
    hold (and one after a restart that killed the kept idle connection) works without reopening
    the store.

    On a server of its own: a restart of the shared one cuts every other worker's tests."""
    postgres_server = private_postgres
    store = PostgresStore(postgres_server.dsn)
    try:
        with capture_logs() as logs, store.hold("ada"):
            postgres_server.restart()
        assert [e["namespace"] for e in logs if e["event"] == "agent_hold_lost"] == ["ada"]
        with store.hold("ada", timeout=5):
            pass
        postgres_server.restart()  # the connection kept for the next hold dies idle
        with capture_logs() as logs, store.hold("ada", timeout=5) as hold:
            assert hold.namespace == "ada"
        assert [e for e in logs if e["event"] == "agent_hold_lost"] == []
    finally:
        store.close()


def test_an_ephemeral_run_on_sqlite_leaves_no_hold_file_behind(sqlite_path: Path) -> None:
    """An ephemeral run holds its one-off namespace in a file beside the database while it
    runs; the file goes with the namespace."""
    store = SQLiteStore(sqlite_path)
    runtime = Runtime(Simulator().client(), store)
    holds = Path(f"{sqlite_path}-holds")

    async def run() -> None:
        async with runtime.ephemeral(Agent("scout", HEAD, reasoning=False)) as scout:
            await scout.run_turn("look around")
            assert len(list(holds.iterdir())) == 1

    try:
        asyncio.run(run())
        assert list(holds.iterdir()) == []
    finally:
        store.close()


def test_a_store_without_hold_is_held_in_this_process_and_says_so_once() -> None:
    """A store that predates ``Store.hold`` still runs turns: the agent is held in this process
    (another holder waits, then gets ``AgentBusy`` naming the first), and one log event per store
    says the hold does not reach other processes."""
    store = StoreWithout("hold")  # written against the protocol before holds
    cm = ContextManager.open(store, namespace="ada")
    other = ContextManager.open(store, namespace="ada")
    refused: list[AgentBusy] = []

    def attempt() -> None:  # another thread: a hold re-enters in its own
        try:
            with other.hold(timeout=0.1):
                pass
        except AgentBusy as busy:
            refused.append(busy)

    with capture_logs() as logs:
        with cm.hold(timeout=0.1, holder="first"):
            cm.add_message("user", "written while held")
            waiter = threading.Thread(target=attempt)
            waiter.start()
            waiter.join(timeout=10)
        with other.hold(timeout=0.1):
            pass
    assert len(refused) == 1
    assert f"first@{HOST}" in str(refused[0])
    assert [texts(m) for m in cm.messages()] == ["written while held"]
    assert [e["event"] for e in logs if e["event"] == "store_without_hold"] == [
        "store_without_hold"
    ]
