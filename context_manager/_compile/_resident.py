"""The per-process bound on cached renders, in two tiers, least recently compiled first.

A host keeps many resident agents in one process; each compiled branch keeps its render. A
render is kept in one of two forms:

- **hot**: the request's messages as Python dicts (and the encoded blocks of the window), what a
  steady compile extends in microseconds, counted at its estimated memory (``_footprint``:
  about five times its wire bytes, not its encoded bytes alone). Every hot render counts
  against ``hot_bytes``: the newest (the branch whose render was last built from the store),
  the former newest ones not compiled since (deferred) and the branches compiled again while
  cached. Over ``hot_bytes``, the deferred ones are released first, then the least recently
  compiled of the hot tier, then the newest; never the branch whose compile is being counted
  (it stays hot whatever its size, until another compile needs room).
- **compact**: one compressed ``bytes`` object per branch, counted exactly; its next compile
  restores it in milliseconds.

Releasing a hot render is the holder's choice (``Holder.compact_render``): a render its own
store's snapshot still backs is dropped (freeing costs no pickling: its next compile restores
the snapshot), any other is compacted. Either way it runs only when the bound needs room, at
the end of the compile that made it need room (after its request is built), never on a wake
under a roomy bound. Over ``limit_bytes`` (hot and compact sizes together), the deferred
renders are released first, then the least recently compiled branch's render is dropped; its
next compile re-renders it from the store. The bound holds at any limit, one render over it
included (that render is dropped after its compile). Process-global, guarded by a lock; the
holders' own work (compacting, dropping) runs outside it. The state itself lives in
``_model._process.PROCESS.renders`` (the one home of per-process state); this module holds the
rules. Nothing here writes to any store, and a holder's release writes to none either.
"""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

from context_manager._model._errors import InvalidValue
from context_manager._model._process import (
    DEFAULT_HOT_SHARE,
    DEFAULT_RENDER_CACHE_BYTES,
    PROCESS,
    RenderEntry,
    RenderKey,
    Tier,
)

__all__ = [
    "DEFAULT_HOT_SHARE",
    "DEFAULT_RENDER_CACHE_BYTES",
    "Holder",
    "Tier",
    "admit",
    "forget",
    "kept_hot",
    "note",
    "paused_collector",
    "render_cache_bytes",
    "render_cache_limit",
    "set_render_cache_limit",
]

P = ParamSpec("P")
R = TypeVar("R")


class Holder(Protocol):
    """Something that keeps cached renders by branch key (the compiler)."""

    on_release: Callable[[str], None]
    """Told after the bound dropped or compacted branch ``key``'s hot render."""

    def drop_render(self, key: str) -> None: ...

    def compact_render(self, key: str) -> int | None:
        """Release ``key``'s hot render: keep it compact, or drop it (a snapshot in the
        holder's own store backs it); its compact size (``None``: nothing is kept)."""


Key = RenderKey
_Entry = RenderEntry


Victims = list[tuple[weakref.ref[Holder], str, Tier]]
"""Renders to drop (``"hot"`` as the tier) or to compact (``"compact"``)."""


def set_render_cache_limit(limit_bytes: int, *, hot_bytes: int | None = None) -> None:
    """Bound the bytes of cached renders kept in this process (0: keep none).

    Both count what a render costs in memory (estimated: about five times its request's wire
    bytes while hot, its compressed bytes while compact). ``hot_bytes`` bounds the part kept
    as Python objects, ready for a steady compile (default: a quarter of ``limit_bytes``; the
    render just compiled stays hot whatever its size); past it, the least recently compiled branches
    are kept compact (compressed bytes, restored at their next compile) or dropped when their
    own store holds their snapshot. Over ``limit_bytes``, the least recently compiled
    branches' renders are dropped at once.

    Raises:
        ValueError: ``limit_bytes`` or ``hot_bytes`` is negative.
    """
    if limit_bytes < 0:
        raise InvalidValue(f"the render cache limit must be 0 or more bytes, got {limit_bytes!r}")
    if hot_bytes is not None and hot_bytes < 0:
        raise InvalidValue(f"the hot render bytes must be 0 or more, got {hot_bytes!r}")
    with PROCESS.renders.lock:
        _sweep()
        PROCESS.renders.limit = limit_bytes
        PROCESS.renders.hot_limit = (
            limit_bytes // DEFAULT_HOT_SHARE if hot_bytes is None else hot_bytes
        )
        victims = _evict()
    _act(victims)


