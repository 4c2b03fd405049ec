"""The reasoning sidecar: readable thinking text, sealed to the namespace that captured it.

Invariant: a ref is the SHA-256 of its envelope (text + namespace), and ``get`` serves a blob only
to that namespace, and only while its bytes still hash to the ref. Hazard: the text is sensitive
and derived from untrusted input; erase it on its own schedule and never log it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import attrs

from context_manager._model._errors import InvalidValue
from context_manager._model._log import library_logger
from context_manager._store._sqlite_file import connect, open_versioned, transaction

log = library_logger("context_manager.reasoning")

REF_PREFIX = "sha256:"
"""Marks a ref as the SHA-256 of a sealed envelope (room for another scheme later)."""

ENVELOPE_VERSION = 1
"""Written into every envelope so a later format can be told apart from this one."""

APPLICATION_ID = 0x434D5253
"""``PRAGMA application_id`` marking a file as our reasoning sidecar ("CMRS"), so neither the
message store nor any other database is mistaken for one."""

MIGRATIONS: tuple[str, ...] = (
    # 1: the initial schema. ``captured_us`` is the latest capture, in UTC microseconds.
    """
    CREATE TABLE blobs (
        ref TEXT PRIMARY KEY, envelope BLOB NOT NULL, captured_us INTEGER NOT NULL);
    CREATE INDEX blobs_by_capture ON blobs (captured_us);
    CREATE TABLE erasures (value INTEGER NOT NULL);
    INSERT INTO erasures (value) VALUES (0);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

Clock = Callable[[], dt.datetime]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def seal_envelope(namespace: str, text: str) -> tuple[str, bytes]:
    """``(ref, envelope)`` for ``text`` captured by ``namespace``.

    The envelope is canonical JSON (sorted keys, no whitespace, UTF-8), so the same text in the
    same namespace always gives the same ref, and the same text in another namespace never does.
    """
    envelope = json.dumps(
        {"namespace": namespace, "text": text, "v": ENVELOPE_VERSION},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    ).encode("utf-8")
    return REF_PREFIX + hashlib.sha256(envelope).hexdigest(), envelope


