"""Global state department: everything this library keeps per process, in one place.

Don't reload this module, or the per-process state starts over while the modules that read it
keep the old one (as structlog's ``_config.py`` warns). Nothing here is per agent or per store:
``PROCESS.renders`` is the bound on cached renders shared by every manager in the process
(``_compile._resident``), ``PROCESS.snapshots`` the render-snapshot switch and this code's
digest (``_compile._snapshot``), ``PROCESS.local_holds`` the in-process holds of stores written
before ``Store.hold`` (``_manager``), ``PROCESS.stamp_warnings`` the stamp notes already logged
(``_model._stamps``). Everything else is per manager.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, deque
from typing import Any, Literal

import attrs

DEFAULT_RENDER_CACHE_BYTES = 64 * 2**20
"""The default bound on everything kept: 64 MiB, counted as each hot render's estimated memory
(``_compile._footprint``: about five times its request's wire bytes) and each compact render's
compressed bytes."""

DEFAULT_HOT_SHARE = 4
"""By default a quarter of the bound may be hot (16 MiB of Python objects: about three windows
of 2,400 messages, 0.9 MB on the wire each; the render just compiled stays hot whatever its
size)."""

Tier = Literal["hot", "compact"]

RenderKey = tuple[int, str]
"""``(id of the holder, branch key)``."""


@attrs.define
class RenderEntry:
    """One kept render in the per-process bound."""

    ref: weakref.ref[Any]
    size: int
    tier: Tier


@attrs.define
class RenderCacheState:
    """The per-process bound on cached renders (``_compile._resident`` owns the rules)."""

    lock: threading.Lock = attrs.field(factory=threading.Lock)
    entries: OrderedDict[RenderKey, RenderEntry] = attrs.field(factory=OrderedDict)
    """Every kept render, least recently compiled first."""
    hot: OrderedDict[RenderKey, None] = attrs.field(factory=OrderedDict)
    """Branches compiled again while cached, least recently compiled first (the hot tier)."""
    newest: RenderKey | None = None
    """The branch whose render was last built from the store: hot until another one is."""
    deferred: OrderedDict[RenderKey, None] = attrs.field(factory=OrderedDict)
    """Former newest branches, still hot: compacted only when the bound needs room (a wake
    never compacts another agent's render on its own path)."""
    total: int = 0
    hot_total: int = 0
    """The sizes of every entry that is hot: the newest, the deferred ones and the hot tier's
    (kept as it changes: O(1) per compile)."""
    limit: int = DEFAULT_RENDER_CACHE_BYTES
    hot_limit: int = DEFAULT_RENDER_CACHE_BYTES // DEFAULT_HOT_SHARE
    watched: set[int] = attrs.field(factory=set)
    departed: deque[int] = attrs.field(factory=deque)
    """Holders gone since the last sweep (appended by their finalizers, without the lock)."""


@attrs.define
class SnapshotState:
    """Render snapshots in this process (``_compile._snapshot``)."""

    enabled: bool = True
    digest: list[str | None] = attrs.field(factory=list)
    """This process's code digest, once computed (empty until then)."""


@attrs.define
class Process:
    """All of this library's per-process state."""

    renders: RenderCacheState = attrs.field(factory=RenderCacheState)
    snapshots: SnapshotState = attrs.field(factory=SnapshotState)
    local_holds: dict[int, tuple[object, Any]] = attrs.field(factory=dict)
    """By ``id`` of a store without ``hold``: the store (kept alive, so the id stays its own)
    and its in-process holds."""
    stamp_warnings: set[tuple[object, ...]] = attrs.field(factory=set)
    """The legacy-stamp note once logged (``_model._stamps``: once per process), and the
    unreadable stamps logged by a ``parse_stamp`` given no store's own set."""


PROCESS = Process()
"""The one instance; read it as ``PROCESS.<part>`` at each use, never copy a part out."""
