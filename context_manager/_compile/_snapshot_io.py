"""Render snapshots through the compiler's own store (``_snapshot`` holds the format).

A compiler saves and loads its branches' snapshots in its manager's store only, and never fails
a compile over one: a failing store, a snapshot that does not match and bytes that are not a
render all read as none (the render is then built from the stored messages).
"""

from __future__ import annotations

from collections.abc import Mapping

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._store._protocol import Lineage, Release, SnapshotStore, supports

from . import _snapshot
from ._branch import JUDGING_AT, BindingRecord, BranchCache, CacheKey
from ._compact import CompactRender, NotARender
from ._host import CompileHost
from ._render import RenderState
from ._run import Run
from ._stage_report import SNAPSHOT_REFRESH_MESSAGES
from ._strategies import estimate_tokens

log = library_logger("context_manager.compile")


class SnapshotKeeper:
    """The compiler's snapshot reads and writes (a base class: ``Compiler`` is one)."""

    manager: CompileHost
    _binding_serial: int | None
    _caches: dict[str, BranchCache]

    def cache(self, key: str) -> BranchCache:
        """Branch ``key``'s cache (made empty on first use)."""
        found = self._caches.get(key)
        if found is None:
            found = self._caches[key] = BranchCache()
        return found

    def _snapshots(self) -> bool:
        """Whether this compiler saves and loads render snapshots: the store keeps them, the
        binding serial is known, and nothing outside the store shaped the render (a reasoning
        sidecar, an estimator of the host's own)."""
        m = self.manager
        return (
            _snapshot.enabled()
            and self._binding_serial is not None
            and m.reasoning is None
            and m.estimator is estimate_tokens
            and supports(m.store, SnapshotStore)
            and _snapshot.code_digest() is not None
        )

    def _load_snapshot(self, run: Run, cache_key: CacheKey) -> bool:
        """Restore the run's branch's stored snapshot as its cached render when it is usable
        now (``_snapshot.usable``), and learn the window's releases it holds into the run's
        record. Never fails the compile: a failing store, a snapshot that does not match and
        bytes that are not a render all read as none."""
        found = self._read_snapshot(run, cache_key)
        if found is None:
            return False
        state, compact = found
        assert self._binding_serial is not None  # ``_read_snapshot``
        cache = self.cache(run.key)
        cache.render = (cache_key, state)
        cache.size = compact.raw_size if cache.size is None else cache.size
        cache.snapshot = (self._binding_serial, run.serial, state.last_sequence)
        return True

    def _read_snapshot(
        self, run: Run, cache_key: CacheKey, *, judging_aside: bool = False
    ) -> tuple[RenderState, CompactRender] | None:
        """The run's branch's stored snapshot restored, when it is usable now under
        ``cache_key`` (``judging_aside``: under one differing only in how thinking is judged,
        ``_branch.JUDGING_AT``), its window's releases learnt into the run's record; ``None``
        otherwise (also for a failing store and bytes that are not a render)."""
        if not self._snapshots():
            return None
        m, key = self.manager, run.key
        try:
            saved = m.store.load_render(m.namespace, key)
        except Exception as err:
            log.info("render_snapshot_unread", branch=key, error=repr(err)[:200])
            return None
        if saved is None:
            return None
        assert self._binding_serial is not None
        compact = _snapshot.usable(
            saved[0],
            saved[1],
            branch=key,
            lineage=run.lineage,
            change_serial=run.serial,
            binding_serial=self._binding_serial,
            cache_key=_snapshot.cache_key_name(cache_key),
            code=_snapshot.code_digest() or "",
            masked=JUDGING_AT if judging_aside else (),
        )
        if compact is None:
            return None
        try:
            state, releases = compact.restore_window()
        except NotARender as err:  # bytes that are not a render: render from the store instead
            log.warning("render_snapshot_refused", branch=key, error=str(err))
            return None
        if releases is not None:  # read when it was saved, at this binding serial
            learn_releases(run.record, state, releases)
        return state, compact

    def _save_snapshot(
        self,
        key: str,
        cache_key: CacheKey,
        render: RenderState | CompactRender,
        lineage: Lineage | None = None,
    ) -> None:
        """Save branch ``key``'s render as its snapshot (compacting it when hot). Never fails
        the compile: a failing store is logged, and the next restart renders from the store."""
        if not self._snapshots():
            return
        m = self.manager
        try:
            lineage = m.lineage(key) if lineage is None else lineage
            compact = (
                render
                if isinstance(render, CompactRender)
                else CompactRender.of(render, self._stored_releases(key, render))
            )
            assert self._binding_serial is not None
            saved = _snapshot.header(
                branch=key,
                lineage=lineage,
                binding_serial=self._binding_serial,
                cache_key=_snapshot.cache_key_name(cache_key),
                compact=compact,
                code=_snapshot.code_digest() or "",
            )
            m.store.save_render(m.namespace, key, saved, compact.blob)
            self.cache(key).snapshot = (
                self._binding_serial,
                render.change_serial,
                render.last_sequence,
            )
        except Exception as err:
            log.info("render_snapshot_unsaved", branch=key, error=repr(err)[:200])

    def _stored_releases(self, key: str, state: RenderState) -> Mapping[MessageId, Release] | None:
        """The stored releases of every message ``state`` rendered, for its snapshot (``None``:
        snapshots are off, or the store failed: the restore then reads them itself)."""
        if not self._snapshots():
            return None
        m = self.manager
        try:
            return m.store.releases(m.namespace, key, list(state.sequences))
        except Exception as err:
            log.info("render_snapshot_releases_unread", branch=key, error=repr(err)[:200])
            return None

    def snapshot_backs(self, cache: BranchCache, state: RenderState) -> bool:
        """Whether the snapshot in the own store still restores ``state`` (both serials as
        when it was saved or restored, fewer than ``SNAPSHOT_REFRESH_MESSAGES`` behind)."""
        saved = cache.snapshot
        return (
            saved is not None
            and self._snapshots()
            and saved[0] == self._binding_serial
            and saved[1] == state.change_serial
            and state.last_sequence - saved[2] < SNAPSHOT_REFRESH_MESSAGES
        )

    def _window_releases(self, state: RenderState, record: BindingRecord, key: str) -> None:
        """Read the releases of every message a restored snapshot rendered (as its render
        would have): a re-render later in this compile (a shed, a jump) judges by them."""
        unknown = [mid for mid in state.sequences if mid not in record.looked_up]
        if unknown:
            m = self.manager
            record.releases.update(m.store.releases(m.namespace, key, unknown))
            record.looked_up.update(unknown)


def learn_releases(record: BindingRecord, state: RenderState, releases: list[Release]) -> None:
    """Learn a restored render's releases (those of every message it met, as kept with it)
    into ``record``; what ``record`` already looked up wins (it may be newer)."""
    known = record.looked_up
    learnt = {r.message_id: r for r in releases if r.message_id not in known}
    if learnt:  # one update: a change to ``Releases`` moves its version once
        record.releases.update(learnt)
    known.update(state.sequences)
