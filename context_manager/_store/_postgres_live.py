"""Live events between processes over PostgreSQL: ``NOTIFY`` from one host, ``LISTEN`` in another.

Invariants: the channel is named from the store's schema (a SHA-256 digest of it), so two stores
sharing one database never hear each other; a payload is at most ``NOTIFY_MAX`` bytes (the
server refuses 8000 or more); nothing is stored: a listener that is not connected misses what is
sent meanwhile. The listener runs in its own thread on its own connection and hands each payload
to a callback; a callback that raises is logged and the listening goes on.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from context_manager._model._errors import InvalidValue
from context_manager._model._log import library_logger

from ._postgres import PostgresStore

log = library_logger("context_manager.store")

LIVE_CHANNEL_PREFIX = "cm_live_"
NOTIFY_MAX = 7000
"""Bytes per payload: below the server's 8000-byte limit on ``NOTIFY``."""
POLL_SECONDS = 0.2
"""How often the listener thread looks whether it was asked to stop."""


def live_channel(store: PostgresStore) -> str:
    """The store's channel: ``cm_live_`` and 16 hex digits of its schema's digest."""
    with store._connection() as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
    schema = str(row[0]) if row else ""
    return LIVE_CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:16]


def notify(store: PostgresStore, channel: str, payloads: Sequence[str]) -> None:
    """Send each payload on ``channel``, in order, on one pooled connection.

    Raises:
        ValueError: a payload is longer than ``NOTIFY_MAX`` bytes in UTF-8.
        StoreUnavailable: the server cannot be reached.
    """
    for payload in payloads:
        if len(payload.encode("utf-8")) > NOTIFY_MAX:
            raise InvalidValue(f"a NOTIFY payload is at most {NOTIFY_MAX} bytes; split it")
    with store._connection() as conn:
        for payload in payloads:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


class Listener:
    """``LISTEN`` on ``channel`` in a thread; ``heard(payload)`` for each notification.

    Start with ``start()``; ``stop()`` ends the thread and closes its connection.
    """

    def __init__(self, store: PostgresStore, channel: str, heard: Callable[[str], None]) -> None:
        self._store = store
        self.channel = channel
        self._heard = heard
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Connect and listen; returns once ``LISTEN`` is in place.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        self._thread = threading.Thread(target=self._run, name="cm-live-listener", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _connect(self) -> Any:
        holds = self._store._holds
        conn = self._store._psycopg.connect(
            holds._conninfo, **{**holds._kwargs, "autocommit": True}
        )
        conn.execute(f'LISTEN "{self.channel}"')
        return conn

    def _run(self) -> None:
        try:
            conn = self._connect()
        except Exception as err:
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                for note in conn.notifies(timeout=POLL_SECONDS):
                    self._deliver(str(note.payload))
        except Exception as err:  # the server went away: the live view stops, durable stays
            log.warning("live_listener_stopped", channel=self.channel, error=repr(err))
        finally:
            conn.close()

    def _deliver(self, payload: str) -> None:
        try:
            self._heard(payload)
        except Exception as err:
            log.warning("live_listener_callback_failed", channel=self.channel, error=repr(err))
