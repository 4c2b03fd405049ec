"""``PostgresStore``'s connection handling: the pool, the batch's pinned connection, the agent
lock (a transaction-scoped advisory lock) and server failures mapped to ``StoreUnavailable``.

Every write takes the agent's lock first; inside a ``batch`` every namespace touched stays locked
until the batch ends. The statements live in ``_postgres`` and ``_postgres_binding``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from context_manager._model._errors import AgentBusy, StoreUnavailable
from context_manager._model._log import library_logger

from ._postgres_append import append_once
from ._postgres_hold import describe_holder
from ._postgres_schema import LOCK_CLASS

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    Connection = psycopg.Connection[tuple[Any, ...]]

log = library_logger("context_manager.store")


@attrs.define
class _Batch:
    """A batch's pinned connection and the namespaces it already holds."""

    conn: Connection
    held: set[str] = attrs.field(factory=set)


_BATCHES: contextvars.ContextVar[tuple[tuple[int, _Batch], ...]] = contextvars.ContextVar(
    "context_manager_postgres_batches", default=()
)
"""The batches open in this thread or task, by store: a context variable, so another asyncio
task or thread sharing the store never writes into a batch it did not open."""


class PostgresConnections:
    """Connections, transactions and the agent lock (a base class of ``PostgresStore``)."""

    _psycopg: Any
    _pool: psycopg_pool.ConnectionPool[Any]
    _schema: str
    where: str
    lock_timeout: float
    connect_timeout: float

    def _configure(self, conn: Connection) -> None:
        """A new pooled connection: autocommit, named after this host, with the lock timeout."""
        conn.autocommit = True
        name = conn.execute("SHOW application_name").fetchone()
        if not (name and name[0]):
            conn.execute(
                "SELECT set_config('application_name', %s, false)",
                (f"context-manager@{socket.gethostname()}:{os.getpid()}"[:63],),
            )

    def _batch(self) -> _Batch | None:
        for owner, batch in _BATCHES.get():
            if owner == id(self):
                return batch
        return None

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection]:
        """The open batch's connection, or one from the pool; server failures are mapped."""
        batch = self._batch()
        if batch is not None:
            with self._mapped():
                yield batch.conn
            return
        with self._mapped(), self._pool.connection(timeout=self.connect_timeout) as conn:
            conn.autocommit = True
            yield conn

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[None]:
        """Turn a lost server into ``StoreUnavailable`` and clear the pool of dead connections."""
        psycopg = self._psycopg
        import psycopg_pool

        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            if self._batch() is None:
                self._pool.check()  # discard every idle connection the server dropped
            raise StoreUnavailable(self.where, _first_line(err)) from err
        except psycopg_pool.PoolTimeout as err:
            why = f"no connection within {self.connect_timeout:g} s"
            raise StoreUnavailable(self.where, why) from err

    def _timeout_ms(self) -> int:
        return max(1, round(self.lock_timeout * 1000))

    @contextlib.contextmanager
    def _write(self, namespace: str) -> Iterator[Connection]:
        """One all-or-nothing write holding ``namespace``'s lock (a savepoint inside a batch)."""
        with self._connection() as conn:
            batch = self._batch()
            if batch is not None:
                self._hold(conn, namespace, batch)
                with conn.transaction():
                    yield conn
                return
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {self._timeout_ms()}")
                self._lock(conn, namespace)
                yield conn

    @contextlib.contextmanager
    def _reading(self, namespace: str) -> Iterator[Connection]:
        """A connection to read ``namespace``; inside a batch the read holds the agent too."""
        with self._connection() as conn:
            batch = self._batch()
            if batch is not None:
                self._hold(conn, namespace, batch)
            yield conn

    def _hold(self, conn: Connection, namespace: str, batch: _Batch) -> None:
        if namespace not in batch.held:
            self._lock(conn, namespace)
            batch.held.add(namespace)

    def _key(self, namespace: str) -> int:
        return zlib.crc32(f"{self._schema}\0{namespace}".encode()) & 0x7FFFFFFF

    def _lock(self, conn: Connection, namespace: str) -> None:
        """Take ``namespace``'s advisory lock until the transaction ends, or raise ``AgentBusy``."""
        key = self._key(namespace)
        row = conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (LOCK_CLASS, key)).fetchone()
        if row and row[0]:
            return
        try:
            with conn.transaction():  # a savepoint: a timeout leaves the outer transaction usable
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, key))
        except self._psycopg.errors.LockNotAvailable as err:
            holder = describe_holder(conn, LOCK_CLASS, key, hold=False)
            log.warning("agent_busy", namespace=namespace, holder=holder)
            raise AgentBusy(namespace, holder, self.lock_timeout) from err

    def _append_once(self, namespace: str, params: dict[str, Any]) -> int | None:
        """``append`` outside a batch in one round trip (``_postgres_append``): the sequence,
        or ``None`` when the branch is not there."""
        key = self._key(namespace)
        with self._mapped(), self._pool.connection(timeout=self.connect_timeout) as conn:
            conn.autocommit = True
            try:
                sequence: int | None = append_once(
                    conn, (LOCK_CLASS, key), self._timeout_ms(), params
                )
                return sequence
            except self._psycopg.errors.LockNotAvailable as err:
                holder = describe_holder(conn, LOCK_CLASS, key, hold=False)
                log.warning("agent_busy", namespace=namespace, holder=holder)
                raise AgentBusy(namespace, holder, self.lock_timeout) from err

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction: many writes, one commit, and the touched agents held until it ends.

        Every namespace the batch reads or writes is locked at first touch (waiting up to
        ``lock_timeout`` for another host), so a round written inside it (a compile, the reply,
        the tool results) never interleaves with another host's. Each write inside stays
        all-or-nothing; the batch commits when the block ends, or rolls back whole if it raises.
        Other threads and tasks use their own connections meanwhile. A nested batch is a
        savepoint.

        Raises:
            AgentBusy: another host held an agent past ``lock_timeout``.
            StoreUnavailable: the server went away; nothing of the batch was committed.
        """
        outer = self._batch()
        if outer is not None:
            with self._mapped(), outer.conn.transaction():
                yield
            return
        with self._mapped(), self._pool.connection(timeout=self.connect_timeout) as conn:
            conn.autocommit = True
            batch = _Batch(conn)
            token = _BATCHES.set((*_BATCHES.get(), (id(self), batch)))
            try:
                with conn.transaction():
                    conn.execute(f"SET LOCAL lock_timeout = {self._timeout_ms()}")
                    yield
            finally:
                _BATCHES.reset(token)


def _describe(psycopg: Any, conninfo: str) -> str:
    """``conninfo`` for messages, without its password."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "postgresql (unparsable connection string)"
    user = parts.get("user") or ""
    host = parts.get("host") or "localhost"
    port = parts.get("port") or 5432
    database = parts.get("dbname") or user
    return f"postgresql://{user}{'@' if user else ''}{host}:{port}/{database}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
