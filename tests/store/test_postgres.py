"""``PostgresStore`` beyond the shared suites: schema refusal, many hosts, kills and restarts.

Every test runs against a real PostgreSQL server (``tests/conftest.py``), each on a fresh schema.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import PROBE_HEAD, THINKING_HEAD, head_json
from postgres_server import Server
from psycopg.conninfo import make_conninfo

from context_manager import (
    AgentBusy,
    ContextManager,
    MessageMeta,
    NotADatabase,
    PostgresStore,
    SchemaTooNew,
    StoreUnavailable,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager._store._postgres_schema import (
    LOCK_CLASS,
    MIGRATION_LOCK,
    MIGRATIONS,
    SCHEMA_VERSION,
    open_versioned,
)
from context_manager.simulator import Simulator

HEAD = PROBE_HEAD


@pytest.fixture
def opened(postgres_dsn: str) -> Iterator[list[PostgresStore]]:
    """Stores a test opens, closed at teardown."""
    stores: list[PostgresStore] = []
    yield stores
    for made in stores:
        made.close()


def open_store(stores: list[PostgresStore], dsn: str, **kwargs: Any) -> PostgresStore:
    made = PostgresStore(dsn, **kwargs)
    stores.append(made)
    return made


def tables(dsn: str) -> dict[str, int]:
    """Every table in the DSN's current schema with its row count."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
        ]
        out = {}
        for name in names:
            row = conn.execute(f"SELECT count(*) FROM {name}".encode()).fetchone()
            assert row is not None
            out[name] = int(row[0])
        return out


def test_a_reopened_store_sees_the_same_messages_branches_and_current_branch(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """Nothing lives in the store object: a second store on the same schema sees everything."""
    cm = ContextManager.open(open_store(opened, postgres_dsn), namespace="ada")
    cm.add_message("user", "hello", metadata=MessageMeta(kind="note"))
    cm.fork("side")
    cm.add_message("user", "on the side")

    again = ContextManager.open(open_store(opened, postgres_dsn), namespace="ada")

    assert again.current_branch().name == "side"
    assert cm.messages() == again.messages()
    assert [m.id for m in cm.messages(kind="note")] == [m.id for m in again.messages(kind="note")]


def test_a_newer_schema_is_refused_and_nothing_is_written(postgres_dsn: str) -> None:
    """``SchemaTooNew`` names both versions; the schema is left exactly as it was."""
    PostgresStore(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE context_manager_meta SET value = '99' WHERE key = 'schema_version'")
    before = tables(postgres_dsn)

    with pytest.raises(SchemaTooNew, match=rf"schema version 99 is newer .*\({SCHEMA_VERSION}\)"):
        PostgresStore(postgres_dsn)

    assert before == tables(postgres_dsn)


def test_a_schema_holding_foreign_tables_is_refused_and_left_untouched(postgres_dsn: str) -> None:
    """Another application's tables: ``NotADatabase``, and no table of ours is created."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")

    with pytest.raises(NotADatabase, match="holds tables this library did not write"):
        PostgresStore(postgres_dsn)

    assert tables(postgres_dsn) == {"invoices": 0}


def test_a_meta_table_naming_another_application_is_refused(postgres_dsn: str) -> None:
    """A ``context_manager_meta`` without our marker is not ours either."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE context_manager_meta (key text PRIMARY KEY, value text)")
        conn.execute("INSERT INTO context_manager_meta VALUES ('application', 'other')")

    with pytest.raises(NotADatabase, match="names 'other'"):
        PostgresStore(postgres_dsn)


def test_migrations_run_forward_once_and_skip_what_another_host_ran(postgres_dsn: str) -> None:
    """A second migration runs on a schema at the first; re-opening runs nothing again."""
    extra = "CREATE TABLE later (x int)"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        open_versioned(conn, "test", migrations=MIGRATIONS)
        open_versioned(conn, "test", migrations=(*MIGRATIONS, extra))
        open_versioned(conn, "test", migrations=(*MIGRATIONS, extra))
        version = conn.execute(
            "SELECT value FROM context_manager_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert version == (str(SCHEMA_VERSION + 1),)
    assert tables(postgres_dsn)["later"] == 0


def test_many_hosts_opening_a_new_schema_at_once_all_succeed(postgres_dsn: str) -> None:
    """Concurrent first opens serialise on the migration lock; each store then works."""
    errors: list[BaseException] = []
    made: list[PostgresStore] = []

    def open_one() -> None:
        try:
            made.append(PostgresStore(postgres_dsn))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        ids = [
            ContextManager.open(s, namespace=f"a{i}").add_message("user", "hi")
            for i, s in enumerate(made)
        ]
        assert len(set(ids)) == len(made)
    finally:
        for store in made:
            store.close()


def test_opening_a_store_while_another_host_migrates_waits_for_the_migration_to_commit(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """The schema is read only when no migration is in flight, never half-committed.

    A catalog lookup can see a table another host just committed while the reading snapshot
    cannot see its rows; reading under the migration lock (shared) rules that out.
    """
    open_store(opened, postgres_dsn).close()
    errors: list[BaseException] = []
    with psycopg.connect(postgres_dsn, autocommit=True) as migrating:
        with migrating.transaction():
            migrating.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))

            def open_one() -> None:
                try:
                    opened.append(PostgresStore(postgres_dsn))
                except BaseException as err:  # reported below
                    errors.append(err)

            opener = threading.Thread(target=open_one)
            opener.start()
            deadline = time.monotonic() + 20
            waiting = False
            while not waiting and opener.is_alive() and time.monotonic() < deadline:
                row = migrating.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid = %s AND objid = %s AND NOT granted",
                    (LOCK_CLASS, MIGRATION_LOCK),
                ).fetchone()
                waiting = bool(row and row[0])
                time.sleep(0.01)
            assert waiting, "the opening host read the schema while a migration held the lock"
            assert opener.is_alive()
        opener.join(timeout=20)
    assert errors == []
    assert len(opened) == 2


