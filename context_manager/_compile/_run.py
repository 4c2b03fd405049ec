"""One compile's values (issue 27): what was read, the draft each stage returns, the effects.

Invariant: a stage never writes to the store. It returns a new ``Draft`` (``attrs.evolve``)
whose ``effects`` name what the compile wants written; ``_commit.commit`` writes them all at
the end, in one store batch, after every check that can raise has run, and a dry run never calls
it. A message the compile wants stored (a ``head-change``, a fold's summary) is rendered as a
*preview* (a placeholder id, the next free sequence) and re-bound to the stored one at commit.
The render state inside a draft is the branch's incremental cache (mutable, and the branch's
cached render is dropped when a compile fails after extending it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from context_manager._model._head import Head
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ThinkingStrip
from context_manager._store._protocol import AnchoredHead, Lineage

if TYPE_CHECKING:
    from ._branch import BindingRecord, BranchCache, CacheKey, Fresh, Steady
    from ._fold import FoldRequest
    from ._host import CompileHost
    from ._inflight import Restored
    from ._render import RenderContext, RenderState, StripEntry
    from ._strategies import Fold

HEAD_CHANGE_PREVIEW_ID: MessageId = "head_change_preview"
"""The id of a ``head-change`` message before it is stored (a dry compile's, for good)."""

PREVIEW_SUMMARY_ID: MessageId = "summary_preview"
"""The id of a fold summary before it is stored (a dry compile's, for good)."""


@attrs.frozen
class BindingWrite:
    """What the commit writes to the branch's binding record (``Store.commit_binding``)."""

    releases: tuple[tuple[MessageId, int], ...]
    reported: tuple[MessageId, ...]
    window_start: int | None
    """The new window anchor, or ``None`` to keep the stored one."""
    left_out: frozenset[tuple[MessageId, int]] | None
    """The new left-out set, or ``None`` when it is unchanged."""


@attrs.frozen
class Effects:
    """Everything one compile wants written, applied at once by ``_commit.commit``."""

    head_change: StoredMessage | None = None
    """The ``head-change`` system message to append (a preview until stored)."""
    summary: StoredMessage | None = None
    """The fold's summary to append after it (a preview until stored)."""
    fold: FoldRequest | None = None
    """What the summary covers (for the ``folded`` log event)."""
    anchored_head: AnchoredHead | None = None
    """A new anchored head (SPEC 7b)."""
    binding: BindingWrite | None = None
    """The binding record's releases, reports, window anchor and left-out set."""
    left_out: frozenset[tuple[MessageId, int]] = frozenset()
    """What this compile leaves out (kept in memory after the commit)."""
    snapshot: bool = False
    """Save the branch's render snapshot after the commit (derived data: never fails it)."""

    def pending(self) -> tuple[StoredMessage, ...]:
        """The previews to store, in order (a change before the summary that follows it)."""
        return tuple(m for m in (self.head_change, self.summary) if m is not None)


class Engine(Protocol):
    """What the stages use of the compiler: its caches, its reads of the store, its renders."""

    manager: CompileHost

    def cache(self, key: str) -> BranchCache: ...

    def serials(self, key: str, lineage: Lineage) -> tuple[int, Fresh | None]: ...

    def record_for(self, key: str) -> BindingRecord: ...

    def context(
        self,
        head: Head,
        record: BindingRecord,
        serial: int,
        appends: bool = False,
        anchor: AnchoredHead | None = None,
    ) -> RenderContext: ...

    def cache_key(self, head: Head, ctx: RenderContext, budget: int | None) -> CacheKey: ...

    def render_cached(self, run: Run, cache_key: CacheKey, ctx: RenderContext) -> Rendered: ...

    def full_render(
        self,
        run: Run,
        ctx: RenderContext,
        *,
        start: int | None = None,
        summary: StoredMessage | None = None,
        windowed: tuple[int, int] | None = None,
        pending: Sequence[StoredMessage] = (),
    ) -> RenderState: ...

    def plan_fold(self, run: Run, state: RenderState, strategy: Fold) -> FoldRequest | None: ...

    def skips_a_change(
        self, key: str, lineage: Lineage, anchor: AnchoredHead | None, start: int
    ) -> bool: ...

    def inflight(self, run: Run, state: RenderState) -> Restored | None: ...

    def note_size(self, key: str, repeat: bool) -> None: ...

    def wrote_binding(self) -> None: ...


@attrs.frozen
class Rendered:
    """The render stage's outcome: the state and how it was had."""

    state: RenderState
    repeat: bool
    """The branch kept a render (or its window) before this compile."""
    snapshot: bool
    """It was restored from a stored snapshot."""
    extended: int
    """How many stored messages extended a kept render."""


@attrs.frozen
class Run:
    """The compile's inputs, read once (``_stage_read.read_branch``); fixed for the compile."""

    engine: Engine
    asked: Head
    budget: int | None
    dry_run: bool
    key: str
    lineage: Lineage
    serial: int
    since: Fresh | None
    record: BindingRecord
    appends: bool
    limit: tuple[int, int] | None
    """``(target after a jump, cap that triggers one)``, or ``None`` for no window."""
    steady: Steady | None
    """The branch's last unchanged append-only plan, when it still applies."""
    compile_id: str
    head_tokens: int = 0
    """What ``system`` and ``tools`` take of ``budget``: it caps the whole request (issue 28
    item 11), so the messages get ``allowed``."""

    @property
    def allowed(self) -> int | None:
        """The budget's share for the messages, or ``None`` without a budget."""
        return None if self.budget is None else self.budget - self.head_tokens


@attrs.frozen
class Draft:
    """What the stages have decided so far; each stage returns a new one."""

    state: RenderState
    head: Head
    """The head the request goes out with (the anchored one while changes are appended)."""
    base_head: Head
    ctx: RenderContext
    cache_key: CacheKey
    anchor: AnchoredHead | None
    """The branch's anchored head as this compile sees it (a new one is in ``effects``)."""
    rendered: Rendered
    start_before: int = 0
    """Where the render started before any pressure stage moved it."""
    appended_before: bool = False
    """The render held an appended change before this compile's."""
    folded: bool = False
    deferred: bool = False
    """Releases recorded mid-round were held back (``_defer``): the render is not kept."""
    effects: Effects = Effects()
    inflight: Restored | None = None
    body: dict[str, Any] = attrs.field(factory=dict)
    end_chain: bytes = b""
    entries: tuple[StripEntry, ...] = ()
    """What this compile newly leaves out, oldest first (the report)."""
    strip: ThinkingStrip | None = None
    restored: tuple[MessageId, ...] = ()

    def pending(self) -> tuple[StoredMessage, ...]:
        return self.effects.pending()

    def next_sequence(self) -> int:
        """The sequence a new preview gets: one past everything rendered or pending."""
        return max([self.state.last_sequence, *(m.sequence for m in self.pending())]) + 1
