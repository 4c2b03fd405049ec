"""A ``PostgresStore`` hold: a session-level advisory lock on a connection of its own.

The connection is autocommit and runs no transaction while it holds, so nothing stays open in the
database across a model call; it is never one of the store's pooled connections (a long turn never
starves the pool), and a few are kept open between holds (``HoldConnections``). The server drops
the lock when the session ends: a killed holder's process, or (after the TCP keepalives set here
give up) a vanished host, frees the agent. A hold whose connection was cut (a server restart) is
lost; its release logs it.
"""

from __future__ import annotations

import threading
from typing import Any

from context_manager._model._errors import StoreUnavailable
from context_manager._model._log import library_logger

from ._hold import Hold
from ._postgres_schema import HOLD_CLASS

log = library_logger("context_manager.store")

_HOLDER = """
SELECT a.pid, a.application_name, host(a.client_addr), extract(epoch FROM now() - {since})
  FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND l.classid::text::bigint = %s AND l.objid::text::bigint = %s
"""


def describe_holder(conn: Any, lock_class: int, key: int, *, hold: bool) -> str:
    """Who holds the advisory lock ``(lock_class, key)``, as the server reports it.

    ``hold``: a hold (named by its application name, aged since it was taken) rather than a
    write transaction (aged since the transaction began).
    """
    since = "a.state_change" if hold else "a.xact_start"
    rows = conn.execute(_HOLDER.format(since=since).encode(), (lock_class, key)).fetchall()
    if not rows:
        return "another connection (it has let go since)"
    pid, application, client, seconds = rows[0]
    where = f"client {client}" if client else "a local socket"
    if hold:
        age = "" if seconds is None else f", held {float(seconds):.1f} s"
        return f"{application!r} (server pid {pid}, {where}{age})"
    age = "" if seconds is None else f", its transaction open {float(seconds):.1f} s"
    return f"pid {pid} (application {application!r}, {where}{age})"


_SESSION = (
    # a vanished host's session (and hold) ends after about a minute of silence
    "SELECT set_config('tcp_keepalives_idle', '30', false), "
    "set_config('tcp_keepalives_interval', '10', false), "
    "set_config('tcp_keepalives_count', '3', false)"
)

IDLE_HOLD_CONNECTIONS = 2
"""How many hold connections a store keeps open between holds (one holder's next turn, or a
notice, reuses one instead of connecting again)."""


class HoldConnections:
    """A store's connections for holds: opened on demand, a few kept idle for the next hold.

    Each is autocommit and runs only ``set_config``, the advisory lock and its unlock, so it is
    never inside a transaction. A kept connection that went bad is dropped, not reused.
    """

    def __init__(self, psycopg: Any, conninfo: str, kwargs: dict[str, Any], where: str) -> None:
        self._psycopg = psycopg
        self._conninfo = conninfo
        self._kwargs = kwargs
        self.where = where
        self._guard = threading.Lock()
        self._idle: list[Any] = []

    def take(self, holder: str, timeout: float) -> Any:
        """A connection named ``holder`` whose ``lock_timeout`` is ``timeout`` seconds."""
        psycopg = self._psycopg
        settings = (
            "SELECT set_config('application_name', %s, false), "
            "set_config('lock_timeout', %s, false)"
        )
        values = (holder[:63], f"{max(1, round(timeout * 1000))}ms")
        while True:
            with self._guard:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            try:
                conn.execute(settings, values)
                return conn
            except psycopg.Error:  # the server dropped it while idle: connect afresh
                conn.close()
        try:
            conn = psycopg.connect(self._conninfo, **{**self._kwargs, "autocommit": True})
            conn.execute(_SESSION)
            conn.execute(settings, values)
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            raise StoreUnavailable(self.where, str(err).strip().splitlines()[0]) from err
        return conn

    def give_back(self, conn: Any, *, reusable: bool) -> None:
        with self._guard:
            if reusable and not conn.closed and len(self._idle) < IDLE_HOLD_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._guard:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class PostgresHold(Hold):
    """See the module docstring; made by ``PostgresStore.hold``."""

    def __init__(
        self,
        owner: object,
        namespace: str,
        timeout: float,
        holder: str,
        *,
        connections: HoldConnections,
        key: int,
    ) -> None:
        super().__init__(owner, namespace, timeout, holder)
        self._connections = connections
        self._lock_key = key
        self._conn: Any = None

    def _acquire(self) -> str | None:
        psycopg = self._connections._psycopg
        conn = self._connections.take(self.holder, self.timeout)
        try:
            conn.execute("SELECT pg_advisory_lock(%s, %s)", (HOLD_CLASS, self._lock_key))
        except psycopg.errors.LockNotAvailable:
            busy = describe_holder(conn, HOLD_CLASS, self._lock_key, hold=True)
            self._connections.give_back(conn, reusable=True)
            return busy
        except (psycopg.OperationalError, psycopg.InterfaceError) as err:
            conn.close()
            raise StoreUnavailable(self._connections.where, _first_line(err)) from err
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return None

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            row = conn.execute(
                "SELECT pg_advisory_unlock(%s, %s)", (HOLD_CLASS, self._lock_key)
            ).fetchone()
            lost = not (row and row[0])
        except self._connections._psycopg.Error:
            lost = True
        self._connections.give_back(conn, reusable=not lost)
        if lost:
            log.warning(
                "agent_hold_lost",
                namespace=self.namespace,
                why="the hold's connection was cut (a server restart?) while it was held",
            )


def _first_line(err: BaseException) -> str:
    return (str(err).strip() or type(err).__name__).splitlines()[0]
