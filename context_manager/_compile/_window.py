"""The compiler's renders from the store: the kept render extended, the window read and
rendered, and the releases and stamps a render needs loaded first.

A steady compile reads only what was stored since the kept render (O(new)); a re-render reuses
the window's stored messages and encoded blocks while the change serial and lineage hold. A
kept render is extended only from where a render from the store would start (``_start``), so
the request is the same in the process that kept it and after a restart.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence

import attrs

from context_manager._binding._chain import CHAIN_SEED, LEGACY_CHAIN_SEED
from context_manager._model._content import THINKING_TYPES
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._stamps import AnyStamp, LegacyStamp
from context_manager._store._protocol import Lineage, Release

from . import _rejudge, _resident
from ._branch import BindingRecord, CacheKey, WindowMemo, piece_bytes, same_render
from ._cold import cold_anchor, open_round_start
from ._compact import CompactRender, NotARender
from ._compaction import COMPACTION_KIND, render_compaction
from ._fold import SUMMARY_KIND, covers_upto
from ._fold_render import RoundsText, summary_only
from ._message import render_message
from ._release import RenderReleaser
from ._render import Pieces, RenderContext, RenderState, render_text_prefix
from ._run import HEAD_CHANGE_PREVIEW_ID, PREVIEW_SUMMARY_ID, Rendered, Run
from ._snapshot_io import learn_releases
from ._stamp_cache import StampCache

log = library_logger("context_manager.compile")

PREVIEW_IDS = (HEAD_CHANGE_PREVIEW_ID, PREVIEW_SUMMARY_ID)
"""The ids of a compile's previews (``_run``): their encoded blocks are never kept."""

OPENER_KINDS = (SUMMARY_KIND, COMPACTION_KIND)
"""Stored messages a render opens with (the newest), leaving out what they cover."""


