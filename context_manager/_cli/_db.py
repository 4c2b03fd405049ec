"""Opening the command line's files: refuse bad ones before anything is created or written.

Every check here reads the file through a read-only SQLite connection first, so a missing file is
never created, a foreign one is never touched, and a newer schema is never migrated. Readers never
migrate either: an older file is read through a migrated temporary copy. A ``postgresql://`` URI
is probed the same way, in one read-only snapshot, before the store opens it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

from context_manager._model._errors import CommandLineError, ContextManagerError
from context_manager._reasoning._store import APPLICATION_ID as SIDECAR_APPLICATION_ID
from context_manager._reasoning._store import SCHEMA_VERSION as SIDECAR_SCHEMA_VERSION
from context_manager._reasoning._store import SQLiteReasoningStore
from context_manager._store._postgres import INSTALL_HINT, PostgresStore
from context_manager._store._postgres_connection import _describe, _first_line
from context_manager._store._postgres_schema import SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION
from context_manager._store._postgres_schema import probe
from context_manager._store._sqlite import APPLICATION_ID, SCHEMA_VERSION, SQLiteStore

SIDECAR_SUFFIX = ".reasoning"
"""The command line keeps an agent database's reasoning sidecar beside it: ``agent.db`` ->
``agent.db.reasoning`` (``demo`` and ``run`` write it, ``transcript --reasoning`` reads it)."""


CliError = CommandLineError
"""Bad input the command line reports in one line on stderr, exiting with status 2."""


def sidecar_path(database: str | os.PathLike[str]) -> Path:
    """Where the command line keeps ``database``'s reasoning sidecar."""
    return Path(os.fspath(database) + SIDECAR_SUFFIX)


def _probe(path: Path, what: str) -> tuple[int, int, int] | None:
    """``(application id, schema version, tables)`` read without writing; ``None``: no file.

    Raises:
        CliError: the path is a directory, cannot be read, or is not an SQLite database.
    """
    if not path.exists():
        return None
    if path.is_dir():
        raise CliError(f"{path}: is a directory, not {what}")
    if not os.access(path, os.R_OK):
        raise CliError(f"{path}: cannot read it (permission denied)")
    try:
        probe = _read_only(path)
    except sqlite3.Error as err:
        raise CliError(f"{path}: cannot open it ({err})") from err
    try:
        row = probe.execute(
            "SELECT (SELECT application_id FROM pragma_application_id()), "
            "(SELECT user_version FROM pragma_user_version()), "
            "(SELECT count(*) FROM sqlite_master)"
        ).fetchone()
    except sqlite3.DatabaseError as err:
        raise CliError(f"{path}: not {what} ({err})") from err
    finally:
        probe.close()
    return int(row[0]), int(row[1]), int(row[2])


def _read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot write ``path`` and leaves no file beside it.

    Without a write-ahead log beside it the file is complete, so it is opened as immutable (a
    read-only reader of a WAL database would leave ``-wal`` and ``-shm`` files behind). Whatever
    is accepted through it is checked again, under SQLite's locks, by the store that opens it.
    """
    mode = "ro" if Path(f"{path}-wal").exists() else "ro&immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode={mode}", uri=True)


def _check_ours(
    path: Path, probed: tuple[int, int, int], app_id: int, known: int, what: str
) -> int:
    found_id, version, tables = probed
    if found_id != app_id and (tables or version):
        raise CliError(f"{path}: not {what} (it holds tables this library did not write)")
    if version > known:
        raise CliError(
            f"{path}: schema version {version} is newer than this library knows ({known}); "
            "upgrade context-manager to open it"
        )
    return version


NEW_FILE = "missing"
"""``check_writable``: no file at the path; the store creates it."""
EMPTY_FILE = "empty"
"""``check_writable``: an empty file (zero bytes, or an SQLite file with no tables): a new
database, as SQLite itself treats it. ``run`` says so; ``transcript`` says it holds no agents."""


def _is_empty(probed: tuple[int, int, int]) -> bool:
    _, version, tables = probed
    return version == 0 and tables == 0


def check_writable(path: str | os.PathLike[str]) -> str | None:
    """Refuse ``path`` as an agent database to write, without creating or touching it.

    Returns:
        ``NEW_FILE`` or ``EMPTY_FILE`` when a new database will be made there, else ``None``.

    Raises:
        CliError: the path is unreadable, a directory, another program's file, or newer, or
            its folder does not exist.
    """
    target = Path(path)
    what = "a context-manager database"
    probed = _probe(target, what)
    if probed is None:
        if not target.parent.is_dir():
            raise CliError(f"{target}: its folder {target.parent} does not exist")
        return NEW_FILE
    _check_ours(target, probed, APPLICATION_ID, SCHEMA_VERSION, what)
    return EMPTY_FILE if _is_empty(probed) else None


def no_agents_yet(where: str) -> CliError:
    """A reader's refusal of an empty database: the same words as for one with no agents."""
    return CliError(
        f"{where} holds no agents yet (an empty database; `context-manager run --db {where} "
        "--agent NAME` starts one)"
    )


