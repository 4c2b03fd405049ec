"""The PostgreSQL store's schema: its migrations, and opening one (identify, refuse, migrate).

A database (precisely: the connection's current schema) is ours when it holds a
``context_manager_meta`` table whose ``application`` row names this library. It is identified in
one snapshot, taken while holding the migration advisory lock shared, so it never sees a
migration half-committed by another host (a catalog lookup can see a newly committed table whose
rows the snapshot cannot); nothing is written before it is known to be ours and not newer. Each
forward-only migration runs in its own transaction under that lock held exclusively, and is
skipped when another host ran it while this one waited (PostgreSQL DDL is transactional: a failed
migration leaves the previous version whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_manager._model._errors import NotADatabase, SchemaTooNew

if TYPE_CHECKING:
    import psycopg

APPLICATION = "context-manager"
"""The ``application`` value in ``context_manager_meta`` marking a schema as ours."""

LOCK_CLASS = 0x434D
"""The first key of every advisory lock this library takes ("CM"), to tell ours apart."""

MIGRATION_LOCK = 0
"""The second advisory-lock key migrations run under (namespace locks hash to other values)."""

HOLD_CLASS = 0x4348
"""The first key of a hold's session-level advisory lock ("CH"): apart from ``LOCK_CLASS``, so
a holder's own writes (transaction-level locks on other connections) never wait for its hold."""