def open_envelope(ref: str, envelope: bytes, namespace: str) -> str | None:
    """The text sealed in ``envelope`` when it hashes to ``ref`` and names ``namespace``.

    Returns ``None`` for another namespace ("not yours") and for bytes that no longer match their
    ref (a tampered or corrupt blob; logged, without its content).
    """
    if REF_PREFIX + hashlib.sha256(envelope).hexdigest() != ref:
        log.warning("reasoning_blob_corrupt", ref=ref, note="bytes do not hash to their ref")
        return None
    try:
        data = json.loads(envelope.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        log.warning("reasoning_blob_corrupt", ref=ref, note="envelope is not JSON")
        return None
    if not isinstance(data, dict) or data.get("v") != ENVELOPE_VERSION:
        log.warning("reasoning_blob_corrupt", ref=ref, note="unknown envelope version")
        return None
    text = data.get("text")
    if data.get("namespace") != namespace or not isinstance(text, str):
        return None
    return text


def _check_time(before: dt.datetime) -> int:
    if not isinstance(before, dt.datetime) or before.tzinfo is None:
        raise InvalidValue(
            f"erase_before needs a timezone-aware datetime, got {before!r}; "
            "use e.g. datetime.now(UTC) - timedelta(days=30)"
        )
    return _micros(before)


def _micros(moment: dt.datetime) -> int:
    delta = moment.astimezone(dt.UTC) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@runtime_checkable
class ReasoningStore(Protocol):
    """Where captured thinking text lives, apart from the message store.

    Implementations must keep the module's invariant: refs are content addresses of a sealed
    envelope, and ``get`` never serves one namespace's text to another.
    """

    def put(self, namespace: str, text: str) -> str:
        """Store ``text`` sealed to ``namespace``; returns its ref (the same text, the same ref).

        Raises:
            Exception: any write failure; capture lets it fail the reply (fail-closed).
        """
        ...

    def get(self, ref: str, namespace: str) -> str | None:
        """The text under ``ref`` if sealed to ``namespace``; ``None`` when erased, not yours,
        or no longer matching its ref."""
        ...

    def holds(self, ref: str) -> bool:
        """True when a blob is stored under ``ref``, whichever namespace it is sealed to."""
        ...

    def erase(self, ref: str) -> bool:
        """Delete the blob under ``ref``; returns whether there was one."""
        ...

    def erase_before(self, before: dt.datetime) -> int:
        """Delete every blob last captured before ``before`` (aware); returns how many."""
        ...

    def erase_serial(self) -> int:
        """A number that grows with every erase that deleted something (for cache validity)."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@attrs.define
class _Blob:
    envelope: bytes
    captured_us: int


class MemoryReasoningStore:
    """A ``ReasoningStore`` in a dict: for tests and ephemeral runs (nothing survives the process).

    Args:
        clock: returns the current aware time (default: UTC now); tests pass their own.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or _utc_now
        self._blobs: dict[str, _Blob] = {}
        self._erasures = 0
        self._lock = threading.Lock()

    def put(self, namespace: str, text: str) -> str:
        ref, envelope = seal_envelope(namespace, text)
        with self._lock:
            self._blobs[ref] = _Blob(envelope, _micros(self._clock()))
        return ref

    def get(self, ref: str, namespace: str) -> str | None:
        with self._lock:
            blob = self._blobs.get(ref)
        return None if blob is None else open_envelope(ref, blob.envelope, namespace)

    def holds(self, ref: str) -> bool:
        with self._lock:
            return ref in self._blobs

    def erase(self, ref: str) -> bool:
        with self._lock:
            found = self._blobs.pop(ref, None) is not None
            self._erasures += found
        return found

    def erase_before(self, before: dt.datetime) -> int:
        cutoff = _check_time(before)
        with self._lock:
            old = [ref for ref, blob in self._blobs.items() if blob.captured_us < cutoff]
            for ref in old:
                del self._blobs[ref]
            self._erasures += bool(old)
        return len(old)

    def erase_serial(self) -> int:
        with self._lock:
            return self._erasures

    def close(self) -> None:
        """Nothing to release; kept for the protocol."""

    def _check(self) -> None:
        for ref, blob in self._blobs.items():
            assert ref == REF_PREFIX + hashlib.sha256(blob.envelope).hexdigest()
        assert self._erasures >= 0


class SQLiteReasoningStore:
    """A durable ``ReasoningStore`` in its own SQLite file (WAL, ``synchronous=FULL``).

    The file has its own schema version and application id, apart from the message store's, so
    it can sit on other storage and be erased or backed up on its own schedule. ``secure_delete``
    is on and each erase checkpoints the WAL, so erased text does not linger in free pages.

    Args:
        path: the sidecar file (``":memory:"`` works for experiments).
        clock: returns the current aware time (default: UTC now); tests pass their own.

    Raises:
        NotADatabase: the file is not a reasoning sidecar (e.g. the message store's file).
        SchemaTooNew: the file was written by a newer version of this library.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self.path = os.fspath(path)
        self._clock = clock or _utc_now
        self._lock = threading.RLock()
        self._db = connect(self.path)
        try:
            open_versioned(
                self._db,
                self.path,
                application_id=APPLICATION_ID,
                migrations=MIGRATIONS,
                pragmas=(
                    "PRAGMA journal_mode=WAL",
                    "PRAGMA synchronous=FULL",
                    "PRAGMA secure_delete=ON",
                ),
                foreign="it is not a reasoning sidecar",
            )
        except BaseException:
            self._db.close()
            raise

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return transaction(self._db, self._lock, self.path)

    def put(self, namespace: str, text: str) -> str:
        ref, envelope = seal_envelope(namespace, text)
        with self._transaction() as db:
            db.execute(
                "INSERT INTO blobs (ref, envelope, captured_us) VALUES (?, ?, ?) "
                "ON CONFLICT (ref) DO UPDATE SET captured_us = excluded.captured_us",
                (ref, envelope, _micros(self._clock())),
            )
        return ref

    def get(self, ref: str, namespace: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT envelope FROM blobs WHERE ref = ?", (ref,)).fetchone()
        return None if row is None else open_envelope(ref, _as_bytes(row[0]), namespace)

    def holds(self, ref: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT 1 FROM blobs WHERE ref = ?", (ref,)).fetchone()
        return row is not None

    def erase(self, ref: str) -> bool:
        return self._erase("DELETE FROM blobs WHERE ref = ?", ref) > 0

    def erase_before(self, before: dt.datetime) -> int:
        return self._erase("DELETE FROM blobs WHERE captured_us < ?", _check_time(before))

    def _erase(self, sql: str, arg: object) -> int:
        with self._transaction() as db:
            count = db.execute(sql, (arg,)).rowcount
            if count:
                db.execute("UPDATE erasures SET value = value + 1")
        if count:
            with self._lock:
                # Best effort: a reader holding an old snapshot keeps those frames until it ends.
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(count)

    def erase_serial(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT value FROM erasures").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _check(self) -> None:
        with self._lock:
            rows = self._db.execute("SELECT ref, envelope FROM blobs").fetchall()
        for ref, envelope in rows:
            assert ref == REF_PREFIX + hashlib.sha256(_as_bytes(envelope)).hexdigest()


def _as_bytes(value: str | bytes | memoryview) -> bytes:
    """A stored envelope as bytes; an edited row may come back as TEXT (then it fails its ref)."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)
