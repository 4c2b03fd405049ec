"""Regressions of issue 35's store boundaries: each store failure names its real cause, at once,
with a ``ContextManagerError`` subclass, and nothing is written."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from context_manager import (
    ContextManager,
    ContextManagerError,
    DamagedDatabase,
    NotADatabase,
    PostgresStore,
    SQLiteStore,
    StoreBusy,
    StorePathError,
    StoreRefused,
)


def test_a_sqlite_store_in_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "no-such-folder" / "agent.db"
    with pytest.raises(StorePathError, match="no-such-folder does not exist; create it") as info:
        SQLiteStore(path)
    assert isinstance(info.value, OSError)
    assert not path.parent.exists()


def test_a_sqlite_store_on_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(StorePathError, match="is a folder, not a database file"):
        SQLiteStore(tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def written(sqlite_path: Path) -> bytes:
    """The bytes of a store holding 40 messages (checkpointed: the WAL is folded in)."""
    store = SQLiteStore(sqlite_path)
    cm = ContextManager.open(store, namespace="ada")
    for n in range(40):
        cm.add_message("user", f"message {n} " + "x" * 500)
    store.close()
    return sqlite_path.read_bytes()


@pytest.mark.parametrize("kept", [0.5, 60])
def test_a_truncated_sqlite_file_is_named_damaged_and_left_as_it_is(
    sqlite_path: Path, written: bytes, kept: float
) -> None:
    cut = written[: int(len(written) * kept)] if kept < 1 else written[: int(kept)]
    sqlite_path.write_bytes(cut)
    with pytest.raises(DamagedDatabase, match=r"the database file is damaged .*cut short") as info:
        SQLiteStore(sqlite_path)
    assert isinstance(info.value, NotADatabase)
    assert "not a context-manager database" not in str(info.value)
    assert sqlite_path.read_bytes() == cut


def test_an_empty_sqlite_file_with_another_programs_user_version_is_named_so(
    sqlite_path: Path,
) -> None:
    with contextlib.closing(sqlite3.connect(sqlite_path)) as db:
        db.execute("PRAGMA user_version = 3")
    before = sqlite_path.read_bytes()
    with pytest.raises(NotADatabase, match="it holds no tables, but its user_version is 3"):
        SQLiteStore(sqlite_path)
    assert sqlite_path.read_bytes() == before


@pytest.fixture
def other_writer(sqlite_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection on the store's file (as another process would have)."""
    SQLiteStore(sqlite_path).close()
    other = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def test_a_write_lock_held_past_the_busy_timeout_is_a_library_error_and_nothing_is_written(
    sqlite_path: Path, other_writer: sqlite3.Connection
) -> None:
    store = SQLiteStore(sqlite_path, busy_timeout=0.2)
    cm = ContextManager.open(store, namespace="ada")
    other_writer.execute("BEGIN IMMEDIATE")  # held for as long as the test likes
    started = time.monotonic()
    with pytest.raises(StoreBusy, match=r"write lock for longer than the 0\.2 s busy timeout"):
        cm.add_message("user", "hello")
    assert time.monotonic() - started < 5
    other_writer.execute("ROLLBACK")
    assert cm.messages() == []
    cm.add_message("user", "hello")  # the store stays usable
    assert len(cm.messages()) == 1
    store.close()


def test_store_busy_is_a_timeout_error_and_a_library_error() -> None:
    err = StoreBusy("agent.db", 30)
    assert isinstance(err, TimeoutError)
    assert isinstance(err, ContextManagerError)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"dbname": "no_such_database"}, 'database "no_such_database" does not exist'),
        ({"user": "no_such_role"}, 'role "no_such_role" does not exist'),
    ],
)
def test_a_postgres_refusal_fails_at_once_naming_the_servers_reason(
    postgres_dsn: str, change: dict[str, str], match: str
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreRefused, match=match) as info:
        PostgresStore(make_conninfo(postgres_dsn, **change), connect_timeout=10)
    assert time.monotonic() - started < 5
    assert isinstance(info.value, ConnectionError)
    assert "unavailable" not in str(info.value)


@pytest.mark.parametrize("dsn", ["host=localhost port", "postgresql://a b@localhost/db"])
def test_an_unparsable_postgres_connection_string_fails_at_once_naming_it(dsn: str) -> None:
    with pytest.raises(StoreRefused, match="the connection string cannot be read"):
        PostgresStore(dsn, connect_timeout=10)