class WindowRenderer(RenderReleaser):
    """Renders from the store (a base class: ``Compiler`` is one)."""

    _stamps: StampCache
    on_release: Callable[[str], None]

    def render_cached(self, run: Run, cache_key: CacheKey, ctx: RenderContext) -> Rendered:
        """The branch's render under ``ctx``: the kept one extended by what was stored since,
        a restored snapshot, or (neither usable) the window rendered from the store."""
        key, cache = run.key, self.cache(run.key)
        repeat = cache.render is not None or cache.window is not None
        snapshot = False
        if not repeat:  # about to be built from the store: the previous newest is deferred
            _resident.admit(self, key)
            snapshot = self._load_snapshot(run, cache_key)
        try:
            state, extended = self._extend_cached(run, cache_key, ctx)
        except NotARender as err:  # a kept compact render that does not restore (never
            # expected: this process made it; a snapshot is restored above): render instead
            log.warning("compact_render_refused", branch=key, error=str(err))
            cache.render = None
            state, snapshot, extended = None, False, 0
        if snapshot and state is not None:
            self._window_releases(state, run.record, key)
            log.debug("render_snapshot_restored", branch=key, messages=len(state.messages))
        if state is None:
            state = self._rejudge_kept(run, cache_key, ctx)
        if state is None:
            state = self.full_render(run, ctx, windowed=run.limit)
        return Rendered(state, repeat, snapshot, extended)

    def _kept_state(
        self, run: Run, cached: tuple[CacheKey, RenderState | CompactRender]
    ) -> RenderState:
        """The kept render, restored when it is kept compact (its window's releases learnt
        into the record; kept hot again unless the compile is dry).

        Raises:
            NotARender: a compact render that does not restore.
        """
        if not isinstance(cached[1], CompactRender):
            return cached[1]
        compact, cache = cached[1], self.cache(run.key)
        state, releases = compact.restore_window()
        if releases is None:  # kept without its record's releases: read them
            self._window_releases(state, run.record, run.key)
        else:  # taken out of the record when it was compacted
            learn_releases(run.record, state, releases)
        cache.size = compact.raw_size if cache.size is None else cache.size
        if not run.dry_run:
            cache.render = (cached[0], state)
        return state

    def _rejudgeable(self, run: Run, cache_key: CacheKey) -> RenderState | None:
        """The render to judge again under ``cache_key``: the kept one when only judging
        differs, else (none kept: the bound dropped it) the branch's snapshot when it is
        usable but for how thinking is judged; ``None``: neither."""
        if not _rejudge.ENABLED:
            return None
        cached = self.cache(run.key).render
        if cached is None:
            found = self._read_snapshot(run, cache_key, judging_aside=True)
            if found is None:
                return None
            self._window_releases(found[0], run.record, run.key)
            return found[0]
        if not same_render(cached[0], cache_key) or cached[1].change_serial != run.serial:
            return None
        try:
            return self._kept_state(run, cached)
        except NotARender:  # never expected (this process made it): the caller re-renders
            return None

    def _rejudge_kept(
        self, run: Run, cache_key: CacheKey, ctx: RenderContext
    ) -> RenderState | None:
        """The kept render under another head, its thinking judged again (``_rejudge``) and
        extended by what was stored since; ``None`` when only a re-render gives it (another
        window start or change serial, other render options, an opener in the window)."""
        kept = self._rejudgeable(run, cache_key)
        if kept is None:
            return None
        if kept.judged is None or self._latest_summary(run.lineage) is not None:
            return None
        if self._start(run, 0, None, run.limit) != kept.start:
            return None
        memo = self._read_window(run.key, run.lineage, kept.start, run.serial)
        messages = memo.messages
        self._prefetch(messages, run.record, run.key)
        new = messages[bisect.bisect_right(messages, kept.last_sequence, key=_sequence) :]
        if _legacy_stamped(new, self._stamps.stamps):
            return None
        ctx = attrs.evolve(ctx, pieces=memo.pieces)

        def stored(message_id: MessageId) -> StoredMessage | None:
            sequence = kept.sequences.get(message_id, -1)
            k = bisect.bisect_left(messages, sequence, key=_sequence)
            return messages[k] if k < len(messages) and messages[k].id == message_id else None

        encoded = [0]
        again = _rejudge.rejudged(kept, ctx, stored, encoded)
        memo.nbytes += encoded[0]
        if again is not None:
            memo.nbytes += _render_all(again, ctx, new, None)
        return again

    def _start(
        self, run: Run, base: int, start: int | None, windowed: tuple[int, int] | None
    ) -> int:
        """Where a render from the store starts (``full_render``): ``start`` when given, else
        the window's anchor, found from the newest message when none is recorded."""
        record = run.record
        if start is None and windowed is not None:
            if record.anchor is not None and record.anchor >= base:
                start = record.anchor
            else:
                start = cold_anchor(self.manager, run.lineage, base, windowed)
        elif start is None and record.anchor is not None and record.anchor > base:
            # no window now, one before (a budget dropped): an open round's reply still goes
            # out after what it was made with (provider rule 6; issue 28 item 4)
            start = open_round_start(self.manager, run.lineage, base)
        return max(base, start or 0)

    def _window_dropped(self, run: Run, state: RenderState) -> bool:
        """No window now, and the kept render starts at the recorded window anchor where a
        render from the store starts elsewhere (the open round that held the start there
        has closed, ``_start``): the kept render is not extended, so a restart sends the
        same request. One summary read and one small read, only while that holds."""
        anchor = run.record.anchor
        if run.limit is not None or not anchor or state.start != anchor:
            return False
        summary = self._latest_summary(run.lineage)
        base = covers_upto(summary) + 1 if summary is not None else 0
        return self._start(run, base, None, None) != state.start

    def _extend_cached(
        self, run: Run, cache_key: CacheKey, ctx: RenderContext
    ) -> tuple[RenderState | None, int]:
        """The cached render extended by the messages stored since (and how many), or
        ``None`` when it cannot be (none kept, another key or change serial, a new summary).
        ``run.since``: what was stored since a sequence, read with the serials (used when
        that sequence is still the render's last)."""
        key, serial, fresh = run.key, run.serial, run.since
        cache = self.cache(key)
        cached = cache.render
        if cached is None or cached[0] != cache_key or cached[1].change_serial != serial:
            return None, 0
        m = self.manager
        last = cached[1].last_sequence
        new = (
            fresh.messages
            if fresh is not None and fresh.after == last
            else m.store.read(m.namespace, run.lineage, after=last)
        )
        if any(message.metadata.kind in OPENER_KINDS for message in new):
            return None, 0
        state = self._kept_state(run, cached)
        if self._window_dropped(run, state):
            cache.render = None  # nor rejudged: rendered again from where the store says
            return None, 0
        if not isinstance(cached[1], CompactRender) and run.dry_run:
            state = state.copy()
        self._prefetch(new, run.record, key)
        if state.legacy_chain is None and _legacy_stamped(new, self._stamps.stamps):
            return None, 0  # a version-1 stamp needs the chain a render from the start keeps
        memo = cache.window
        if (
            memo is not None
            and memo.serial == serial
            and memo.lineage == run.lineage
            and memo.last() == cached[1].last_sequence
        ):
            memo.messages.extend(new)
            ctx = attrs.evolve(ctx, pieces=memo.pieces)
        else:
            cache.window = memo = None
        encoded = 0
        for message in new:
            encoded += render_message(state, ctx, message)
        if memo is not None:
            memo.nbytes += encoded
        return state, len(new)

    def _prefetch(self, messages: Sequence[StoredMessage], record: BindingRecord, key: str) -> None:
        """Load the releases and stamps ``messages`` need; over the limit, evict the oldest
        stamps not needed now first. O(len(messages)), never O(branch).

        The stamps of ``messages`` themselves are never evicted here: the render that follows
        reads them (an evicted one would judge valid thinking unstamped). A reply whose every
        thinking block is released and reported on this branch needs no stamp: the render
        skips those blocks before judging (a window's shed replies are mostly such).
        """
        m = self.manager
        replies = _thinking_replies(messages)
        unknown = [msg.id for msg in replies if msg.id not in record.looked_up]
        if unknown:
            record.releases.update(m.store.releases(m.namespace, key, unknown))
            record.looked_up.update(unknown)
        needed = [msg.id for msg in replies if not _all_thinking_reported(msg, record.releases)]
        self._stamps.load(needed, lambda wanted: m.store.stamps(m.namespace, wanted))

    def _latest_summary(self, lineage: Lineage) -> StoredMessage | None:
        """The newest opener stored on the branch: a fold's summary or a compaction block."""
        m = self.manager
        found = [
            msg
            for kind in OPENER_KINDS
            for msg in m.store.read(m.namespace, lineage, kind=kind, limit=1, newest_first=True)
        ]
        return max(found, key=lambda msg: msg.sequence, default=None)

    @_resident.paused_collector
    def full_render(
        self,
        run: Run,
        ctx: RenderContext,
        *,
        start: int | None = None,
        summary: StoredMessage | None = None,
        windowed: tuple[int, int] | None = None,
        pending: Sequence[StoredMessage] = (),
    ) -> RenderState:
        """Render the branch's window from the store (the kept window's messages reused),
        then ``pending``: this compile's previews, not stored yet. Opens with ``summary`` (a
        pending one, else the newest stored)."""
        if summary is None:
            summary = next((p for p in pending if p.metadata.kind in OPENER_KINDS), None)
        if summary is None:
            summary = self._latest_summary(run.lineage)
        record = run.record
        base = covers_upto(summary) + 1 if summary is not None else 0
        start = self._start(run, base, start, windowed)
        memo = self._read_window(run.key, run.lineage, start, run.serial)
        messages = memo.messages
        self._prefetch(messages, record, run.key)
        ctx = attrs.evolve(ctx, pieces=memo.pieces)
        state = RenderState(chain=CHAIN_SEED, start=start, change_serial=run.serial, judged=[])
        if _legacy_stamped(messages, self._stamps.stamps):
            state.legacy_chain = LEGACY_CHAIN_SEED
        if summary is not None:
            _render_opener(state, ctx, summary)
        rounds = RoundsText.of(summary, start)  # a fold's open turn, sent as text (_fold_render)
        # the blocks carried from the last render, then the new ones
        memo.nbytes += _render_all(state, ctx, messages, rounds)
        _render_all(state, ctx, pending, rounds)
        if rounds is not None:
            rounds.place(state, ctx)
        return state

    def read_window(self, run: Run, start: int) -> list[StoredMessage]:
        """The stored messages of the branch from ``start`` on (see ``_read_window``)."""
        return self._read_window(run.key, run.lineage, start, run.serial).messages

    def _read_window(self, key: str, lineage: Lineage, start: int, serial: int) -> WindowMemo:
        """The stored messages from ``start`` on: what the last render read is reused, only
        newer messages are read (O(new)), or the window when that does not cover ``start``."""
        m = self.manager
        cache = self.cache(key)
        memo = cache.window
        if memo is not None and memo.serial == serial and memo.lineage == lineage:
            if memo.start <= start:  # the kept window and what was stored since
                newer = m.store.read(m.namespace, lineage, after=memo.last())
                messages = [*memo.messages, *newer]
                first = bisect.bisect_left(messages, start, key=lambda msg: msg.sequence)
                pieces, nbytes = _kept_pieces(memo, messages[:first])
                memo = WindowMemo(lineage, serial, start, messages[first:], pieces, nbytes)
                cache.window = memo
                return memo
            old = memo.pieces
        else:
            old = {}
        messages = m.store.read(m.namespace, lineage, after=start - 1)
        first = bisect.bisect_left(messages, start, key=lambda msg: msg.sequence)
        messages = messages[first:]
        pieces = {msg.id: old[msg.id] for msg in messages if msg.id in old} if old else {}
        memo = WindowMemo(lineage, serial, start, messages, pieces, piece_bytes(pieces))
        cache.window = memo
        return memo


