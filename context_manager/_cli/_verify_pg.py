"""``verify`` on a PostgreSQL URI: the replay works on a copy in a throwaway schema.

Invariants: nothing in the user's schema is written (its tables and sequences are only read);
the copy is a new schema on the same database (``cm_verify_<random>``), made with this library's
own migrations, filled with the source's rows and sequence positions, and dropped afterwards
whatever happens. The source must be at this library's schema version (``open_postgres``
refuses an older or foreign one first), so the copied columns line up.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any

from context_manager._store._postgres import PostgresStore

from ._db import CliError, open_postgres

COPY_PREFIX = "cm_verify_"
"""The copy's schema name starts with this."""

META_TABLE = "context_manager_meta"
"""The table marking a schema as this library's: the copy's own is kept (never copied)."""


def _names(conn: Any, query: str, schema: str) -> list[str]:
    return [str(row[0]) for row in conn.execute(query, (schema,)).fetchall()]


def _fill(conn: Any, source: str, copy: str) -> None:
    """The copy's tables emptied and filled with the source's rows; its sequences moved to
    where the source's are."""
    from psycopg import sql

    tables = _names(
        conn,
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = %s AND table_type = 'BASE TABLE'",
        source,
    )
    for table in tables:
        if table == META_TABLE:
            continue
        target = sql.Identifier(copy, table)
        conn.execute(sql.SQL("TRUNCATE {}").format(target))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT * FROM {}").format(target, sql.Identifier(source, table))
        )
    for sequence in _names(
        conn,
        "SELECT sequence_name FROM information_schema.sequences WHERE sequence_schema = %s",
        source,
    ):
        row = conn.execute(
            sql.SQL("SELECT last_value, is_called FROM {}").format(sql.Identifier(source, sequence))
        ).fetchone()
        if row is None:
            continue
        name = sql.Identifier(copy, sequence).as_string(conn)
        conn.execute("SELECT setval(%s::regclass, %s, %s)", (name, row[0], row[1]))


@contextlib.contextmanager
def postgres_copy(url: str) -> Iterator[tuple[PostgresStore, Any]]:
    """A ``PostgresStore`` on a throwaway copy of the schema ``url`` names, and a connection
    whose ``search_path`` is the copy (for the ``anchored_heads`` read); both closed and the
    copy dropped on exit.

    Raises:
        CliError: what ``open_postgres`` refuses, or the copy cannot be made.
    """
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    open_postgres(url, writing=False).close()  # refuses an empty, older or foreign schema
    copy = f"{COPY_PREFIX}{secrets.token_hex(6)}"
    copy_url = make_conninfo(url, options=f"-c search_path={copy}")
    try:
        admin = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as err:
        raise CliError(f"cannot connect to make a copy to verify on: {err}") from err
    store: PostgresStore | None = None
    source = "?"
    try:
        found = admin.execute("SELECT current_schema()").fetchone()
        source = str(found[0]) if found else "public"
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(copy)))
        PostgresStore(copy_url).close()  # the tables, by this library's migrations
        _fill(admin, source, copy)
        store = PostgresStore(copy_url)
        with psycopg.connect(copy_url, autocommit=True) as reader:
            yield store, reader
    except psycopg.Error as err:
        raise CliError(f"cannot copy {source!r} to verify on: {err}") from err
    finally:
        if store is not None:
            store.close()
        with contextlib.suppress(psycopg.Error):
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(copy)))
        admin.close()
