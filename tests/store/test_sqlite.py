"""``SQLiteStore`` on disk: reopening, refusing foreign files, WAL, and surviving SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import context_manager
from context_manager import (
    ContextManager,
    NotADatabase,
    SchemaTooNew,
    SQLiteStore,
    StorePathError,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from context_manager._store._sqlite import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION


def snapshot(cm: ContextManager) -> dict[str, Any]:
    """Everything a user can read about one agent."""
    return {
        "current": cm.current_branch(),
        "head": cm.branch_head(),
        "branches": cm.list_branches(),
        "messages": {ref.name: cm.messages(ref.name) for ref in cm.list_branches()},
    }


def raw(path: Path, sql: str) -> Any:
    """One value read with a plain ``sqlite3`` connection (no library code involved)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchone()[0]


def test_a_reopened_store_sees_the_same_branches_messages_metadata_and_current_branch(
    sqlite_path: Path,
) -> None:
    """A second ``SQLiteStore`` on the file reads exactly what the first one wrote."""
    first = SQLiteStore(sqlite_path)
    ada = ContextManager.open(first, namespace="ada")
    bob = ContextManager.open(first, namespace="bob")
    notice = {"system_notice": True, "kind": "reasoning-loss", "target": "ada", "extra": {"n": [1]}}
    ada.add_message("user", "hello", metadata=notice)
    cited = {"citations": [{"type": "char_location", "document_title": None, "cited_text": "c"}]}
    reply = ada.add_message(
        "assistant",
        [ThinkingBlock("", "sig-1"), TextBlock("hi", extra=cited), ToolUseBlock("t1", "f", {})],
    )
    ada.fork("doomed")
    ada.switch_branch("main")
    ada.delete_branch("doomed")
    ada.fork("side")
    ada.add_message("user", "on side")
    ada.edit_message(reply, [ThinkingBlock("", "sig-1"), TextBlock("hi, edited")])
    bob.add_message("user", "bob's", metadata={"kind": "note"})
    bob.fork("bob-side")
    before: dict[str, Any] = {
        "ada": snapshot(ada),
        "bob": snapshot(bob),
        "namespaces": first.namespaces(),
    }
    first.close()

    second = SQLiteStore(sqlite_path)
    after: dict[str, Any] = {
        "ada": snapshot(ContextManager.open(second, namespace="ada")),
        "bob": snapshot(ContextManager.open(second, namespace="bob")),
        "namespaces": second.namespaces(),
    }
    second.close()

    assert before == after
    assert after["ada"]["current"].name == "side"
    assert [ref.name for ref in after["ada"]["branches"]] == ["main", "side"]


def test_two_open_stores_on_one_file_share_one_sequence(sqlite_path: Path) -> None:
    """Two connections to one file interleave writes with unique, increasing sequences."""
    one, two = SQLiteStore(sqlite_path), SQLiteStore(sqlite_path)
    a = ContextManager.open(one, namespace="ada")
    b = ContextManager.open(two, namespace="ada")
    for i in range(3):
        a.add_message("user", f"a{i}")
        b.add_message("user", f"b{i}")

    seen = [m.sequence for m in a.messages()]
    expected = ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert expected == [m.content[0].text for m in b.messages()]  # type: ignore[union-attr]
    assert sorted(set(seen)) == seen
    one.close()
    two.close()


def test_many_stores_opening_a_new_file_at_once_all_succeed(sqlite_path: Path) -> None:
    """Concurrent first opens of one file migrate it once; none fails on a half-made schema."""
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []
    stores: list[SQLiteStore] = []

    def open_one() -> None:
        barrier.wait()
        try:
            stores.append(SQLiteStore(sqlite_path))
        except BaseException as err:  # collected and reported below
            errors.append(err)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for made in stores:
        made.close()

    assert errors == []
    assert raw(sqlite_path, "PRAGMA user_version") == SCHEMA_VERSION


def test_a_file_that_is_not_a_database_is_refused_with_one_line_and_left_untouched(
    sqlite_path: Path,
) -> None:
    """Opening a text file raises ``NotADatabase`` with a one-line message; no byte changes."""
    original = b"this is a text file, not a SQLite database\n" * 200
    sqlite_path.write_bytes(original)

    with pytest.raises(
        NotADatabase, match=r"agent\.db: not a context-manager database \(file is not a database\)"
    ) as info:
        SQLiteStore(sqlite_path)

    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    assert original == sqlite_path.read_bytes()
    assert sorted(p.name for p in sqlite_path.parent.iterdir()) == ["agent.db"]


