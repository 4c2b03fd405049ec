"""The per-process bound on cached renders, in two tiers, least recently compiled first.

A host keeps many resident agents in one process; each compiled branch keeps its render. A
render is kept in one of two forms:

- **hot**: the request's messages as Python dicts (and the encoded blocks of the window), what a
  steady compile extends in microseconds. Hot are the branch whose render was last built from
  the store (the newest) and, least recently compiled first, the branches compiled again while
  cached, up to ``hot_bytes`` of rendered bytes.
- **compact**: one compressed ``bytes`` object per branch; a branch pushed out of the hot tier is
  compacted (its Python objects freed), and its next compile restores it in milliseconds.

Over ``limit_bytes`` (hot and compact sizes together), the least recently compiled branch's
render is dropped; its next compile re-renders it from the store. Process-global, guarded by a
lock; the holders' own work (compacting, dropping) runs outside it.
"""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Literal, ParamSpec, Protocol, TypeVar

import attrs

from context_manager._model._errors import InvalidValue

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_RENDER_CACHE_BYTES = 64 * 2**20
"""The default bound on everything kept: 64 MiB, counted as each hot render's encoded bytes
(about its request's wire bytes) and each compact render's compressed bytes."""

DEFAULT_HOT_SHARE = 4
"""By default a quarter of the bound may be hot (16 MiB of rendered requests: about 15 windows
of 1.1 MB kept as dicts, several times that in Python objects)."""

Tier = Literal["hot", "compact"]


class Holder(Protocol):
    """Something that keeps cached renders by branch key (the compiler)."""

    def drop_render(self, key: str) -> None: ...

    def compact_render(self, key: str) -> int | None:
        """Keep ``key``'s render compact; its compact size (``None``: nothing is kept)."""


Key = tuple[int, str]


@attrs.define
class _Entry:
    ref: weakref.ref[Holder]
    size: int
    tier: Tier


_lock = threading.Lock()
_entries: OrderedDict[Key, _Entry] = OrderedDict()
"""Every kept render, least recently compiled first."""
_hot: OrderedDict[Key, None] = OrderedDict()
"""Branches compiled again while cached, least recently compiled first (the hot tier)."""
_newest: Key | None = None
"""The branch whose render was last built from the store: hot until another one is."""
_total = 0
_hot_total = 0
"""The sizes of the hot tier's entries that are hot (kept as it changes: O(1) per compile)."""
_limit = DEFAULT_RENDER_CACHE_BYTES
_hot_limit = DEFAULT_RENDER_CACHE_BYTES // DEFAULT_HOT_SHARE
_watched: set[int] = set()
_departed: deque[int] = deque()
"""Holders gone since the last sweep (appended by their finalizers, without the lock)."""

Victims = list[tuple[weakref.ref[Holder], str, Tier]]
"""Renders to drop (``"hot"`` as the tier) or to compact (``"compact"``)."""


def set_render_cache_limit(limit_bytes: int, *, hot_bytes: int | None = None) -> None:
    """Bound the bytes of cached renders kept in this process (0: keep none).

    ``hot_bytes`` bounds the part kept as Python objects, ready for a steady compile (default:
    a quarter of ``limit_bytes``); past it, the least recently compiled branches are kept
    compact (compressed bytes, restored at their next compile). Over ``limit_bytes``, the least
    recently compiled branches' renders are dropped at once.

    Raises:
        ValueError: ``limit_bytes`` or ``hot_bytes`` is negative.
    """
    global _limit, _hot_limit
    if limit_bytes < 0:
        raise InvalidValue(f"the render cache limit must be 0 or more bytes, got {limit_bytes!r}")
    if hot_bytes is not None and hot_bytes < 0:
        raise InvalidValue(f"the hot render bytes must be 0 or more, got {hot_bytes!r}")
    with _lock:
        _sweep()
        _limit = limit_bytes
        _hot_limit = limit_bytes // DEFAULT_HOT_SHARE if hot_bytes is None else hot_bytes
        victims = _evict()
    _act(victims)


def render_cache_limit() -> int:
    """The bound on cached render bytes in this process."""
    return _limit


def render_cache_bytes() -> int:
    """The bytes of cached renders this process keeps now (hot and compact)."""
    with _lock:
        _sweep()
        return _total


def admit(holder: Holder, key: str) -> None:
    """``holder`` is about to build branch ``key``'s render from the store: it becomes the
    newest, and the previous newest, unless compiled again since (hot tier), is compacted now,
    before the new render is built (so no more than one is built beside the hot tier)."""
    global _newest
    at = (id(holder), key)
    victims: Victims = []
    with _lock:
        _sweep()
        previous, _newest = _newest, at
        entry = _entries.get(previous) if previous is not None else None
        fresh = previous != at and previous not in _hot
        if entry is not None and entry.tier == "hot" and fresh and previous is not None:
            entry.tier = "compact"
            victims.append((entry.ref, previous[1], "compact"))
    _act(victims)


