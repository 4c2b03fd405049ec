"""``SQLiteStore``'s schema: the file's application id and the migrations, oldest first.

Forward only: migration ``n`` takes a file from version ``n - 1`` to ``n``; a file written by a
newer version is refused before anything is written (``_sqlite_file.open_versioned``).
"""

from __future__ import annotations

APPLICATION_ID = 0x434D4752
"""``PRAGMA application_id`` marking a file as ours ("CMGR")."""

MIGRATIONS: tuple[str, ...] = (
    # 1: the initial schema.
    """
    CREATE TABLE counter (value INTEGER NOT NULL);
    INSERT INTO counter (value) VALUES (0);
    CREATE TABLE namespaces (name TEXT PRIMARY KEY, current_branch TEXT);
    CREATE TABLE branches (
        id TEXT PRIMARY KEY, ns TEXT NOT NULL, name TEXT NOT NULL, created INTEGER NOT NULL,
        parent TEXT, fork_sequence INTEGER, deleted INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX branches_by_ns ON branches (ns, deleted, name);
    CREATE TABLE messages (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, ns TEXT NOT NULL,
        branch TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, meta TEXT NOT NULL,
        kind TEXT, created_at TEXT NOT NULL, stamp TEXT);
    CREATE INDEX messages_by_branch ON messages (ns, branch, seq);
    CREATE TABLE revisions (
        ns TEXT NOT NULL, message_id TEXT NOT NULL, content TEXT NOT NULL,
        replaced_at TEXT NOT NULL);
    CREATE TABLE changes (serial INTEGER PRIMARY KEY AUTOINCREMENT, ns TEXT NOT NULL,
        seq INTEGER NOT NULL);
    CREATE INDEX changes_by_ns ON changes (ns, serial);
    CREATE TABLE signatures (ns TEXT NOT NULL, sig TEXT NOT NULL, message_id TEXT NOT NULL);
    CREATE INDEX signatures_by_sig ON signatures (ns, sig);
    CREATE TABLE branch_state (ns TEXT NOT NULL, branch TEXT NOT NULL,
        first_compiled INTEGER NOT NULL, PRIMARY KEY (ns, branch));
    CREATE TABLE releases (ns TEXT NOT NULL, branch TEXT NOT NULL, message_id TEXT NOT NULL,
        from_block INTEGER NOT NULL, reported INTEGER NOT NULL,
        PRIMARY KEY (ns, branch, message_id));
    """,
    # 2: windowed renders keep their start across reopen.
    """
    ALTER TABLE branch_state ADD COLUMN anchor INTEGER;
    """,
    # 3: finding a kind (the latest fold summary, notices) reads O(found), not O(history).
    # Partial: most messages have no kind, so the index stays small.
    """
    CREATE INDEX IF NOT EXISTS messages_by_kind ON messages (ns, branch, kind, seq)
        WHERE kind IS NOT NULL;
    """,
    # 4: a lower release pending over an earlier reported one remembers where that one began.
    """
    ALTER TABLE releases ADD COLUMN reported_from INTEGER;
    """,
    # 5: what the last committing compile left out without releasing (binding v2, SPEC 7).
    """
    CREATE TABLE left_out (ns TEXT NOT NULL, branch TEXT NOT NULL, message_id TEXT NOT NULL,
        block INTEGER NOT NULL, PRIMARY KEY (ns, branch, message_id, block));
    ALTER TABLE releases ADD COLUMN at_seq INTEGER;
    """,
    # 6: the anchored head of each branch, one row per re-anchoring (append-only, SPEC 7b).
    """
    CREATE TABLE anchored_heads (ns TEXT NOT NULL, branch TEXT NOT NULL, at_seq INTEGER NOT NULL,
        head TEXT NOT NULL, PRIMARY KEY (ns, branch, at_seq));
    """,
    # 7: the sequence each block was first left out at, so a branch made at an earlier point
    # inherits the left-out set as of its fork point only (SPEC 5); NULL: before this version.
    """
    ALTER TABLE left_out ADD COLUMN at_seq INTEGER;
    """,
    # 8: every block a release started at, with its sequence, so a branch made between two
    # releases of one reply inherits the earlier one (SPEC 5).
    """
    CREATE TABLE release_history (ns TEXT NOT NULL, branch TEXT NOT NULL,
        message_id TEXT NOT NULL, from_block INTEGER NOT NULL, at_seq INTEGER,
        PRIMARY KEY (ns, branch, message_id, from_block));
    INSERT INTO release_history (ns, branch, message_id, from_block, at_seq)
        SELECT ns, branch, message_id, from_block, at_seq FROM releases;
    """,
    # 9: how many binding-record writes each agent has had, so a process that keeps a render
    # sees another process's releases and reports (``serials``).
    """
    CREATE TABLE binding_serials (ns TEXT PRIMARY KEY, serial INTEGER NOT NULL);
    """,
    # 10: each branch's render snapshot (derived: a compile restores it instead of rendering).
    """
    CREATE TABLE renders (ns TEXT NOT NULL, branch TEXT NOT NULL, header TEXT NOT NULL,
        blob BLOB NOT NULL, PRIMARY KEY (ns, branch));
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

SQL_VARIABLES_PER_QUERY = 500
"""Well under SQLite's host-parameter limit (999 on old builds)."""
