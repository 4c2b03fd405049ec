"""What the compiler keeps per branch, in one place: ``BranchCache`` (issue 27).

Everything held for a branch lives in its ``BranchCache``: the cached render (hot or compact)
and its size, the in-memory binding record, the steady append-only plan, the window's stored
messages and the remembered change-skip answer. Forgetting a branch is one ``pop``. Each field
is a cache of what the store holds (or a pure function of it and the head): dropping any of them
costs a re-read, never a wrong request. ``BranchCache._check`` asserts the cross-field
invariants (the model-based tests call it after every step).
"""

from __future__ import annotations

from typing import Any

import attrs

from context_manager._model._head import Head
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._store._protocol import AnchoredHead, Lineage

from ._compact import CompactRender
from ._releases import Releases
from ._render import Pieces, RenderState


@attrs.define
class BindingRecord:
    """A branch's binding record in memory (mirrors the store; see ``_store.BindingRecordData``)."""

    first_compiled: bool
    releases: Releases
    """Releases of the messages in ``looked_up`` only (read for the window, never the whole
    branch: one per reply that ever left the window)."""
    anchor: int | None
    left_out: frozenset[tuple[MessageId, int]] = frozenset()
    looked_up: set[MessageId] = attrs.field(factory=set)
    anchored_head: AnchoredHead | None = None

    def forget_window(self) -> None:
        """Forget the releases learnt for a window no longer kept hot (re-read on demand: every
        render reads those of the messages it meets that it has not looked up). New
        containers, not cleared ones: a compile running meanwhile in another thread keeps
        judging by those it holds."""
        self.releases = Releases()
        self.looked_up = set()

    def _check(self) -> None:
        for message_id, release in self.releases.items():
            assert release.message_id == message_id
            assert release.from_block >= 0


@attrs.frozen
class CacheKey:
    """What a cached render is valid for (a different one re-renders)."""

    bound: tuple[str, ...]
    binds: bool
    system_notices: str
    appends: bool
    anchor_sequence: int
    reads: Any
    prefix_check: Any
    strategy: Any
    budget: int | None
    erasures: int
    enforcement: str = "enforce"


JUDGING_ONLY = ("bound", "reads", "prefix_check", "strategy", "budget")
"""``CacheKey`` fields that change only how thinking is judged (or where the window starts,
checked apart): a render under one differs from a render under another only in its thinking."""


JUDGING_AT = tuple(i for i, name in enumerate(attrs.fields_dict(CacheKey)) if name in JUDGING_ONLY)
"""The positions of ``JUDGING_ONLY`` among ``CacheKey``'s fields (as a snapshot names them)."""


def same_render(kept: CacheKey, wanted: CacheKey) -> bool:
    """Whether a render under ``kept`` sends what one under ``wanted`` sends, thinking aside
    (the same window start given): only ``JUDGING_ONLY`` fields differ."""
    return attrs.evolve(kept, **{name: getattr(wanted, name) for name in JUDGING_ONLY}) == wanted


@attrs.define
class WindowMemo:
    """What a branch's last render read, kept for the next re-render (a head change, a window
    jump, a fold): the stored messages from ``start`` on and their encoded blocks. Valid while
    the lineage and the store's change serial are the same (stored messages are immutable
    otherwise)."""

    lineage: Lineage
    serial: int
    start: int
    messages: list[StoredMessage]
    pieces: Pieces
    nbytes: int = 0
    """The encoded blocks' bytes (what the per-process bound counts)."""

    def last(self) -> int:
        return self.messages[-1].sequence if self.messages else self.start - 1


def piece_bytes(pieces: Pieces) -> int:
    """The canonical bytes of every block encoded in ``pieces``."""
    total = 0
    for memo in pieces.values():
        for piece in memo:
            if piece is not None:
                total += len(piece[1])
    return total


@attrs.frozen
class Fresh:
    """The messages stored after sequence ``after``, read with the serials."""

    after: int
    messages: list[StoredMessage]


@attrs.define
class Steady:
    """The last unchanged append-only plan of a branch: reused while the anchor, the asked head
    and the newest rendered change stay the same (a steady compile costs no head digests)."""

    anchor: AnchoredHead
    asked: Head
    base: Head
    last_change: Any
    sent: Head


@attrs.define(slots=True)
class BranchCache:
    """Everything the compiler holds for one branch (each field ``None`` when not held)."""

    render: tuple[CacheKey, RenderState | CompactRender] | None = None
    """The cached render, hot or compact (``_resident`` decides which)."""
    size: int | None = None
    """The hot render's encoded bytes, as last counted (``_footprint`` adds its objects)."""
    snapshot: tuple[int, int, int] | None = None
    """``(binding serial, change serial, last sequence)`` of the snapshot saved or restored
    for the kept render, in the manager's own store: while both serials hold, dropping the
    render costs its next compile one snapshot read, no render from the store."""
    record: BindingRecord | None = None
    steady: Steady | None = None
    window: WindowMemo | None = None
    skips: tuple[tuple[int, int], bool] | None = None
    """Whether a window start skips a change stored after the anchor, for ``(anchor, start)``
    (the messages between them never change, so the answer is kept)."""

    def drop_render(self) -> None:
        """Forget the render and what only it needs (the record stays)."""
        self.render = self.size = self.window = self.steady = self.snapshot = None

    def empty(self) -> bool:
        return self.render is None and self.record is None and self.window is None

    def _check(self) -> None:
        if self.record is not None:
            self.record._check()
        if self.size is not None:
            assert self.size >= 0
        if self.render is not None:
            state = self.render[1]
            if isinstance(state, RenderState):
                state._check()
                assert state.start <= state.last_sequence + 1 or not state.messages
        if self.window is not None:
            window = self.window
            sequences = [m.sequence for m in window.messages]
            assert sequences == sorted(sequences), "the window's messages are in order"
            assert all(s >= window.start for s in sequences), "the window starts at its start"
            assert window.nbytes >= 0
        if self.skips is not None:
            (anchor, start), _ = self.skips
            assert anchor + 1 < start, "a skip is only asked past the anchor"