def render_cache_limit() -> int:
    """The bound on cached render bytes in this process."""
    return PROCESS.renders.limit


def render_cache_bytes() -> int:
    """The bytes of cached renders this process keeps now (hot and compact)."""
    with PROCESS.renders.lock:
        _sweep()
        return PROCESS.renders.total


def admit(holder: Holder, key: str) -> None:
    """``holder`` is about to build branch ``key``'s render from the store: it becomes the
    newest, and the previous newest, unless compiled again since (hot tier), is deferred: kept
    hot and counted, released first when the bound needs room (never here)."""
    with PROCESS.renders.lock:
        _sweep()
        _become_newest((id(holder), key))


def _become_newest(at: Key) -> None:
    """``at`` is the newest; the previous newest is deferred (call with the lock held)."""
    previous, PROCESS.renders.newest = PROCESS.renders.newest, at
    entry = PROCESS.renders.entries.get(previous) if previous is not None else None
    fresh = previous != at and previous not in PROCESS.renders.hot
    if entry is not None and entry.tier == "hot" and fresh and previous is not None:
        PROCESS.renders.deferred[previous] = None


def note(holder: Holder, key: str, size: int, *, repeat: bool) -> None:
    """``holder`` just compiled branch ``key`` and keeps ``size`` bytes for it, hot.

    ``repeat``: the branch was cached (hot or compact) before this compile; it joins the hot
    tier (otherwise it was built from the store, after ``admit``). Over ``hot_bytes``, other
    hot renders are released; over the bound, the least recently compiled are dropped
    (possibly this one, when it alone is over).
    """
    owner = id(holder)
    at = (owner, key)
    with PROCESS.renders.lock:
        _sweep()
        if owner not in PROCESS.renders.watched:
            PROCESS.renders.watched.add(owner)
            weakref.finalize(holder, _gone, owner)
        _unhot(at)
        _uncount(PROCESS.renders.entries.pop(at, None))
        PROCESS.renders.entries[at] = _Entry(weakref.ref(holder), size, "hot")
        PROCESS.renders.total += size
        PROCESS.renders.hot_total += size
        if repeat:
            PROCESS.renders.hot[at] = None
        elif PROCESS.renders.newest != at:  # built without ``admit``: the newest all the same
            _become_newest(at)
        victims = _evict(at)
    _act(victims, at)


def kept_hot(owner: int, key: str) -> bool:
    """Whether branch ``key`` of the holder whose ``id`` is ``owner`` is counted hot now (not
    compact, not dropped; by ``id``: the caller keeps no reference to the holder)."""
    with PROCESS.renders.lock:
        entry = PROCESS.renders.entries.get((owner, key))
        return entry is not None and entry.tier == "hot"


def forget(holder: Holder, key: str) -> None:
    """``holder`` dropped branch ``key``'s render itself."""
    with PROCESS.renders.lock:
        _remove((id(holder), key))


def _unhot(at: Key) -> None:
    """Take ``at`` out of the hot tier and the deferred ones (call with the lock held)."""
    PROCESS.renders.deferred.pop(at, None)
    PROCESS.renders.hot.pop(at, None)


def _uncount(entry: _Entry | None) -> None:
    """Take a removed entry's size out of the totals (call with the lock held)."""
    if entry is not None:
        PROCESS.renders.total -= entry.size
        if entry.tier == "hot":
            PROCESS.renders.hot_total -= entry.size


