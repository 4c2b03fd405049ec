"""Opening a versioned SQLite file of ours: identify it, refuse foreign or newer files, migrate.

Shared by the message store and the reasoning sidecar. The file is identified in one snapshot
(another process may be migrating it right now); nothing is written before it is known to be
ours and not newer. Each forward-only migration runs in its own ``BEGIN IMMEDIATE`` transaction
and is skipped when another connection ran it while this one waited.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence

from context_manager._model._errors import (
    DamagedDatabase,
    NotADatabase,
    SchemaTooNew,
    StoreBusy,
    StorePathError,
)

BUSY_TIMEOUT_SECONDS = 30.0
"""How long a writer waits for another process's transaction before giving up."""

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""

HEADER_BYTES = 100
"""The size of a SQLite file's header."""


def check_path(path: str) -> None:
    """Refuse a path that cannot hold a database file, naming why.

    Raises:
        StorePathError: ``path`` is a folder, or its folder does not exist.
    """
    if path == ":memory:" or path.startswith("file:"):
        return
    if os.path.isdir(path):
        raise StorePathError(
            path, "is a folder, not a database file; give a file path (e.g. a .db inside it)"
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StorePathError(
            path, f"the folder {folder} does not exist; create it first or give another path"
        )


def connect(path: str, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), shareable across threads.

    ``busy_timeout``: seconds a write waits for another connection's write lock.

    Raises:
        StorePathError: ``path`` is a folder or its folder is missing.
        NotADatabase: SQLite cannot open ``path``.
    """
    check_path(path)
    try:
        return sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
    except sqlite3.Error as err:
        raise NotADatabase(path, str(err)) from err


def damage(path: str) -> str | None:
    """Why a file that starts as a SQLite database is damaged (cut short), or ``None``.

    A SQLite file's header gives its page size and page count; a file shorter than that, or
    than its header, was truncated.
    """
    try:
        with open(path, "rb") as file:
            header = file.read(HEADER_BYTES)
        size = os.path.getsize(path)
    except OSError:
        return None
    if not header.startswith(SQLITE_HEADER):
        return None
    if len(header) < HEADER_BYTES:
        return f"the file is cut short: {size} bytes, less than a SQLite header"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if pages and size < page_size * pages:
        return f"the file is cut short: {size} bytes, its header says {page_size * pages}"
    return None


def _opening_error(path: str, err: sqlite3.DatabaseError) -> NotADatabase:
    cut = damage(path)
    if cut is not None:
        return DamagedDatabase(path, f"{cut}; restore it from a backup")
    if "malformed" in str(err):
        return DamagedDatabase(path, f"the file is corrupted ({err}); restore it from a backup")
    return NotADatabase(path, str(err))


def busy_guard(path: str, db: sqlite3.Connection) -> contextlib.AbstractContextManager[None]:
    """Turn SQLite's ``database is locked`` into ``StoreBusy`` naming ``path``."""
    return _busy(path, db)


@contextlib.contextmanager
def _busy(path: str, db: sqlite3.Connection) -> Iterator[None]:
    try:
        yield
    except sqlite3.OperationalError as err:
        if "locked" not in str(err) and "busy" not in str(err):
            raise
        timeout = db.execute("PRAGMA busy_timeout").fetchone()[0] / 1000
        raise StoreBusy(path, timeout) from err


@contextlib.contextmanager
def transaction(
    db: sqlite3.Connection, lock: threading.RLock, path: str = ""
) -> Iterator[sqlite3.Connection]:
    """One all-or-nothing write: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if it raises.

    Inside an open transaction (a store's ``batch()``) it is a savepoint instead, so each write
    stays whole and the batch commits once.

    Raises:
        StoreBusy: another connection held the write lock past the busy timeout.
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
        with busy_guard(path, db):
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
        raise _opening_error(path, err) from err
    if found_id != application_id and tables:
        raise NotADatabase(path, foreign)
    if found_id != application_id and version:
        raise NotADatabase(
            path,
            f"it holds no tables, but its user_version is {version} and its application_id "
            f"{found_id}, not ours: another program set them; give a new path or an empty file",
        )
    if version > len(migrations):
        raise SchemaTooNew(path, version, len(migrations))
    with busy_guard(path, db):
        for pragma in pragmas:
            db.execute(pragma)
    for number in range(version, len(migrations)):
        with busy_guard(path, db):
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
