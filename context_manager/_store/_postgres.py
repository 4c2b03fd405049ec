"""``PostgresStore``: one durable transcript shared by agents on many hosts (psycopg 3).

Invariants. Every write is one transaction that first takes the agent's lock (a transaction-scoped
advisory lock on its namespace), then draws its sequence from the store's sequence: within a
namespace, commit order is sequence order, so a reader that has seen sequence N never later finds
a new message at or below N, and an incremental compile on one host sees whatever another host
committed before it. ``batch()`` is one transaction on one pinned connection: every namespace it
touches, read or written, stays locked until it ends, so a round (reply and tool results) written
in a batch never interleaves with another host's writes. ``hold()`` (the runtime's per-turn lease)
is a session-level advisory lock in another lock class on a connection of its own
(``_postgres_hold``), never a transaction. Isolation is READ COMMITTED; the locks give the
ordering. Hazard: psycopg is an optional dependency, imported only when a store is made.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_manager._model._checks import check_branch_name
from context_manager._model._content import Block
from context_manager._model._errors import (
    BranchNotFound,
    MessageNotFound,
    StoreUnavailable,
)
from context_manager._model._messages import (
    MessageId,
    MessageMeta,
    Role,
    StoredMessage,
    decode_message,
    encode_message,
)
from context_manager._model._stamps import AnyStamp
from context_manager._store._protocol import (
    BranchRecord,
    BranchRef,
    Lineage,
)
from context_manager._store._read import check_limit, select_window
from context_manager._store._sql import MESSAGE_COLUMNS, segment_queries

from ._hold import Hold, holder_identity
from ._postgres_append import append_params
from ._postgres_binding import PostgresBindingRecords
from ._postgres_connection import _describe
from ._postgres_hold import HoldConnections, PostgresHold
from ._postgres_probe import probe_server
from ._postgres_schema import open_versioned
from ._rows import message_from_row, messages_from_rows
from ._sql_branch import insert_branch
from ._stamp_rows import StampRows
from ._statements import POSTGRES, message_row

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    Connection = psycopg.Connection[tuple[Any, ...]]


INSTALL_HINT = "PostgresStore needs psycopg 3: pip install 'thinking-context-manager[postgres]'"


class PostgresStore(PostgresBindingRecords):
    """A durable ``Store`` on PostgreSQL, shared by many hosts.

    Args:
        target: a libpq connection string or URI (``postgresql://user@host/db``), or a
            ``psycopg_pool.ConnectionPool`` the caller owns (``close()`` leaves it open).
        lock_timeout: how long a write (or a batch's first touch of an agent) waits for another
            host holding the same agent before raising ``AgentBusy``, in seconds.
        connect_timeout: how long opening the store, or a call, waits for a connection.
        max_connections: the size of the pool the store opens for a connection string.

    The tables live in the connection's current schema (``search_path``), one store per schema.

    Raises:
        ImportError: psycopg is not installed
            (``pip install 'thinking-context-manager[postgres]'``).
        StoreRefused: at once, with the server's own reason: the database does not exist, the
            login failed, or the connection string cannot be read.
        StoreUnavailable: the server cannot be reached within ``connect_timeout`` (the cause
            named).
        NotADatabase: the schema holds tables this library did not write.
        SchemaTooNew: the schema was written by a newer version; nothing was written.
    """

    def __init__(
        self,
        target: str | psycopg_pool.ConnectionPool[Any],
        *,
        lock_timeout: float = 30.0,
        connect_timeout: float = 10.0,
        max_connections: int = 4,
    ) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError as err:  # pragma: no cover - exercised without the extra installed
            raise ImportError(INSTALL_HINT) from err
        self._psycopg = psycopg
        self._stamp_rows = StampRows()
        self.lock_timeout = lock_timeout
        self.connect_timeout = connect_timeout
        self._owns_pool = isinstance(target, str)
        if isinstance(target, str):
            self.where = _describe(psycopg, target)
            unreachable = probe_server(psycopg, target, self.where, connect_timeout)
            self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
                target,
                min_size=1,
                max_size=max(2, max_connections),
                kwargs={"autocommit": True},
                configure=self._configure,
                # a pooled connection is checked as it is handed out: after a server restart
                # the first call gets a live one, never the dead one the restart left idle
                check=psycopg_pool.ConnectionPool.check_connection,
                open=False,
                name="context-manager",
            )
            try:
                self._pool.open(wait=True, timeout=connect_timeout)
            except psycopg_pool.PoolTimeout as err:
                self._pool.close()
                why = f"no connection within {connect_timeout:g} s"
                if unreachable:
                    why += f": {unreachable}"
                raise StoreUnavailable(self.where, why) from err
        else:
            self._pool = target
            conninfo = target.conninfo
            self.where = _describe(psycopg, conninfo if isinstance(conninfo, str) else "")
        try:
            with self._connection() as conn:
                open_versioned(conn, self.where)
                schema = conn.execute("SELECT current_schema()").fetchone()
        except BaseException:
            if self._owns_pool:
                self._pool.close()
            raise
        self._schema = str(schema[0] if schema else "")
        self._holds = _hold_connections(psycopg, target, self.where, connect_timeout)

    def hold(
        self, namespace: str, *, timeout: float | None = None, holder: str | None = None
    ) -> Hold:
        """Hold ``namespace`` (the agent) for a whole turn: ``with`` or ``async with``.

        A session-level advisory lock on a connection of its own (autocommit: no transaction
        stays open while it holds, and the store's pool is not used). Entering waits up to
        ``timeout`` seconds (default ``lock_timeout``) for another holder, then raises
        ``AgentBusy`` naming it (``holder@HOST:PID``, its server pid and client, how long it has
        held). Writes inside commit one by one as usual. The server frees a hold whose session
        ends, so a killed holder never blocks the agent.
        """
        return PostgresHold(
            self,
            namespace,
            self.lock_timeout if timeout is None else timeout,
            holder_identity(holder),
            connections=self._holds,
            key=self._key(namespace),
        )

    def _next(self, conn: Connection) -> int:
        row = conn.execute("SELECT nextval('counter')").fetchone()
        assert row is not None
        return int(row[0])

    def _live_names(self, conn: Connection, namespace: str) -> list[str]:
        rows = conn.execute(
            "SELECT name FROM branches WHERE ns = %s AND NOT deleted", (namespace,)
        ).fetchall()
        return [r[0] for r in rows]

    # namespaces
    def namespaces(self) -> list[str]:
        with self._connection() as conn:
            rows = conn.execute("SELECT DISTINCT ns FROM branches ORDER BY ns").fetchall()
        return [r[0] for r in rows]

    def drop_namespace(self, namespace: str) -> None:
        with self._write(namespace) as conn:
            conn.execute("DELETE FROM namespaces WHERE name = %s", (namespace,))
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
                conn.execute(f"DELETE FROM {table} WHERE ns = %s".encode(), (namespace,))

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
        with self._write(namespace) as conn:
            made = functools.partial(self._next, conn)
            return insert_branch(conn, POSTGRES, made, namespace, name, parent, fork_sequence)

    def delete_branch(self, namespace: str, name: str) -> BranchRecord:
        with self._write(namespace) as conn:
            row = conn.execute(
                "UPDATE branches SET deleted = true WHERE ns = %s AND name = %s AND NOT deleted "
                "RETURNING id, name, created, parent, fork_sequence",
                (namespace, name),
            ).fetchone()
            if row is None:
                raise BranchNotFound(name, self._live_names(conn, namespace))
            gone = _branch(row, deleted=True)
            conn.execute(  # derived data: a deleted branch is never rendered again
                "DELETE FROM renders WHERE ns = %s AND branch = %s", (namespace, gone.key)
            )
            return gone

    def branches(self, namespace: str) -> list[BranchRecord]:
        with self._reading(namespace) as conn:
            rows = conn.execute(
                "SELECT id, name, created, parent, fork_sequence FROM branches "
                "WHERE ns = %s AND NOT deleted ORDER BY created",
                (namespace,),
            ).fetchall()
        return [_branch(r) for r in rows]

    def branch_by_key(self, namespace: str, key: str) -> BranchRecord:
        branch_id, _, created = key.partition("@")
        with self._reading(namespace) as conn:
            row = conn.execute(
                "SELECT id, name, created, parent, fork_sequence, deleted FROM branches "
                "WHERE ns = %s AND id = %s",
                (namespace, branch_id),
            ).fetchone()
            if row is None or str(row[2]) != created:
                raise BranchNotFound(key, self._live_names(conn, namespace))
        return _branch(row[:5], deleted=bool(row[5]))

    def current_branch_name(self, namespace: str) -> str | None:
        with self._reading(namespace) as conn:
            row = conn.execute(
                "SELECT current_branch FROM namespaces WHERE name = %s", (namespace,)
            ).fetchone()
        return None if row is None else row[0]

    def set_current_branch(self, namespace: str, name: str) -> None:
        with self._write(namespace) as conn:
            conn.execute(
                "INSERT INTO namespaces (name, current_branch) VALUES (%s, %s) "
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
        encoded = (wire, meta)
        if self._batch() is None:  # one round trip (``_postgres_append``)
            row = message_row(namespace, branch, 0, role, encoded, metadata.kind, created_at, stamp)
            drawn = self._append_once(namespace, append_params(row, branch, signatures))
            if drawn is None:
                with self._reading(namespace) as conn:
                    raise BranchNotFound(branch, self._live_names(conn, namespace))
            sequence, message_id = drawn, f"msg_{drawn}"
        else:
            sequence = self._append_batched(
                namespace, branch, role, encoded, metadata, created_at, stamp, signatures
            )
            message_id = f"msg_{sequence}"
        return StoredMessage(
            id=message_id,
            sequence=sequence,
            branch=branch,
            role=role,
            content=stored_content,
            metadata=stored_meta,
            created_at=created_at,
        )

    def _append_batched(
        self,
        namespace: str,
        branch: str,
        role: Role,
        encoded: tuple[str, str],
        metadata: MessageMeta,
        created_at: dt.datetime,
        stamp: AnyStamp | None,
        signatures: Sequence[str],
    ) -> int:
        """``append`` inside a batch, statement by statement on the batch's connection."""
        with self._write(namespace) as conn:
            at = {"ns": namespace, "id": branch.partition("@")[0]}
            if not conn.execute(POSTGRES.branch_id_exists, at).fetchone():
                raise BranchNotFound(branch, self._live_names(conn, namespace))
            sequence = self._next(conn)
            row = message_row(
                namespace, branch, sequence, role, encoded, metadata.kind, created_at, stamp
            )
            conn.execute(POSTGRES.message_insert, row)
            if signatures:
                with conn.cursor() as cursor:
                    cursor.executemany(
                        POSTGRES.signature_insert,
                        [{"ns": namespace, "sig": s, "message_id": row["id"]} for s in signatures],
                    )
        return sequence

    def get(self, namespace: str, message_id: MessageId) -> StoredMessage:
        with self._reading(namespace) as conn:
            row = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE ns = %s AND id = %s",
                (namespace, message_id),
            ).fetchone()
        if row is None:
            raise MessageNotFound(message_id, namespace)
        return _message(row)

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
            "%s",
            namespace,
            lineage,
            after=after,
            upto=upto,
            kind=kind,
            limit=limit,
            newest_first=newest_first,
        )
        with self._reading(namespace) as conn:
            segments = [
                messages_from_rows(conn.execute(sql.encode(), params).fetchall(), _utc)
                for sql, params in queries
            ]
        return select_window(segments, kind=kind, limit=limit, newest_first=newest_first)

    def serials_and_read(
        self, namespace: str, lineage: Lineage, after: int
    ) -> tuple[int, int, list[StoredMessage]]:
        """One round trip: the statements are pipelined, and their results read after."""
        with self._reading(namespace) as conn:
            with conn.pipeline():
                serials = conn.execute(_SERIALS, (namespace, namespace))
                reads = [
                    conn.execute(sql.encode(), params)
                    for sql, params in segment_queries("%s", namespace, lineage, after=after)
                ]
            row = serials.fetchone()
            segments = [messages_from_rows(cursor.fetchall(), _utc) for cursor in reads]
        changes, bindings = (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)
        return changes, bindings, select_window(segments, kind=None, limit=None, newest_first=False)

    def last_sequence(self, namespace: str, lineage: Lineage) -> int:
        newest = 0
        with self._reading(namespace) as conn:
            for key, top in lineage:
                if top is None:
                    row = conn.execute(
                        "SELECT max(seq) FROM messages WHERE ns = %s AND branch = %s",
                        (namespace, key),
                    ).fetchone()
                else:
                    row = conn.execute(
                        "SELECT max(seq) FROM messages WHERE ns = %s AND branch = %s AND seq <= %s",
                        (namespace, key, top),
                    ).fetchone()
                newest = max(newest, int(row[0] or 0) if row else 0)
        return newest

    def edit(
        self, namespace: str, message_id: MessageId, content: Sequence[Block]
    ) -> StoredMessage:
        old = self.get(namespace, message_id)
        wire, _ = encode_message(content, old.metadata)
        with self._write(namespace) as conn:
            conn.execute(
                "INSERT INTO revisions (ns, message_id, content, replaced_at) "
                "SELECT ns, id, content, %s FROM messages WHERE ns = %s AND id = %s",
                (dt.datetime.now(dt.UTC), namespace, message_id),
            )
            conn.execute(
                "UPDATE messages SET content = %s WHERE ns = %s AND id = %s",
                (wire, namespace, message_id),
            )
            conn.execute(
                "INSERT INTO changes (ns, serial, seq) SELECT %s, "
                "coalesce(max(serial), 0) + 1, %s FROM changes WHERE ns = %s",
                (namespace, old.sequence, namespace),
            )
        return self.get(namespace, message_id)

    def change_serial(self, namespace: str) -> int:
        """The namespace's change serial: one backward step on the ``changes`` primary key."""
        with self._reading(namespace) as conn:
            row = conn.execute(
                "SELECT max(serial) FROM changes WHERE ns = %s", (namespace,)
            ).fetchone()
        return int(row[0] or 0) if row else 0

    def save_render(self, namespace: str, branch: str, header: str, blob: bytes) -> None:
        """One upsert, without the agent's lock: derived data, never worth a wait."""
        with self._connection() as conn:
            conn.execute(
                "INSERT INTO renders (ns, branch, header, blob) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (ns, branch) DO UPDATE SET header = excluded.header, "
                "blob = excluded.blob",
                (namespace, branch, header, blob),
            )

    def load_render(self, namespace: str, branch: str) -> tuple[str, bytes] | None:
        with self._reading(namespace) as conn:
            row = conn.execute(  # binary: the blob as its bytes, not twice as many hex digits
                "SELECT header, blob FROM renders WHERE ns = %s AND branch = %s",
                (namespace, branch),
                binary=True,
            ).fetchone()
        return (str(row[0]), bytes(row[1])) if row else None

    def serials(self, namespace: str) -> tuple[int, int]:
        """The change serial and the binding serial, in one round trip."""
        with self._reading(namespace) as conn:
            row = conn.execute(_SERIALS, (namespace, namespace)).fetchone()
        return (int(row[0] or 0), int(row[1] or 0)) if row else (0, 0)

    def changed_since(self, namespace: str, serial: int) -> int | None:
        with self._reading(namespace) as conn:
            row = conn.execute(
                "SELECT min(seq) FROM changes WHERE ns = %s AND serial > %s", (namespace, serial)
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def stamps(
        self, namespace: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, AnyStamp | None]:
        if not message_ids:
            return {}
        with self._reading(namespace) as conn:
            rows = conn.execute(
                "SELECT id, stamp FROM messages WHERE id = ANY(%s) AND ns = %s "
                "AND stamp IS NOT NULL",
                (list(message_ids), namespace),
            ).fetchall()
        return self._stamp_rows.read(namespace, rows)

    def find_signature(self, namespace: str, signature_digest: str) -> list[MessageId]:
        with self._reading(namespace) as conn:
            rows = conn.execute(
                "SELECT message_id FROM signatures WHERE ns = %s AND sig = %s ORDER BY position",
                (namespace, signature_digest),
            ).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        """Close the pool this store opened (a pool passed in is the caller's to close), and
        the idle hold connections."""
        self._holds.close()
        if self._owns_pool:
            self._pool.close()


def _hold_connections(
    psycopg: Any, target: str | psycopg_pool.ConnectionPool[Any], where: str, timeout: float
) -> HoldConnections:
    """Where holds connect: the connection string, or the pool's (its ``kwargs`` too)."""
    source: tuple[Any, Any] = (
        (target, {})
        if isinstance(target, str)
        else (
            target.conninfo,
            target.kwargs,
        )
    )
    conninfo, kwargs = (x() if callable(x) else x for x in source)
    kwargs = {"connect_timeout": max(1, round(timeout)), **(kwargs or {})}
    return HoldConnections(psycopg, str(conninfo), kwargs, where)


def _branch(row: Sequence[Any], *, deleted: bool = False) -> BranchRecord:
    branch_id, name, created, parent, fork_sequence = row
    return BranchRecord(
        ref=BranchRef(id=branch_id, name=name, created=int(created)),
        parent=parent,
        fork_sequence=None if fork_sequence is None else int(fork_sequence),
        deleted=deleted,
    )


_SERIALS = (
    "SELECT (SELECT max(serial) FROM changes WHERE ns = %s), "
    "(SELECT serial FROM binding_serials WHERE ns = %s)"
)
"""The agent's change serial and binding serial, in one statement."""


def _utc(created_at: dt.datetime) -> dt.datetime:
    return created_at.astimezone(dt.UTC)


def _message(row: Sequence[Any]) -> StoredMessage:
    return message_from_row(row, _utc)