def test_a_compile_on_one_host_sees_what_another_host_committed(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """Two stores (two hosts) on one agent: each compile includes the other's newest message."""
    a = ContextManager.open(open_store(opened, postgres_dsn), namespace="ada")
    b = ContextManager.open(open_store(opened, postgres_dsn), namespace="ada")
    a.add_message("user", "from a")
    assert [m["content"][0]["text"] for m in b.compile(HEAD).request["messages"]] == ["from a"]
    a.add_message("assistant", "reply from a")
    a.add_message("user", "again from a")
    b.edit_message(b.messages()[0].id, "from a, edited on b")

    sent = a.compile(HEAD).request["messages"]

    assert [m["content"][0]["text"] for m in sent] == [
        "from a, edited on b",
        "reply from a",
        "again from a",
    ]


def test_a_host_holding_the_agent_makes_another_wait_then_fail_naming_the_holder(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """A batch holds its agent; another host waits ``lock_timeout``, then ``AgentBusy``."""
    holder = open_store(opened, make_conninfo(postgres_dsn, application_name="host-a"))
    waiter = open_store(opened, postgres_dsn, lock_timeout=0.3)
    cm = ContextManager.open(holder, namespace="ada")
    key = cm.current_branch_key()

    with holder.batch():
        holder.append("ada", key, "user", [TextBlock("mine")], MessageMeta())
        started = time.monotonic()
        busy = r"agent 'ada' is held by pid \d+ \(application 'host-a'"
        with pytest.raises(AgentBusy, match=busy):
            waiter.append("ada", key, "user", [TextBlock("yours")], MessageMeta())
        assert time.monotonic() - started >= 0.3
        other = ContextManager.open(waiter, namespace="bob")  # another agent is not held
        other.add_message("user", "bob is free")

    waiter.append("ada", key, "user", [TextBlock("yours, later")], MessageMeta())
    assert [m.content[0].text for m in cm.messages()] == ["mine", "yours, later"]  # type: ignore[union-attr]


def test_a_waiting_host_goes_on_once_the_holder_commits(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """Within the timeout, a second host's write waits for the round and lands after it."""
    holder = open_store(opened, postgres_dsn)
    waiter = open_store(opened, postgres_dsn, lock_timeout=10)
    cm = ContextManager.open(holder, namespace="ada")
    key = cm.current_branch_key()
    done: list[int] = []

    def write_later() -> None:
        done.append(waiter.append("ada", key, "user", [TextBlock("b")], MessageMeta()).sequence)

    with holder.batch():
        first = holder.append("ada", key, "assistant", [TextBlock("a1")], MessageMeta())
        thread = threading.Thread(target=write_later)
        thread.start()
        time.sleep(0.3)
        second = holder.append("ada", key, "user", [TextBlock("a2")], MessageMeta())
        assert done == []
    thread.join()

    assert first.sequence < second.sequence < done[0]
    assert [m.content[0].text for m in cm.messages()] == ["a1", "a2", "b"]  # type: ignore[union-attr]


def test_a_failed_write_inside_a_batch_is_undone_alone(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """A refused write in a batch rolls back by itself; the rest of the batch commits."""
    store = open_store(opened, postgres_dsn)
    cm = ContextManager.open(store, namespace="ada")
    with store.batch():
        cm.add_message("user", "kept")
        with pytest.raises(Exception, match="already exists"):
            cm.fork("main")
        cm.add_message("user", "kept too")
    assert [m.content[0].text for m in cm.messages()] == ["kept", "kept too"]  # type: ignore[union-attr]


def test_a_connection_dropped_mid_write_is_a_clear_error_and_the_next_call_works(
    private_postgres: Server, opened: list[PostgresStore]
) -> None:
    """The server restarts in a batch: ``StoreUnavailable``, nothing of it kept, store usable.

    On a server of its own: a restart of the shared one would cut every other test's calls."""
    postgres_server = private_postgres
    store = open_store(opened, postgres_server.dsn)
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "before")

    def round_cut_by_a_restart() -> None:
        with store.batch():
            cm.add_message("user", "in flight")
            postgres_server.restart()
            cm.add_message("user", "after the drop")

    with pytest.raises(StoreUnavailable, match="nothing of this call was written"):
        round_cut_by_a_restart()

    cm.add_message("user", "after the restart")  # the same store, no reopening
    assert [m.content[0].text for m in cm.messages()] == ["before", "after the restart"]  # type: ignore[union-attr]


def test_the_first_call_after_a_server_restart_works(
    private_postgres: Server, opened: list[PostgresStore]
) -> None:
    """Idle pooled connections die in a restart; each is checked as it is handed out, so the
    first call after the server is back gets a live one (issue 35)."""
    store = open_store(opened, private_postgres.dsn, max_connections=3)
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "before")
    private_postgres.restart()
    cm.add_message("user", "once more")  # no StoreUnavailable
    assert [m.content[0].text for m in cm.messages()] == ["before", "once more"]  # type: ignore[union-attr]


ROUND_WRITER = textwrap.dedent(
    """
    import asyncio, json, sys
    from context_manager import ContextManager, Head, PostgresStore, ToolResultBlock, ToolUseBlock
    from context_manager.simulator import Simulator
    from helpers import invalid_calls

    dsn, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    head = Head(**json.loads(sys.argv[4]))
    calls = {"n": 0}

    def script(request):
        calls["n"] += 1
        thinking = {"type": "thinking", "thinking": f"{name} thinks {calls['n']}"}
        return [thinking, {"type": "tool_use", "name": "probe", "input": {"by": name}}]

    async def main():
        store = PostgresStore(dsn, lock_timeout=30)
        sim = Simulator(script=script)
        client = sim.client()
        cm = ContextManager.open(store, namespace="ada")
        for n in range(rounds):
            with store.batch():  # the round: compile, reply, tool results
                result = cm.compile(head)
                message = await client.beta.messages.create(**result.request)
                reply = cm.record_reply(message, result)
                uses = [b for b in cm.get_message(reply).content if isinstance(b, ToolUseBlock)]
                results = cm.add_message("user", [
                    ToolResultBlock(u.id, f"{name} result {n}") for u in uses
                ])
            print("ROUND", reply, results, flush=True)
        print("VERIFIED", len(sim.calls), json.dumps(invalid_calls(sim)), flush=True)
        await client.close()
        store.close()

    asyncio.run(main())
    """
)


def test_two_processes_writing_rounds_to_one_agent_never_interleave_them(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """Two hosts, one agent: rounds alternate across processes, each whole, and every request
    either host compiled (including the other's rounds) verifies against the simulator."""
    store = open_store(opened, postgres_dsn)
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "both of you: look around")
    rounds = 12
    head = head_json(HEAD)
    here = Path(__file__).resolve().parents[1]  # tests/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parent), str(here)])}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", ROUND_WRITER, postgres_dsn, name, str(rounds), head],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("a", "b")
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err
    for out, _ in outputs:
        verified = [line.split(maxsplit=2) for line in out.splitlines() if line.startswith("V")]
        assert [["VERIFIED", str(rounds), "[]"]] == verified

    stored = cm.messages()
    assert stored[0].content == (TextBlock("both of you: look around"),)
    pairs = [stored[i : i + 2] for i in range(1, len(stored), 2)]
    assert len(pairs) == 2 * rounds
    writers = []
    for reply, results in pairs:
        uses = [b for b in reply.content if isinstance(b, ToolUseBlock)]
        answers = [b for b in results.content if isinstance(b, ToolResultBlock)]
        assert (reply.role, results.role) == ("assistant", "user")
        assert [u.id for u in uses] == [r.tool_use_id for r in answers]
        writers.append(uses[0].input["by"])
        assert all(str(r.content).startswith(f"{writers[-1]} result") for r in answers)
    assert sorted(writers) == ["a"] * rounds + ["b"] * rounds
    switches = sum(1 for x, y in itertools.pairwise(writers) if x != y)
    assert switches >= 1, "the two processes never took turns"
    sequences = [m.sequence for m in stored]
    assert sequences == sorted(set(sequences))

    sim = Simulator()  # a fresh host verifies the whole transcript as one request
    request = cm.compile(HEAD).request
    assert [c for c in sim.verify(request) if c.reason is not None] == []


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from context_manager import ContextManager, PostgresStore

    store = PostgresStore(sys.argv[1])
    cm = ContextManager.open(store, namespace="ada")
    for n in range(int(sys.argv[2])):
        with store.batch():
            first = cm.add_message("assistant", f"reply {n}")
            second = cm.add_message("user", f"results {n}")
        print("COMMITTED", first, second, flush=True)
    with store.batch():
        print("OPEN", cm.add_message("assistant", "never committed"), flush=True)
        time.sleep(60)
    """
)


def test_a_writer_killed_mid_transaction_loses_nothing_committed_and_frees_the_agent(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """SIGKILL while a batch is open: every committed round is whole, the open one is gone,
    and another host can write to the agent at once."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, postgres_dsn, "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as child:
        assert child.stdout is not None
        committed: list[str] = []
        for line in child.stdout:
            word, *ids = line.split()
            if word == "OPEN":
                in_flight = ids[0]
                break
            committed.extend(ids)
        else:
            pytest.fail(child.stderr.read() if child.stderr else "the writer died")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    other = open_store(opened, postgres_dsn, lock_timeout=5)
    cm = ContextManager.open(other, namespace="ada")
    cm.add_message("user", "the agent is free again")
    stored = [m.id for m in cm.messages()]
    assert [*committed, stored[-1]] == stored
    assert in_flight not in stored
    assert len(committed) == 40


def test_the_kind_index_serves_notice_reads(postgres_dsn: str, opened: list[PostgresStore]) -> None:
    """The partial index the compiler's reads rely on exists and is chosen for a kind read."""
    store = open_store(opened, postgres_dsn)
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "a note", metadata=MessageMeta(kind="note"))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN SELECT id FROM messages WHERE ns = 'ada' AND branch = 'x' "
                "AND kind = 'note' ORDER BY seq DESC LIMIT 1"
            ).fetchall()
        )
        indexes = {
            r[0]: r[1]
            for r in conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
            ).fetchall()
        }
    assert "messages_by_kind" in plan
    assert "WHERE (kind IS NOT NULL)" in indexes["messages_by_kind"]


