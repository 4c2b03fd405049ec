"""Opening a versioned SQLite file of ours: identify it, refuse foreign or newer files, migrate.

Shared by the message store and the reasoning sidecar. The file is identified in one snapshot
(another process may be migrating it right now); nothing is written before it is known to be
ours and not newer. Each forward-only migration runs in its own ``BEGIN IMMEDIATE`` transaction
and is skipped when another connection ran it while this one waited.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from context_manager._model._errors import NotADatabase, SchemaTooNew

BUSY_TIMEOUT_SECONDS = 30.0
"""How long a writer waits for another process's transaction before giving up."""


def connect(path: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), shareable across threads.

    Raises:
        NotADatabase: SQLite cannot open ``path``.
    """
    try:
        return sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_SECONDS
        )
    except sqlite3.Error as err:
        raise NotADatabase(path, str(err)) from err


@contextlib.contextmanager
def transaction(db: sqlite3.Connection, lock: threading.RLock) -> Iterator[sqlite3.Connection]:
    """One all-or-nothing write: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if it raises.

    Inside an open transaction (a store's ``batch()``) it is a savepoint instead, so each write
    stays whole and the batch commits once.
    """
    with lock:
        if db.in_transaction:
            db.execute("SAVEPOINT write")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK TO write")
                db.execute("RELEASE write")
                raise
            db.execute("RELEASE write")
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


def open_versioned(
    db: sqlite3.Connection,
    path: str,
    *,
    application_id: int,
    migrations: Sequence[str],
    pragmas: Sequence[str],
    foreign: str,
) -> None:
    """Check that ``db`` is ours and not newer, set ``pragmas``, and run pending ``migrations``.

    Args:
        application_id: the ``PRAGMA application_id`` marking the file's kind as ours.
        migrations: SQL scripts, one per schema version, statements separated by ``;``.
        pragmas: statements run once the file is known to be ours (journal mode, sync, ...).
        foreign: what ``NotADatabase`` says when the file holds someone else's tables.

    Raises:
        NotADatabase: not a SQLite file, or one with tables this library did not write.
        SchemaTooNew: written by a newer version; nothing was written.
    """
    try:
        found_id, version, tables = db.execute(
            "SELECT (SELECT application_id FROM pragma_application_id()), "
            "(SELECT user_version FROM pragma_user_version()), "
            "(SELECT count(*) FROM sqlite_master)"
        ).fetchone()
    except sqlite3.DatabaseError as err:
        raise NotADatabase(path, str(err)) from err
    if found_id != application_id and (tables or version):
        raise NotADatabase(path, foreign)
    if version > len(migrations):
        raise SchemaTooNew(path, version, len(migrations))
    for pragma in pragmas:
        db.execute(pragma)
    for number in range(version, len(migrations)):
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] <= number:
                for statement in migrations[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")
                db.execute(f"PRAGMA application_id = {application_id}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