def note(holder: Holder, key: str, size: int, *, repeat: bool) -> None:
    """``holder`` just compiled branch ``key`` and keeps ``size`` bytes for it, hot.

    ``repeat``: the branch was cached (hot or compact) before this compile; it joins the hot
    tier (otherwise it was built from the store, after ``admit``). Branches pushed out of the
    hot tier are compacted; over the bound, the least recently compiled are dropped (possibly
    this one, when it alone is over).
    """
    global _total, _newest, _hot_total
    owner = id(holder)
    at = (owner, key)
    with _lock:
        _sweep()
        if owner not in _watched:
            _watched.add(owner)
            weakref.finalize(holder, _gone, owner)
        _unhot(at)
        old = _entries.pop(at, None)
        if old is not None:
            _total -= old.size
        _entries[at] = _Entry(weakref.ref(holder), size, "hot")
        _total += size
        if repeat:
            _hot[at] = None
            _hot_total += size
        elif _newest != at:  # built without ``admit``: the newest all the same
            _newest = at
        victims = _evict()
    _act(victims)


def forget(holder: Holder, key: str) -> None:
    """``holder`` dropped branch ``key``'s render itself."""
    with _lock:
        _remove((id(holder), key))


def _unhot(at: Key) -> None:
    """Take ``at`` out of the hot tier (call with the lock held)."""
    global _hot_total
    if at in _hot:
        del _hot[at]
        entry = _entries.get(at)
        if entry is not None and entry.tier == "hot":
            _hot_total -= entry.size


def _remove(at: Key) -> _Entry | None:
    global _total, _newest
    _unhot(at)
    old = _entries.pop(at, None)
    if _newest == at:
        _newest = None
    if old is not None:
        _total -= old.size
    return old


def _evict() -> Victims:
    """What to compact and what to drop now (call with the lock held)."""
    victims: Victims = []
    while _hot and _hot_total > _hot_limit:
        at = next(iter(_hot))
        _unhot(at)
        entry = _entries[at]
        if entry.tier == "hot":
            entry.tier = "compact"
            victims.append((entry.ref, at[1], "compact"))
    while _total > _limit and _entries:
        at, entry = next(iter(_entries.items()))
        _remove(at)
        victims.append((entry.ref, at[1], "hot"))
    return victims


def _act(victims: Victims) -> None:
    """Compact or drop ``victims`` (outside the lock: it is the holders' own work)."""
    global _total
    dropped = {(ref, key) for ref, key, tier in victims if tier == "hot"}
    for ref, key, tier in victims:
        holder = ref()
        if holder is None:
            continue
        if tier == "hot":
            holder.drop_render(key)
        elif (ref, key) not in dropped:
            size = holder.compact_render(key)
            with _lock:
                entry = _entries.get((id(holder), key))
                if entry is not None and entry.tier == "compact":
                    if size is None:
                        _remove((id(holder), key))
                    else:
                        _total += size - entry.size
                        entry.size = size
                after = _evict() if _total > _limit else []
            _act(after)


def _gone(owner: int) -> None:
    # A finalizer: it can run inside ``note`` (a collection started by an allocation there), so
    # it never takes the lock; the next call under the lock removes the owner's entries.
    _departed.append(owner)


def _sweep() -> None:
    """Remove the entries of holders that are gone (call with the lock held)."""
    while _departed:
        owner = _departed.popleft()
        _watched.discard(owner)
        for at in [e for e in _entries if e[0] == owner]:
            _remove(at)


def paused_collector(build: Callable[P, R]) -> Callable[P, R]:
    """Run ``build`` with the cyclic garbage collector paused (restored after, as it was).

    A render builds tens of thousands of objects that all stay alive (the cached window); each
    allocation burst would otherwise start collections that walk the whole heap, every resident
    agent's cache included, and find nothing to free. Reference counting still frees everything
    at once; cycles made meanwhile wait for the next collection. The pause is process-wide: a
    host thread allocating meanwhile is not collected until the render ends (milliseconds).
    After it, every object tracked then is moved to the oldest generation (young garbage cycles
    of the process included: they wait for the next full collection)."""

    @functools.wraps(build)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            return build(*args, **kwargs)
        gc.disable()
        try:
            return build(*args, **kwargs)
        finally:
            if gc.get_freeze_count() == 0:
                # What the render built stays alive: move it to the oldest generation at once
                # (freeze then unfreeze splices the generation lists, O(1)), so the next young
                # collections, in whatever compile comes next, do not walk it. Skipped when the
                # host froze objects itself (``unfreeze`` would release them).
                gc.freeze()
                gc.unfreeze()
            gc.enable()

    return paused