def _kept_pieces(memo: WindowMemo, dropped: Sequence[StoredMessage]) -> tuple[Pieces, int]:
    """``memo``'s encoded blocks without those of ``dropped`` (the messages before the new
    start) and of this process's previews (placeholder ids, never stored: a later preview
    under the same id holds other blocks), and their bytes. O(dropped): the kept dict is
    reused (the memo it belonged to is replaced)."""
    pieces, nbytes = memo.pieces, memo.nbytes
    for message in dropped:
        nbytes -= piece_bytes({message.id: pieces.pop(message.id, [])})
    for preview in PREVIEW_IDS:
        pieces.pop(preview, None)  # never counted in ``nbytes`` (``full_render``)
    return pieces, nbytes


def _render_all(
    state: RenderState,
    ctx: RenderContext,
    messages: Sequence[StoredMessage],
    rounds: RoundsText | None,
) -> int:
    """Render ``messages`` in order, the open turn ``rounds`` sends as text left out; the bytes
    newly encoded (``render_message``)."""
    encoded = 0
    for message in messages:
        if rounds is None or not rounds.skips(state, ctx, message):
            encoded += render_message(state, ctx, message)
    return encoded


def _legacy_stamped(
    messages: Sequence[StoredMessage], stamps: Mapping[MessageId, AnyStamp]
) -> bool:
    """Whether a reply among ``messages`` carries a version-1 stamp (judged on the legacy
    chain, which only a render from the window's start keeps: ``full_render``)."""
    return any(isinstance(stamps.get(m.id), LegacyStamp) for m in messages)


def _sequence(message: StoredMessage) -> int:
    return message.sequence


def _render_opener(state: RenderState, ctx: RenderContext, opener: StoredMessage) -> None:
    """Open the render with a compaction block or a fold's summary."""
    if opener.metadata.kind == COMPACTION_KIND:
        render_compaction(state, ctx, opener)
    else:
        state.summary_id = opener.id
        render_text_prefix(state, ctx, summary_only(opener), "summary")


def _thinking_replies(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """The replies among ``messages`` that hold thinking (a loop: asked of a whole window)."""
    replies: list[StoredMessage] = []
    for message in messages:
        if message.role == "assistant":
            for block in message.content:
                if isinstance(block, THINKING_TYPES):
                    replies.append(message)
                    break
    return replies


def _all_thinking_reported(message: StoredMessage, releases: Mapping[MessageId, Release]) -> bool:
    """Whether every thinking block of ``message`` is released and reported (never judged)."""
    release = releases.get(message.id)
    if release is None:
        return False
    for index, block in enumerate(message.content):
        if isinstance(block, THINKING_TYPES) and not release.reported_at(index):
            return False
    return True