def _to_compact(at: Key) -> Victims:
    """Mark ``at``'s hot render for release (call with the lock held)."""
    _unhot(at)
    entry = PROCESS.renders.entries.get(at)
    if entry is None or entry.tier != "hot":
        return []
    entry.tier = "compact"
    PROCESS.renders.hot_total -= entry.size
    return [(entry.ref, at[1], "compact")]


def _remove(at: Key) -> _Entry | None:
    _unhot(at)
    old = PROCESS.renders.entries.pop(at, None)
    if PROCESS.renders.newest == at:
        PROCESS.renders.newest = None
    _uncount(old)
    return old


def _coldest(keep: Key | None) -> Key | None:
    """The hot render to release first: the oldest deferred one, then the least recently
    compiled of the hot tier, then the newest (not compiled since it was built); never
    ``keep`` (call with the lock held)."""
    for tier in (PROCESS.renders.deferred, PROCESS.renders.hot):
        for at in tier:
            if at != keep:
                return at
    newest = PROCESS.renders.newest
    entry = PROCESS.renders.entries.get(newest) if newest is not None else None
    if newest != keep and entry is not None and entry.tier == "hot":
        return newest
    return None


def _evict(keep: Key | None = None) -> Victims:
    """What to release and what to drop now; ``keep``: the branch whose compile is being
    counted, released by the hot bound never (call with the lock held)."""
    victims: Victims = []
    while PROCESS.renders.hot_total > PROCESS.renders.hot_limit:
        at = _coldest(keep)
        if at is None:
            break
        victims += _to_compact(at)
    if PROCESS.renders.total > PROCESS.renders.limit and PROCESS.renders.deferred:
        victims += _compact_deferred()
    if victims:
        return victims  # ``_act`` evicts again once they are released, if still over
    while PROCESS.renders.total > PROCESS.renders.limit and PROCESS.renders.entries:
        at, entry = next(iter(PROCESS.renders.entries.items()))
        _remove(at)
        victims.append((entry.ref, at[1], "hot"))
    return victims


def _compact_deferred() -> Victims:
    """The deferred renders to release, the bound needing room (call with the lock held)."""
    victims: Victims = []
    while PROCESS.renders.deferred:
        victims += _to_compact(next(iter(PROCESS.renders.deferred)))
    return victims


def _act(victims: Victims, keep: Key | None = None) -> None:
    """Release or drop ``victims`` (outside the lock: it is the holders' own work)."""
    dropped = {(ref, key) for ref, key, tier in victims if tier == "hot"}
    for ref, key, tier in victims:
        holder = ref()
        if holder is None:
            continue
        if tier == "hot":
            holder.drop_render(key)
            holder.on_release(key)
        elif (ref, key) not in dropped:
            size = holder.compact_render(key)
            holder.on_release(key)
            with PROCESS.renders.lock:
                entry = PROCESS.renders.entries.get((id(holder), key))
                if entry is not None and entry.tier == "compact":
                    if size is None:
                        _remove((id(holder), key))
                    else:
                        PROCESS.renders.total += size - entry.size
                        entry.size = size
                after = _evict(keep) if PROCESS.renders.total > PROCESS.renders.limit else []
            _act(after, keep)
    with PROCESS.renders.lock:  # e.g. a deferred render whose holder is gone meanwhile
        rest = _evict(keep) if PROCESS.renders.total > PROCESS.renders.limit else []
    if rest:
        _act(rest, keep)


def _gone(owner: int) -> None:
    # A finalizer: it can run inside ``note`` (a collection started by an allocation there), so
    # it never takes the lock; the next call under the lock removes the owner's entries.
    PROCESS.renders.departed.append(owner)


def _sweep() -> None:
    """Remove the entries of holders that are gone (call with the lock held)."""
    while PROCESS.renders.departed:
        owner = PROCESS.renders.departed.popleft()
        PROCESS.renders.watched.discard(owner)
        for at in [e for e in PROCESS.renders.entries if e[0] == owner]:
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
