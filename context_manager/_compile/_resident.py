"""The per-process bound on cached renders: the least recently compiled branch goes first.

A host keeps many resident agents in one process; each compiled branch keeps its render (the
request's messages, their encoded blocks, the window's stored messages). This module counts their
bytes across every manager and, over the bound, drops the least recently compiled branch's
render; its next compile re-renders it from the store. Process-global, guarded by a lock.
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_RENDER_CACHE_BYTES = 64 * 2**20
"""The default bound: 64 MiB of rendered request bytes (about 60 windows of 1.1 MB). What is
counted is the encoded blocks' bytes; the process holds several times that in Python objects
for the same renders (the benchmark's ``cache_bytes_per_agent`` measures the factor)."""


class Holder(Protocol):
    """Something that keeps cached renders by branch key (the compiler)."""

    def drop_render(self, key: str) -> None: ...


_lock = threading.Lock()
_entries: OrderedDict[tuple[int, str], tuple[weakref.ref[Holder], int]] = OrderedDict()
_total = 0
_limit = DEFAULT_RENDER_CACHE_BYTES
_watched: set[int] = set()
_departed: deque[int] = deque()
"""Holders gone since the last sweep (appended by their finalizers, without the lock)."""


def set_render_cache_limit(limit_bytes: int) -> None:
    """Bound the bytes of cached renders kept in this process (0: keep none).

    Over the bound, the least recently compiled branches' renders are dropped at once.

    Raises:
        ValueError: ``limit_bytes`` is negative.
    """
    global _limit
    if limit_bytes < 0:
        raise ValueError(f"the render cache limit must be 0 or more bytes, got {limit_bytes!r}")
    with _lock:
        _sweep()
        _limit = limit_bytes
        victims = _evict()
    _drop(victims)


def render_cache_limit() -> int:
    """The bound on cached render bytes in this process."""
    return _limit


def render_cache_bytes() -> int:
    """The bytes of cached renders this process keeps now."""
    with _lock:
        _sweep()
        return _total


def note(holder: Holder, key: str, size: int) -> None:
    """``holder`` just compiled branch ``key`` and keeps ``size`` bytes for it; evict over the
    bound, least recently compiled first (possibly this one, when it alone is over)."""
    global _total
    owner = id(holder)
    with _lock:
        _sweep()
        if owner not in _watched:
            _watched.add(owner)
            weakref.finalize(holder, _gone, owner)
        old = _entries.pop((owner, key), None)
        if old is not None:
            _total -= old[1]
        _entries[(owner, key)] = (weakref.ref(holder), size)
        _total += size
        victims = _evict()
    _drop(victims)


def forget(holder: Holder, key: str) -> None:
    """``holder`` dropped branch ``key``'s render itself."""
    global _total
    with _lock:
        old = _entries.pop((id(holder), key), None)
        if old is not None:
            _total -= old[1]


def _evict() -> list[tuple[weakref.ref[Holder], str]]:
    global _total
    victims: list[tuple[weakref.ref[Holder], str]] = []
    while _total > _limit and _entries:
        (_, key), (ref, size) = _entries.popitem(last=False)
        _total -= size
        victims.append((ref, key))
    return victims


def _drop(victims: list[tuple[weakref.ref[Holder], str]]) -> None:
    for ref, key in victims:
        holder = ref()
        if holder is not None:
            holder.drop_render(key)


def _gone(owner: int) -> None:
    # A finalizer: it can run inside ``note`` (a collection started by an allocation there), so
    # it never takes the lock; the next call under the lock removes the owner's entries.
    _departed.append(owner)


def _sweep() -> None:
    """Remove the entries of holders that are gone (call with the lock held)."""
    global _total
    while _departed:
        owner = _departed.popleft()
        _watched.discard(owner)
        for entry in [e for e in _entries if e[0] == owner]:
            _total -= _entries.pop(entry)[1]


def paused_collector(build: Callable[P, R]) -> Callable[P, R]:
    """Run ``build`` with the cyclic garbage collector paused (restored after, as it was).

    A render builds tens of thousands of objects that all stay alive (the cached window); each
    allocation burst would otherwise start collections that walk the whole heap, every resident
    agent's cache included, and find nothing to free. Reference counting still frees everything
    at once; cycles made meanwhile wait for the next collection. The pause is process-wide: a
    host thread allocating meanwhile is not collected until the render ends (milliseconds).
    """

    @functools.wraps(build)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            return build(*args, **kwargs)
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            gc.enable()

    return paused