def test_an_unreachable_server_is_a_clear_error() -> None:
    """Nothing listening: ``StoreUnavailable`` naming the server, without its password."""
    with pytest.raises(StoreUnavailable, match=r"postgresql://cm@127\.0\.0\.1:1/x: .*unavailable"):
        PostgresStore("postgresql://cm:secret@127.0.0.1:1/x", connect_timeout=0.5)


def test_the_store_serves_a_runtime_over_asyncio(
    postgres_dsn: str, opened: list[PostgresStore]
) -> None:
    """A whole turn through the runtime on PostgreSQL, and the next request verifies."""
    from context_manager.runtime import Agent, Runtime

    sim = Simulator(script=lambda request: [{"type": "thinking", "thinking": "t"}, "done"])
    runtime = Runtime(sim.client(), open_store(opened, postgres_dsn))
    agent = runtime.register(Agent("ada", HEAD, reasoning=False))

    async def turns() -> None:
        await agent.run_turn("one")
        await agent.run_turn("two")

    asyncio.run(turns())
    assert [c.status for c in sim.calls] == [200, 200]
    last = sim.calls[-1]
    checks = sim.verify({**last.request, "betas": list(last.betas)})
    assert [c for c in checks if c.reason is not None] == []


def test_the_command_line_runs_and_reads_an_agent_on_postgresql(postgres_dsn: str) -> None:
    """``run --db postgresql://...`` then ``transcript postgresql://...``, as with a file."""
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {"NO_COLOR": "1"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "context_manager", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    empty = cli("transcript", postgres_dsn)
    assert (empty.returncode, empty.stdout) == (2, "")
    assert "holds no agents yet (an empty database; `context-manager run" in empty.stderr

    first = cli("run", "--db", postgres_dsn, "--agent", "ada", stdin="hello there\n/quit\n")
    assert first.returncode == 0, first.stderr
    assert "Agent 'ada' on branch 'main' in postgresql://cm@" in first.stdout
    assert "password" not in first.stdout

    read = cli("transcript", postgres_dsn, "--json")
    assert read.returncode == 0, read.stderr
    texts = [json.loads(line)["text"] for line in read.stdout.splitlines()]
    assert texts == ["hello there", "You said: hello there"]


@pytest.fixture
def traced(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[PostgresStore, Callable[[], int]]]:
    """A store whose pooled connections write libpq's own trace of the wire, and the count of
    the client's ``Sync`` messages in it so far (one per round trip; the pool's check of a
    connection it lends sends none)."""
    import psycopg_pool

    path = tmp_path / "wire.txt"
    trace = path.open("w")
    pool = psycopg_pool.ConnectionPool(
        postgres_dsn, configure=lambda conn: conn.pgconn.trace(trace.fileno()), open=True
    )

    def syncs() -> int:
        trace.flush()
        return path.read_text().count("\tSync")

    store = PostgresStore(pool)
    try:
        yield store, syncs
    finally:
        store.close()
        pool.close()
        trace.close()


def test_a_reply_is_recorded_in_one_round_trip_and_a_compile_in_one(
    traced: tuple[PostgresStore, Callable[[], int]],
) -> None:
    """Issue 36: a tool loop on PostgreSQL costs one round trip for the compile and one for the
    reply's record (each after the pool's check of the connection it lends), counted as the
    client's ``Sync`` messages in libpq's own trace of the wire."""
    store, syncs = traced
    client = Simulator().sync_client()
    cm = ContextManager.open(store, namespace="ada")
    for text in ("Hello.", "And then?"):
        cm.add_message("user", text)
        result = cm.compile(THINKING_HEAD)
        cm.record_reply(client.beta.messages.create(**result.request), result)
    cm.add_message("user", "Once more?")
    before = syncs()
    result = cm.compile(THINKING_HEAD)
    compiled = syncs()
    reply = client.beta.messages.create(**result.request)
    replied = syncs()
    cm.record_reply(reply, result)
    recorded = syncs()

    assert (compiled - before, recorded - replied) == (1, 1)


def test_a_branchs_binding_record_is_read_in_one_round_trip(
    traced: tuple[PostgresStore, Callable[[], int]],
) -> None:
    """A woken or restarted agent's first compile reads its branch's binding record (state,
    releases, left-out set, anchored head): its four reads go out pipelined, one ``Sync``."""
    store, syncs = traced
    client = Simulator().sync_client()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "Hello.")
    result = cm.compile(THINKING_HEAD)
    reply = cm.record_reply(client.beta.messages.create(**result.request), result)
    cm.release_thinking(reply)
    key = cm.current_branch_key()
    before = syncs()
    record = store.binding_record("ada", key)
    read = syncs()

    assert record.first_compiled
    assert reply in record.releases
    assert record.anchored_head is not None
    assert read - before == 1
