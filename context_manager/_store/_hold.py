"""Holds: a lease on one agent for a whole turn, across threads, tasks, processes and hosts.

A hold is not a database transaction: writes made while holding commit one by one as usual (so the
compiler's cache, which checks the store's change serial, stays correct), and no transaction or
write lock is open across a model call. Invariants: at most one hold on a namespace at a time per
store (per database for SQLite and PostgreSQL); a waiter gives up after its timeout with
``AgentBusy`` naming the holder; a hold dies with the process that took it (the kernel drops a file
lock, the server an advisory lock of a closed session), so a killed holder never blocks the agent.
A hold taken again in the same task (or thread) on the same store and namespace is re-entered, not
waited for. Hazard: a hold only keeps out others that hold; a plain write does not wait for it.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs

from context_manager._model._errors import AgentBusy, InvalidValue
from context_manager._model._log import library_logger

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: SQLite holds are per process only
    fcntl = None  # type: ignore[assignment]

log = library_logger("context_manager.store")

HOLD_TIMEOUT_SECONDS = 30.0
"""How long ``hold`` waits for another holder by default (``PostgresStore``: its
``lock_timeout``)."""

_POLL_SECONDS = (0.01, 0.2)
"""A file-lock waiter polls, starting at the first and backing off to the second."""

_HELD: contextvars.ContextVar[tuple[tuple[tuple[int, str], object, Hold], ...]] = (
    contextvars.ContextVar("context_manager_holds", default=())
)
"""The holds entered in this context: ``((store id, namespace), owner, hold)``. A task created
inside a hold inherits this; re-entry also asks that the owner (task or thread) is the same and
the hold still taken, so such a task, or one outliving the hold, waits like anyone else."""


def _owner() -> object:
    """The asyncio task running now, or else this thread's id."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task if task is not None else threading.get_ident()


def holder_identity(label: str | None = None) -> str:
    """Who a hold says holds it: ``LABEL@HOST:PID`` (``LABEL`` defaults to ``context-manager``).

    >>> holder_identity("worker-3").startswith("worker-3@")
    True
    """
    return f"{label or 'context-manager'}@{socket.gethostname()}:{os.getpid()}"


class Hold(abc.ABC):
    """A lease on one agent (namespace): ``with`` or ``async with``; see ``Store.hold``.

    Entering waits up to ``timeout`` seconds for another holder, then raises ``AgentBusy``
    naming it. ``async with`` waits in a thread of its own, so the event loop keeps running (and
    many waiters never fill its executor); a cancelled waiter lets go of whatever it took after
    all. Leaving releases the hold.
    """

    def __init__(self, owner: object, namespace: str, timeout: float, holder: str) -> None:
        if timeout < 0:
            raise InvalidValue(f"a hold timeout is seconds, at least 0; got {timeout!r}")
        self.namespace = namespace
        self.timeout = float(timeout)
        self.holder = holder
        self._key = (id(owner), namespace)
        self._token: contextvars.Token[Any] | None = None
        self._taken = False

    @abc.abstractmethod
    def _acquire(self) -> str | None:
        """Take the hold within ``self.timeout``: ``None`` when taken, else the holder's
        description."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Let go of a hold ``_acquire`` took (never raises for a hold already lost)."""

    def _take(self) -> None:
        busy = self._acquire()
        if busy is not None:
            log.warning("agent_busy", namespace=self.namespace, holder=busy)
            raise AgentBusy(self.namespace, busy, self.timeout, setting="hold_timeout")
        self._taken = True

    def _reentered(self) -> bool:
        me = _owner()
        return any(
            key == self._key and owner == me and hold._taken for key, owner, hold in _HELD.get()
        )

    def _mark(self) -> None:
        self._token = _HELD.set((*_HELD.get(), (self._key, _owner(), self)))

    def _unmark(self) -> None:
        if self._token is not None:
            _HELD.reset(self._token)
            self._token = None
        self._let_go()

    def __enter__(self) -> Hold:
        if not self._reentered():
            self._take()
            self._mark()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._unmark()

    async def __aenter__(self) -> Hold:
        if self._reentered():
            return self
        loop = asyncio.get_running_loop()
        taken: asyncio.Future[None] = loop.create_future()
        abandoned = threading.Event()

        def wait() -> None:  # a thread of its own: waiters never fill the loop's executor
            outcome: BaseException | None = None
            try:
                self._take()
            except BaseException as err:  # handed to the waiting task
                outcome = err
            if outcome is None and abandoned.is_set():
                self._let_go()
                return
            try:
                loop.call_soon_threadsafe(self._settle, taken, outcome)
            except RuntimeError:  # the loop closed meanwhile: nobody will use the hold
                if outcome is None:
                    self._let_go()

        threading.Thread(target=wait, name="context-manager-hold", daemon=True).start()
        try:
            await taken
        except asyncio.CancelledError:
            abandoned.set()  # a hold taken after all is let go (here or in ``_settle``)
            raise
        self._mark()
        return self

    def _settle(self, taken: asyncio.Future[None], outcome: BaseException | None) -> None:
        if taken.cancelled():
            if outcome is None:
                self._let_go()
        elif outcome is None:
            taken.set_result(None)
        else:
            taken.set_exception(outcome)

    def _let_go(self) -> None:
        if self._taken:
            self._taken = False
            self._release()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._token is not None:
            _HELD.reset(self._token)
            self._token = None
        if self._taken:
            self._taken = False
            await asyncio.to_thread(self._release)


