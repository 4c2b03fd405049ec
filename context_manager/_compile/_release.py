"""The compiler's side of the per-process bound (``_resident``'s ``Holder``): releasing a
branch's hot render when the bound needs room, and dropping it.

A release runs inside whichever compile needed room (another manager's, maybe on another
store), so it writes nothing and reads no store: a compile writes only to its own store. A
render its snapshot still backs is dropped (its next compile restores the snapshot: one read,
no pickling now); any other is compacted, with the window's releases the binding record learnt
moved into the compact render (restored with it). Either way the window's stored messages and
what the record learnt of the window are freed: a manager whose render is released keeps a
small constant (``tests/compile/test_render_footprint.py``).
"""

from __future__ import annotations

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._store._protocol import Release

from ._branch import BindingRecord
from ._compact import CompactRender
from ._render import RenderState
from ._snapshot_io import SnapshotKeeper
from ._stamp_cache import StampCache

log = library_logger("context_manager.compile")


class RenderReleaser(SnapshotKeeper):
    """Releases and drops kept renders (a base class: ``Compiler`` is one)."""

    _stamps: StampCache

    def drop_render(self, key: str) -> None:
        """Drop branch ``key``'s cached render (the per-process bound evicted it), and the
        window's releases its record learnt; its next compile restores the snapshot or
        re-renders the window from the store."""
        cache = self._caches.get(key)
        if cache is not None:
            cache.drop_render()
            _forget_window(cache.record)
            if cache.empty():
                del self._caches[key]
        self._release_unused()

    def compact_render(self, key: str) -> int | None:
        """Release branch ``key``'s hot render (``_resident`` pushed it out of the hot tier):
        dropped when its snapshot in this manager's store still restores it (no pickling),
        else kept compact, with the window's releases taken out of the record (restored with
        it); either way its Python objects and the window's stored messages are freed. Writes
        nothing and reads no store: this runs inside whichever compile needed room (another
        manager's, maybe on another store), and a compile writes only to its own store.
        Returns the compact size (``None``: nothing was kept)."""
        cache = self._caches.get(key)
        entry = cache.render if cache is not None else None
        if cache is not None:
            cache.window = None
        if cache is None or entry is None:
            self._release_unused()
            return None
        if isinstance(entry[1], CompactRender):  # restored by a dry run: kept compact
            _forget_window(cache.record)
            return entry[1].nbytes
        try:
            backed = self.snapshot_backs(cache, entry[1])
            compact = (
                None
                if backed
                else CompactRender.of(entry[1], _window_releases(cache.record, entry[1]))
            )
        except Exception as err:  # e.g. its own compile, in another thread, is extending it
            # this runs inside another branch's compile: never fail it, drop the render instead
            log.info("render_not_compacted", branch=key, error=repr(err))
            compact = None
        if compact is None:
            self.drop_render(key)
            return None
        if cache.render is entry:  # not compiled meanwhile (another thread)
            cache.render = (entry[0], compact)
            _forget_window(cache.record)
        self._release_unused()
        return compact.nbytes

    def _release_unused(self) -> None:
        """No hot render is kept: neither are the stamps it judged by (re-read on demand)."""
        if not any(
            c.render is not None and isinstance(c.render[1], RenderState)
            for c in self._caches.values()
        ):
            self._stamps.clear_shared()


def _forget_window(record: BindingRecord | None) -> None:
    if record is not None:
        record.forget_window()


def _window_releases(
    record: BindingRecord | None, state: RenderState
) -> dict[MessageId, Release] | None:
    """The releases ``record`` holds for the messages ``state`` met: every one stored for
    them, since a kept render's record has looked up each of its replies with thinking
    (``None``: no record, the restore reads them)."""
    if record is None:
        return None
    releases = record.releases
    return {mid: releases[mid] for mid in state.sequences if mid in releases}
