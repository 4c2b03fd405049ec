"""``SQLiteStore``: the embedded, durable default store.

WAL journal with ``synchronous=FULL``: a write that returned survives a crash. Each public write
is one ``BEGIN IMMEDIATE`` transaction, so a message, its stamp and its signature index are there
together or not at all. The schema carries a version; migrations run forward only, and a file
written by a newer version is refused before anything is written. One connection per store,
serialised by a lock, so many agents (tasks or threads) can share one store.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from context_manager._model._checks import check_branch_name
from context_manager._model._content import Block
from context_manager._model._errors import BranchNotFound, MessageNotFound
from context_manager._model._messages import (
    MessageId,
    MessageMeta,
    Role,
    StoredMessage,
    decode_message,
    encode_message,
)
from context_manager._model._stamps import AnyStamp

from ._hold import (
    HOLD_TIMEOUT_SECONDS,
    FileHold,
    Hold,
    LocalHolds,
    discard_hold_file,
    file_holds_work,
    holder_identity,
)
from ._protocol import (
    BranchRecord,
    Lineage,
)
from ._read import check_limit, select_window
from ._rows import branch_from_row, message_from_row, messages_from_rows
from ._sql import MESSAGE_COLUMNS, segment_queries
from ._sql_branch import insert_branch
from ._sqlite_binding import SQLiteBindingRecords
from ._sqlite_file import (
    BUSY_TIMEOUT_SECONDS,
    busy_guard,
    connect,
    open_versioned,
    transaction,
)
from ._sqlite_schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, SQL_VARIABLES_PER_QUERY
from ._stamp_rows import StampRows
from ._statements import SQLITE, message_row

__all__ = ["APPLICATION_ID", "MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore"]


class SQLiteStore(SQLiteBindingRecords):
    """A durable ``Store`` in one SQLite file (``":memory:"`` works too, for experiments)."""

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout: float = BUSY_TIMEOUT_SECONDS
    ) -> None:
        """Open (or create) the store in ``path``.

        ``busy_timeout``: seconds a write waits while another connection or process holds the
        file's write lock, before ``StoreBusy``.

        Raises:
            StorePathError: ``path`` is a folder, or its folder does not exist.
            NotADatabase: the file is not a context-manager database (``DamagedDatabase``:
                one cut short or corrupted).
            SchemaTooNew: written by a newer version of this library; nothing was written.
            StoreBusy: another connection held the write lock while the schema was set up.
        """
        self.path = os.fspath(path)
        self._lock = threading.RLock()
        self._holds = LocalHolds()
        self._stamp_rows = StampRows()
        self._db = connect(self.path, busy_timeout)
        try:
            open_versioned(
                self._db,
                self.path,
                application_id=APPLICATION_ID,
                migrations=MIGRATIONS,
                pragmas=("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"),
                foreign="it holds tables this library did not write",
            )
        except BaseException:
            self._db.close()
            raise

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db, self._lock, self.path)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group many writes into one durable commit (imports, bulk loads).

        Each write inside stays all-or-nothing; the batch commits when the block ends, or rolls
        back whole if it raises. Other threads wait for the batch to finish.
        """
        with self._lock:
            with busy_guard(self.path, self._db):
                self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def hold(
        self, namespace: str, *, timeout: float | None = None, holder: str | None = None
    ) -> Hold:
        """Hold ``namespace`` (the agent) for a whole turn: ``with`` or ``async with``.

        An exclusive ``flock`` on a file in ``PATH-holds/`` beside the database (one per agent),
        shared by every process on the machine; no SQLite transaction or write lock is held, so
        writes inside commit one by one and other agents are never held up. Entering waits up
        to ``timeout`` seconds (default 30) for another holder, then raises ``AgentBusy`` naming
        it (``holder@HOST:PID`` and how long it has held). The kernel frees the lock when the
        holder's process ends, however it ends. ``":memory:"`` (or a platform without
        ``flock``) holds within this process only.
        """
        wait = HOLD_TIMEOUT_SECONDS if timeout is None else timeout
        identity = holder_identity(holder)
        if self.path == ":memory:" or not file_holds_work():
            return self._holds.hold(self, namespace, wait, identity)
        return FileHold(self, os.path.realpath(self.path), namespace, wait, identity)

    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _next(self, db: sqlite3.Connection) -> int:
        return int(db.execute("UPDATE counter SET value = value + 1 RETURNING value").fetchone()[0])

    # namespaces
    def namespaces(self) -> list[str]:
        rows = self._query("SELECT DISTINCT ns FROM branches ORDER BY ns")
        return [r[0] for r in rows]

    def drop_namespace(self, namespace: str) -> None:
        with self._transaction() as db:
            for table in ("namespaces",):
                db.execute(f"DELETE FROM {table} WHERE name = ?", (namespace,))
            for table in (
                "branches",
                "messages",
                "revisions",
                "changes",
                "signatures",
                "branch_state",
                "releases",
                "left_out",
                "anchored_heads",
                "release_history",
                "binding_serials",
                "renders",
            ):
                db.execute(f"DELETE FROM {table} WHERE ns = ?", (namespace,))
        if self.path != ":memory:":
            discard_hold_file(os.path.realpath(self.path), namespace)

    # branches
    def create_branch(
        self,
        namespace: str,
        name: str,
        *,
        parent: str | None = None,
        fork_sequence: int | None = None,
    ) -> BranchRecord:
        check_branch_name(name)
        with self._transaction() as db:
            made = functools.partial(self._next, db)
            return insert_branch(db, SQLITE, made, namespace, name, parent, fork_sequence)

    def delete_branch(self, namespace: str, name: str) -> BranchRecord:
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, name, created, parent, fork_sequence FROM branches "
                "WHERE ns = ? AND name = ? AND deleted = 0",
                (namespace, name),
            ).fetchone()
            if row is None:
                raise BranchNotFound(name, [b.ref.name for b in self.branches(namespace)])
            db.execute("UPDATE branches SET deleted = 1 WHERE id = ?", (row[0],))
            gone = branch_from_row(row, deleted=True)
            db.execute(  # derived data: a deleted branch is never rendered again
                "DELETE FROM renders WHERE ns = ? AND branch = ?", (namespace, gone.key)
            )
            return gone

    def branches(self, namespace: str) -> list[BranchRecord]:
        rows = self._query(
            "SELECT id, name, created, parent, fork_sequence FROM branches "
            "WHERE ns = ? AND deleted = 0 ORDER BY created",
            (namespace,),
        )
        return [branch_from_row(r) for r in rows]

    def branch_by_key(self, namespace: str, key: str) -> BranchRecord:
        branch_id, _, created = key.partition("@")
        rows = self._query(
            "SELECT id, name, created, parent, fork_sequence, deleted FROM branches "
            "WHERE ns = ? AND id = ?",
            (namespace, branch_id),
        )
        if not rows or str(rows[0][2]) != created:
            raise BranchNotFound(key, [b.ref.name for b in self.branches(namespace)])
        return branch_from_row(rows[0][:5], deleted=bool(rows[0][5]))

    def current_branch_name(self, namespace: str) -> str | None:
        rows = self._query("SELECT current_branch FROM namespaces WHERE name = ?", (namespace,))
        return rows[0][0] if rows else None

    def set_current_branch(self, namespace: str, name: str) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO namespaces (name, current_branch) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET current_branch = excluded.current_branch",
                (namespace, name),
            )

    # messages
    def append(
        self,
        namespace: str,
        branch: str,
        role: Role,
        content: Sequence[Block],
        metadata: MessageMeta,
        *,
        stamp: AnyStamp | None = None,
        signatures: Sequence[str] = (),
    ) -> StoredMessage:
        wire, meta = encode_message(content, metadata)
        stored_content, stored_meta = decode_message(wire, meta)
        created_at = dt.datetime.now(dt.UTC)
        with self._transaction() as db:
            at = {"ns": namespace, "id": branch.partition("@")[0]}
            if not db.execute(SQLITE.branch_id_exists, at).fetchone():
                raise BranchNotFound(branch, [b.ref.name for b in self.branches(namespace)])
            sequence = self._next(db)
            row = message_row(
                namespace,
                branch,
                sequence,
                role,
                (wire, meta),
                metadata.kind,
                created_at.isoformat(),
                stamp,
            )
            message_id = row["id"]
            db.execute(SQLITE.message_insert, row)
            db.executemany(
                SQLITE.signature_insert,
                [{"ns": namespace, "sig": sig, "message_id": message_id} for sig in signatures],
            )
        return StoredMessage(
            id=message_id,
            sequence=sequence,
            branch=branch,
            role=role,
            content=stored_content,
            metadata=stored_meta,
            created_at=created_at,
        )

    def get(self, namespace: str, message_id: MessageId) -> StoredMessage:
        rows = self._query(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE ns = ? AND id = ?",
            (namespace, message_id),
        )
        if not rows:
            raise MessageNotFound(message_id, namespace)
        return _message(rows[0])

    def read(
        self,
        namespace: str,
        lineage: Lineage,
        *,
        after: int | None = None,
        upto: int | None = None,
        kind: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[StoredMessage]:
        check_limit(limit)
        queries = segment_queries(
            "?",
            namespace,
            lineage,
            after=after,
            upto=upto,
            kind=kind,
            limit=limit,
            newest_first=newest_first,
        )
        segments = [_messages(self._query(sql, params)) for sql, params in queries]
        return select_window(segments, kind=kind, limit=limit, newest_first=newest_first)

    def last_sequence(self, namespace: str, lineage: Lineage) -> int:
        newest = 0
        for key, top in lineage:
            sql = "SELECT max(seq) FROM messages WHERE ns = ? AND branch = ?"
            params: list[Any] = [namespace, key]
            if top is not None:
                sql += " AND seq <= ?"
                params.append(top)
            value = self._query(sql, params)[0][0]
            newest = max(newest, value or 0)
        return newest

    def edit(
        self, namespace: str, message_id: MessageId, content: Sequence[Block]
    ) -> StoredMessage:
        old = self.get(namespace, message_id)
        wire, _ = encode_message(content, old.metadata)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO revisions (ns, message_id, content, replaced_at) "
                "SELECT ns, id, content, ? FROM messages WHERE ns = ? AND id = ?",
                (dt.datetime.now(dt.UTC).isoformat(), namespace, message_id),
            )
            db.execute(
                "UPDATE messages SET content = ? WHERE ns = ? AND id = ?",
                (wire, namespace, message_id),
            )
            db.execute("INSERT INTO changes (ns, seq) VALUES (?, ?)", (namespace, old.sequence))
        return self.get(namespace, message_id)

    def change_serial(self, namespace: str) -> int:
        rows = self._query("SELECT max(serial) FROM changes WHERE ns = ?", (namespace,))
        return int(rows[0][0] or 0)

    def save_render(self, namespace: str, branch: str, header: str, blob: bytes) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO renders (ns, branch, header, blob) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (ns, branch) DO UPDATE SET header = excluded.header, "
                "blob = excluded.blob",
                (namespace, branch, header, blob),
            )

    def load_render(self, namespace: str, branch: str) -> tuple[str, bytes] | None:
        rows = self._query(
            "SELECT header, blob FROM renders WHERE ns = ? AND branch = ?", (namespace, branch)
        )
        return (str(rows[0][0]), bytes(rows[0][1])) if rows else None

    def serials(self, namespace: str) -> tuple[int, int]:
        rows = self._query(
            "SELECT (SELECT max(serial) FROM changes WHERE ns = ?), "
            "(SELECT serial FROM binding_serials WHERE ns = ?)",
            (namespace, namespace),
        )
        return int(rows[0][0] or 0), int(rows[0][1] or 0)

    def serials_and_read(
        self, namespace: str, lineage: Lineage, after: int
    ) -> tuple[int, int, list[StoredMessage]]:
        changes, bindings = self.serials(namespace)
        return changes, bindings, self.read(namespace, lineage, after=after)

    def changed_since(self, namespace: str, serial: int) -> int | None:
        rows = self._query(
            "SELECT min(seq) FROM changes WHERE ns = ? AND serial > ?", (namespace, serial)
        )
        return None if rows[0][0] is None else int(rows[0][0])

    def stamps(
        self, namespace: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, AnyStamp | None]:
        out: dict[MessageId, AnyStamp | None] = {}
        ids = list(message_ids)
        for start in range(0, len(ids), SQL_VARIABLES_PER_QUERY):
            chunk = ids[start : start + SQL_VARIABLES_PER_QUERY]
            marks = ",".join("?" * len(chunk))
            rows = self._query(
                # ``+ns``: look ids up by their unique index; with a plain ``ns = ?`` SQLite
                # walks the namespace's whole history instead (O(history) per read).
                f"SELECT id, stamp FROM messages WHERE +ns = ? AND id IN ({marks}) "
                "AND stamp IS NOT NULL",
                [namespace, *chunk],
            )
            out.update(self._stamp_rows.read(namespace, rows))
        return out

    def find_signature(self, namespace: str, signature_digest: str) -> list[MessageId]:
        rows = self._query(
            "SELECT message_id FROM signatures WHERE ns = ? AND sig = ? ORDER BY rowid",
            (namespace, signature_digest),
        )
        return [r[0] for r in rows]

    # binding record

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _messages(rows: Sequence[Sequence[Any]]) -> list[StoredMessage]:
    return messages_from_rows(rows, dt.datetime.fromisoformat)


def _message(row: Sequence[Any]) -> StoredMessage:
    return message_from_row(row, dt.datetime.fromisoformat)