def open_for_writing(path: str | os.PathLike[str]) -> SQLiteStore:
    """The agent database at ``path``, created when missing (``run`` and ``demo``).

    Raises:
        CliError: see ``check_writable``.
    """
    target = Path(path)
    check_writable(target)
    try:
        return SQLiteStore(target)
    except ContextManagerError as err:
        raise CliError(str(err)) from err


@contextlib.contextmanager
def open_for_reading(path: str | os.PathLike[str]) -> Iterator[SQLiteStore]:
    """The existing agent database at ``path``, never written (``transcript``).

    An older schema is read through a migrated copy in a temporary folder, removed on exit.

    Raises:
        CliError: the file is missing, unreadable, not ours, or newer, or empty (it then holds
            no agents yet, as ``run`` would treat it: a new database).
    """
    target = Path(path)
    what = "a context-manager database"
    probed = _probe(target, what)
    if probed is None:
        raise CliError(f"{target}: no such database")
    version = _check_ours(target, probed, APPLICATION_ID, SCHEMA_VERSION, what)
    if _is_empty(probed):
        raise no_agents_yet(str(target))
    if version == 0:
        raise CliError(f"{target}: not {what} (it has no schema version)")
    if version == SCHEMA_VERSION:
        with _opened(target) as store:
            yield store
        return
    with tempfile.TemporaryDirectory(prefix="context-manager-") as scratch:
        copy = Path(scratch) / target.name
        source = _read_only(target)
        destination = sqlite3.connect(copy)
        try:
            source.backup(destination)
        finally:
            destination.close()
            source.close()
        with _opened(copy) as store:
            yield store


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[SQLiteStore]:
    try:
        store = SQLiteStore(path)
    except ContextManagerError as err:
        raise CliError(str(err)) from err
    try:
        yield store
    finally:
        store.close()


def check_sidecar(path: str | os.PathLike[str]) -> bool:
    """Refuse ``path`` as a reasoning sidecar without creating or touching it; ``False``: missing.

    Raises:
        CliError: the file is unreadable, not a sidecar, or newer.
    """
    target = Path(path)
    what = "a reasoning sidecar"
    probed = _probe(target, what)
    if probed is not None:
        _check_ours(target, probed, SIDECAR_APPLICATION_ID, SIDECAR_SCHEMA_VERSION, what)
    return probed is not None


def open_sidecar(path: str | os.PathLike[str], *, create: bool) -> SQLiteReasoningStore | None:
    """The reasoning sidecar at ``path``; ``None`` when it is missing and ``create`` is false.

    Raises:
        CliError: the file is unreadable, not a sidecar, or newer (nothing is written to it).
    """
    target = Path(path)
    what = "a reasoning sidecar"
    probed = _probe(target, what)
    if probed is None and not create:
        return None
    if probed is not None:
        version = _check_ours(target, probed, SIDECAR_APPLICATION_ID, SIDECAR_SCHEMA_VERSION, what)
        if not create and version == 0:
            raise CliError(f"{target}: not {what} (it is empty)")
        if not create and version < SIDECAR_SCHEMA_VERSION:
            raise CliError(
                f"{target}: schema version {version} is older than this library's "
                f"({SIDECAR_SCHEMA_VERSION}); open it once with `context-manager run` to migrate"
            )
    try:
        return SQLiteReasoningStore(target)
    except ContextManagerError as err:
        raise CliError(str(err)) from err


POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""A database argument starting with one of these is a PostgreSQL connection URI, not a file."""


def is_postgres(database: str | os.PathLike[str]) -> bool:
    """Whether the command line's ``database`` names a PostgreSQL server rather than a file."""
    return os.fspath(database).startswith(POSTGRES_SCHEMES)


def _postgres_version(url: str) -> int:
    """``url``'s schema version (0: empty), probed in one read-only snapshot; refusals as
    ``CliError``."""
    try:
        import psycopg
    except ImportError as err:
        raise CliError(f"{INSTALL_HINT} to use {url.split('://')[0]}:// databases") from err
    where = _describe(psycopg, url)
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            return probe(conn, where)
    except ContextManagerError as err:
        raise CliError(str(err)) from err
    except psycopg.Error as err:
        raise CliError(f"{where}: cannot connect ({_first_line(err)})") from err


def open_postgres(url: str, *, writing: bool) -> PostgresStore:
    """The PostgreSQL store at ``url``: checked before anything is written; readers need an
    existing, current schema (they never create or migrate one).

    Raises:
        CliError: psycopg missing, the server unreachable, the schema foreign, newer, or (for a
            reader) empty or older.
    """
    version = _postgres_version(url)
    if not writing and version == 0:
        raise no_agents_yet(url_for_humans(url))
    if not writing and version < POSTGRES_SCHEMA_VERSION:
        raise CliError(
            f"{url_for_humans(url)}: schema version {version} is older than this library's "
            f"({POSTGRES_SCHEMA_VERSION}); open it once with `context-manager run` to migrate"
        )
    try:
        return PostgresStore(url)
    except ContextManagerError as err:
        raise CliError(str(err)) from err


def url_for_humans(url: str) -> str:
    """``url`` without its password, for messages."""
    import psycopg

    return _describe(psycopg, url)