MIGRATIONS: tuple[str, ...] = (
    # 1: the whole schema of SQLite's version 4, in PostgreSQL terms. ``seq`` comes from one
    # sequence per store (unique and monotonic across hosts); ``changes`` numbers its rows per
    # namespace, so ``change_serial`` is one backward step on its primary key.
    """
    CREATE SEQUENCE counter AS bigint;
    CREATE TABLE namespaces (name text PRIMARY KEY, current_branch text);
    CREATE TABLE branches (
        id text PRIMARY KEY, ns text NOT NULL, name text NOT NULL, created bigint NOT NULL,
        parent text, fork_sequence bigint, deleted boolean NOT NULL DEFAULT false);
    CREATE UNIQUE INDEX branches_live_name ON branches (ns, name) WHERE NOT deleted;
    CREATE TABLE messages (
        seq bigint PRIMARY KEY, id text NOT NULL UNIQUE, ns text NOT NULL,
        branch text NOT NULL, role text NOT NULL, content text NOT NULL, meta text NOT NULL,
        kind text, created_at timestamptz NOT NULL, stamp text);
    CREATE INDEX messages_by_branch ON messages (ns, branch, seq);
    CREATE INDEX messages_by_kind ON messages (ns, branch, kind, seq) WHERE kind IS NOT NULL;
    CREATE TABLE revisions (
        ns text NOT NULL, message_id text NOT NULL, content text NOT NULL,
        replaced_at timestamptz NOT NULL);
    CREATE TABLE changes (ns text NOT NULL, serial bigint NOT NULL, seq bigint NOT NULL,
        PRIMARY KEY (ns, serial));
    CREATE TABLE signatures (
        ns text NOT NULL, sig text NOT NULL, message_id text NOT NULL,
        position bigserial PRIMARY KEY);
    CREATE INDEX signatures_by_sig ON signatures (ns, sig, position);
    CREATE TABLE branch_state (ns text NOT NULL, branch text NOT NULL,
        first_compiled boolean NOT NULL, anchor bigint, PRIMARY KEY (ns, branch));
    CREATE TABLE releases (ns text NOT NULL, branch text NOT NULL, message_id text NOT NULL,
        from_block integer NOT NULL, reported boolean NOT NULL, reported_from integer,
        PRIMARY KEY (ns, branch, message_id));
    """,
    # 2: what the last committing compile left out without releasing, and the sequence each
    # release was recorded at (binding v2, SPEC 7 and 5), as SQLite's version 5.
    """
    CREATE TABLE left_out (ns text NOT NULL, branch text NOT NULL, message_id text NOT NULL,
        block integer NOT NULL, PRIMARY KEY (ns, branch, message_id, block));
    ALTER TABLE releases ADD COLUMN at_seq bigint;
    """,
    # 3: the anchored head of each branch, one row per re-anchoring (SPEC 7b), as SQLite's 6.
    """
    CREATE TABLE anchored_heads (ns text NOT NULL, branch text NOT NULL, at_seq bigint NOT NULL,
        head text NOT NULL, PRIMARY KEY (ns, branch, at_seq));
    """,
    # 4: the sequence each block was first left out at (SPEC 5), as SQLite's version 7.
    """
    ALTER TABLE left_out ADD COLUMN at_seq bigint;
    """,
    # 5: every block a release started at, with its sequence (SPEC 5), as SQLite's version 8.
    """
    CREATE TABLE release_history (ns text NOT NULL, branch text NOT NULL,
        message_id text NOT NULL, from_block integer NOT NULL, at_seq bigint,
        PRIMARY KEY (ns, branch, message_id, from_block));
    INSERT INTO release_history (ns, branch, message_id, from_block, at_seq)
        SELECT ns, branch, message_id, from_block, at_seq FROM releases;
    """,
    # 6: how many binding-record writes each agent has had (``serials``), as SQLite's 9.
    """
    CREATE TABLE binding_serials (ns text PRIMARY KEY, serial bigint NOT NULL);
    """,
    # 7: each branch's render snapshot (derived data), as SQLite's 10.
    """
    CREATE TABLE renders (ns text NOT NULL, branch text NOT NULL, header text NOT NULL,
        blob bytea NOT NULL, PRIMARY KEY (ns, branch));
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

_PROBE = """
SELECT current_schema(),
       to_regclass('context_manager_meta') IS NOT NULL,
       (SELECT count(*) FROM pg_catalog.pg_class c
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'S'))
"""


def probe(
    conn: psycopg.Connection[tuple[Any, ...]], where: str, *, known: int = SCHEMA_VERSION
) -> int:
    """The schema version of the connection's current schema, read in one snapshot; 0: empty.

    ``conn`` is in autocommit mode. The read waits for a migration another host is running.
    ``known`` is the newest version this library can open.

    Raises:
        NotADatabase: there is no current schema, or it holds tables this library did not write.
        SchemaTooNew: written by a newer version of this library.
    """
    conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = conn.execute(_PROBE).fetchone()
            assert row is not None
            schema, has_meta, relations = row
            if schema is None:
                raise NotADatabase(where, "no schema on the search_path exists; create one first")
            if not has_meta:
                if relations:
                    why = f"schema {schema!r} holds tables this library did not write"
                    raise NotADatabase(where, why)
                return 0
            meta = dict(conn.execute("SELECT key, value FROM context_manager_meta").fetchall())
    finally:
        conn.execute("SELECT pg_advisory_unlock_shared(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
    if meta.get("application") != APPLICATION:
        raise NotADatabase(where, f"context_manager_meta names {meta.get('application')!r}")
    try:
        version = int(str(meta.get("schema_version")))
    except ValueError as err:
        raise NotADatabase(where, "context_manager_meta has no readable schema_version") from err
    if version > known:
        raise SchemaTooNew(where, version, known)
    return version


def open_versioned(
    conn: psycopg.Connection[tuple[Any, ...]],
    where: str,
    *,
    migrations: Sequence[str] = MIGRATIONS,
) -> None:
    """Check that the connection's current schema is ours and not newer; run pending migrations.

    ``conn`` is in autocommit mode; each migration is its own transaction.

    Raises:
        NotADatabase: foreign tables in the schema, or no schema at all.
        SchemaTooNew: written by a newer version; nothing was written.
    """
    version = probe(conn, where, known=len(migrations))
    for number in range(version, len(migrations)):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS context_manager_meta "
                "(key text PRIMARY KEY, value text NOT NULL)"
            )
            row = conn.execute(
                "SELECT value FROM context_manager_meta WHERE key = 'schema_version'"
            ).fetchone()
            current = 0 if row is None else int(str(row[0]))
            if current > number:  # another host ran it while this one waited
                continue
            for statement in migrations[number].split(";"):
                if statement.strip():
                    conn.execute(statement.encode())  # bytes: a script, not a literal
            conn.execute(
                "INSERT INTO context_manager_meta (key, value) VALUES "
                "('application', %s), ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (APPLICATION, str(number + 1)),
            )