def test_a_directory_is_named_as_a_folder(tmp_path: Path) -> None:
    """A folder is not a database file, and the error says so (issue 35)."""
    with pytest.raises(StorePathError, match="is a folder, not a database file") as info:
        SQLiteStore(tmp_path)
    assert isinstance(info.value, OSError)


def test_a_sqlite_file_with_foreign_tables_is_refused_and_left_untouched(
    sqlite_path: Path,
) -> None:
    """Someone else's SQLite database is not ours: ``NotADatabase``, and it is not modified."""
    with contextlib.closing(sqlite3.connect(sqlite_path)) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('ada')")
        db.commit()
    original = sqlite_path.read_bytes()

    with pytest.raises(NotADatabase, match="it holds tables this library did not write"):
        SQLiteStore(sqlite_path)

    assert original == sqlite_path.read_bytes()
    assert raw(sqlite_path, "SELECT name FROM users") == "ada"


def test_a_newer_schema_is_refused_and_the_file_is_left_untouched(sqlite_path: Path) -> None:
    """A file from a newer version raises ``SchemaTooNew`` naming both versions; writes nothing."""
    store = SQLiteStore(sqlite_path)
    ContextManager.open(store).add_message("user", "from the future")
    store.close()
    with contextlib.closing(sqlite3.connect(sqlite_path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    original = sqlite_path.read_bytes()

    with pytest.raises(
        SchemaTooNew,
        match=(
            rf"agent\.db: schema version {SCHEMA_VERSION + 1} is newer than this library knows "
            rf"\({SCHEMA_VERSION}\); upgrade context-manager to open it"
        ),
    ) as info:
        SQLiteStore(sqlite_path)

    assert (info.value.found, info.value.known) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)
    assert original == sqlite_path.read_bytes()
    assert raw(sqlite_path, "PRAGMA user_version") == SCHEMA_VERSION + 1


def test_a_file_at_the_first_schema_version_is_migrated_forward(sqlite_path: Path) -> None:
    """A file written at schema 1 opens, is migrated to the current version and works."""
    with contextlib.closing(sqlite3.connect(sqlite_path, isolation_level=None)) as db:
        for statement in MIGRATIONS[0].split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    store = SQLiteStore(sqlite_path)
    cm = ContextManager.open(store)
    message_id = cm.add_message("user", "after migration")
    store.close()

    assert raw(sqlite_path, "PRAGMA user_version") == SCHEMA_VERSION
    reopened = SQLiteStore(sqlite_path)
    assert ContextManager.open(reopened).get_message(message_id).content == (
        TextBlock("after migration"),
    )
    reopened.close()


def test_an_empty_file_becomes_a_new_store(sqlite_path: Path) -> None:
    """A zero-byte file (say, from ``touch``) is initialised like a new one."""
    sqlite_path.touch()
    store = SQLiteStore(sqlite_path)
    message_id = ContextManager.open(store).add_message("user", "first")
    assert ContextManager.open(store).get_message(message_id).role == "user"
    store.close()


def test_the_journal_is_write_ahead(sqlite_path: Path) -> None:
    """The store runs in WAL mode, visible to any other connection."""
    store = SQLiteStore(sqlite_path)
    assert raw(sqlite_path, "PRAGMA journal_mode") == "wal"
    assert raw(sqlite_path, "PRAGMA application_id") == APPLICATION_ID
    store.close()


def test_an_in_memory_sqlite_store_works() -> None:
    """``SQLiteStore(":memory:")`` is a working, throwaway store."""
    store = SQLiteStore(":memory:")
    cm = ContextManager.open(store)
    cm.add_message("user", "ephemeral")
    assert [m.content for m in cm.messages()] == [(TextBlock("ephemeral"),)]
    store.close()


# Crash safety: a child process appends in a loop; the parent kills it with SIGKILL.

CHILD = textwrap.dedent(
    """
    import sys
    from context_manager import ContextManager, SQLiteStore

    store = SQLiteStore(sys.argv[1])
    cm = ContextManager.open(store, namespace="crash")
    start = int(sys.argv[2])
    for i in range(start, start + 1_000_000):
        content = [
            {"type": "text", "text": f"message {i} " + "x" * (i % 500)},
            {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {"i": i}},
        ]
        message_id = cm.add_message("assistant", content, metadata={"extra": {"i": i}})
        print(message_id, i, flush=True)
    """
)

KILL_AFTER_LINES = [0, 1, 4, 25, 9, 60, 2]
"""How many returned appends the parent waits for before each SIGKILL (0: during start-up)."""


def expected_content(i: int) -> tuple[TextBlock | ToolUseBlock, ...]:
    return (TextBlock(f"message {i} " + "x" * (i % 500)), ToolUseBlock(f"t{i}", "f", {"i": i}))


def run_and_kill(path: Path, start: int, lines: int) -> dict[str, int]:
    """Start the writer, wait for ``lines`` returned appends, SIGKILL it; return what it printed."""
    source_root = str(Path(context_manager.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": source_root}
    returned: dict[str, int] = {}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as child:
        watchdog = threading.Timer(30.0, child.kill)
        watchdog.start()
        try:
            assert child.stdout is not None
            assert child.stderr is not None
            if lines == 0:
                time.sleep(0.2)  # somewhere in start-up: imports, open, migration or first append
            for _ in range(lines):
                line = child.stdout.readline()
                if not line:
                    pytest.fail(f"writer died on its own: {child.stderr.read()}")
                message_id, i = line.split()
                returned[message_id] = int(i)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            for line in child.stdout.read().splitlines():  # printed before the kill landed
                message_id, i = line.split()
                returned[message_id] = int(i)
        finally:
            watchdog.cancel()
    assert child.returncode == -signal.SIGKILL
    return returned


def test_a_writer_killed_with_sigkill_loses_no_returned_append_and_tears_no_message(
    sqlite_path: Path,
) -> None:
    """After each of several SIGKILLs, every append that returned is stored whole, none torn."""
    returned: dict[str, int] = {}
    for run, lines in enumerate(KILL_AFTER_LINES):
        returned.update(run_and_kill(sqlite_path, run * 1_000_000, lines))

        store = SQLiteStore(sqlite_path)  # recovery happens here, on reopen
        cm = ContextManager.open(store, namespace="crash")
        stored = {m.id: m for m in cm.messages()}  # parses every row on the branch
        store.close()

        missing = sorted(set(returned) - set(stored))
        assert missing == []
        for message_id, i in returned.items():
            assert (i, expected_content(i)) == (
                stored[message_id].metadata.extra["i"],
                stored[message_id].content,
            )
        unreported = set(stored) - set(returned)
        assert len(unreported) <= run + 1  # at most the one in flight at each kill
        for message_id in unreported:
            i = stored[message_id].metadata.extra["i"]
            assert expected_content(i) == stored[message_id].content

    assert raw(sqlite_path, "PRAGMA integrity_check") == "ok"
    with contextlib.closing(sqlite3.connect(sqlite_path)) as db:
        for row in db.execute("SELECT content, meta FROM messages"):
            assert isinstance(json.loads(row[0]), list)
            assert isinstance(json.loads(row[1]), dict)
    assert sum(KILL_AFTER_LINES) <= len(returned)


def test_a_window_read_at_once_holds_the_same_messages_as_each_read_alone(
    sqlite_path: Path,
) -> None:
    store = SQLiteStore(sqlite_path)
    cm = ContextManager.open(store, namespace="ada")
    contents: list[Any] = [
        "plain",
        [{"type": "text", "text": 'quotes " and \\ and ]}, and \u2028 and é'}],
        [
            {"type": "tool_use", "id": "toolu_1", "name": "read_log", "input": {"q": [1, 2.5]}},
            {"type": "text", "text": "[1],[2]"},
        ],
        [{"type": "thinking", "thinking": "", "signature": "sig"}, {"type": "x", "y": None}],
    ]
    ids = [cm.add_message("user" if n % 2 == 0 else "assistant", c) for n, c in enumerate(contents)]
    together = cm.store.read("ada", cm.lineage())
    assert [m.id for m in together] == ids
    assert together == [cm.store.get("ada", mid) for mid in ids]
    store.close()
