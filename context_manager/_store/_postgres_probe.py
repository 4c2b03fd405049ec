"""Before a pool is opened: one direct connection, so a refusal is named at once.

A pool retries in the background until its timeout and then says only that no connection came;
the server's own reason (no such database, a failed login) reaches nothing but psycopg_pool's
warnings. Invariant: a configuration the server refuses, or a connection string that cannot be
read, raises ``StoreRefused`` with that reason before any pool exists; a server that cannot be
reached yet returns its reason and leaves the waiting to the pool (it may be starting).
"""

from __future__ import annotations

from typing import Any

from context_manager._model._errors import StoreRefused

REFUSALS = (
    "does not exist",  # database "x" / role "x" does not exist
    "authentication failed",  # password / peer / ident authentication failed
    "pg_hba.conf",  # no pg_hba.conf entry for host ...
    "permission denied",  # permission denied for database ...
    "password",  # fe_sendauth: no password supplied
    "invalid ",  # invalid sslmode value, invalid port number, ...
)
"""Marks of a server (or libpq) answer that no retry will change."""


def probe_server(psycopg: Any, conninfo: str, where: str, timeout: float) -> str | None:
    """Connect once to ``conninfo``; ``None`` when that works, else why the server is unreachable.

    Raises:
        StoreRefused: the connection string cannot be read, or the server refused it (the
            database does not exist, the login failed).
    """
    try:
        psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as err:
        why = " ".join(str(err).split())
        raise StoreRefused(where, f"the connection string cannot be read ({why})") from err
    try:
        conn = psycopg.connect(conninfo, connect_timeout=max(1, round(timeout)), autocommit=True)
    except psycopg.OperationalError as err:
        why = _server_words(err)
        if any(mark in why for mark in REFUSALS):
            raise StoreRefused(where, f"the server refused the connection: {why}") from err
        return why
    conn.close()
    return None


def _server_words(err: BaseException) -> str:
    """The server's reason, without libpq's ``connection to server at ... failed:`` preamble."""
    text = " ".join(str(err).split())
    _, _, after = text.rpartition("failed: ")
    return (after or text).removeprefix("FATAL: ").strip()