@attrs.define
class _Lease:
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    holder: str = ""
    since: float = 0.0


class LocalHolds:
    """The holds of a store that lives in one process (``MemoryStore``, ``SQLite ':memory:'``)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._leases: dict[str, _Lease] = {}

    def hold(self, owner: object, namespace: str, timeout: float, holder: str) -> Hold:
        with self._guard:
            lease = self._leases.setdefault(namespace, _Lease())
        return _LocalHold(owner, namespace, timeout, holder, lease)


class _LocalHold(Hold):
    def __init__(
        self, owner: object, namespace: str, timeout: float, holder: str, lease: _Lease
    ) -> None:
        super().__init__(owner, namespace, timeout, holder)
        self._lease = lease

    def _acquire(self) -> str | None:
        if not self._lease.lock.acquire(timeout=self.timeout):
            return _described(self._lease.holder, self._lease.since)
        self._lease.holder, self._lease.since = self.holder, time.time()
        return None

    def _release(self) -> None:
        self._lease.lock.release()


class FileHold(Hold):
    """A hold as an exclusive ``flock`` on a file beside the database, one file per namespace.

    The kernel drops the lock when the holder's process ends, however it ends. The file names
    its holder (JSON: holder, namespace, since) so a waiter can say who it waited for.
    """

    def __init__(
        self, owner: object, database: str, namespace: str, timeout: float, holder: str
    ) -> None:
        super().__init__(owner, namespace, timeout, holder)
        self.path = hold_file(database, namespace)
        self._fd: int | None = None

    def _acquire(self) -> str | None:
        assert fcntl is not None
        self.path.parent.mkdir(exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        pause = _POLL_SECONDS[0]
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    busy = self._read_holder(fd)
                    os.close(fd)
                    return busy
                time.sleep(min(pause, left))
                pause = min(pause * 2, _POLL_SECONDS[1])
        record = {"holder": self.holder, "namespace": self.namespace, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd
        return None

    def _read_holder(self, fd: int) -> str:
        try:
            record = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return _described(str(record["holder"]), float(record["since"]))
        except (OSError, ValueError, KeyError, TypeError):
            return _described("", 0.0)

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock


def hold_file(database: str, namespace: str) -> Path:
    """The file ``FileHold`` locks for ``namespace`` of the SQLite file ``database``."""
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:24]
    return Path(f"{database}-holds") / f"{digest}.hold"


def discard_hold_file(database: str, namespace: str) -> None:
    """Remove a dropped namespace's hold file, unless someone holds it right now.

    Only for a namespace nobody will hold again (an ephemeral run's): a waiter that opened the
    file before it went would lock the removed file, apart from a later holder.
    """
    if fcntl is None:
        return
    path = hold_file(database, namespace)
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
    except OSError:  # held, or already gone: leave it
        pass
    finally:
        os.close(fd)


def file_holds_work() -> bool:
    """Whether this platform has ``flock`` (POSIX); elsewhere SQLite holds are per process."""
    return fcntl is not None


def _described(holder: str, since: float) -> str:
    if not holder:
        return "another holder (it has let go since, or did not say who it is)"
    held = f" (held {max(0.0, time.time() - since):.1f} s)" if since else ""
    return f"{holder!r}{held}"
