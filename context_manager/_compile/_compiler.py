"""The compiler: builds each request, judges thinking against stamps, commits strips.

State per branch: a ``RenderState`` cache (valid while the head's bound digests, the binding
configuration, the strategy, the budget and the store's edit serial stay the same) and the
in-memory copy of the branch's binding record. A steady compile reads only the messages stored
since the last one and renders only those: O(new), not O(history). A committing compile writes the
binding record (releases, first-compile flag, window anchor) in one transaction, then tells the
observers; a dry compile writes nothing and tells no one.
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import sys
import uuid
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from context_manager._binding._chain import (
    CHAIN_SEED,
    LEGACY_CHAIN_SEED,
    feed_block,
    is_wire_thinking,
    last_signature,
)
from context_manager._binding._stamp import LEGACY_STAMP_VERSION, stamp_reply
from context_manager._model._canonical import canonical_json
from context_manager._model._content import (
    THINKING_TYPES,
    Block,
    ToolUseBlock,
    block_to_wire,
    reply_blocks,
)
from context_manager._model._errors import InFlightThinkingInvalid, OverBudget
from context_manager._model._head import Head, ThinkingBinding
from context_manager._model._log import library_logger
from context_manager._model._messages import (
    HEAD_CHANGE_KIND,
    MessageId,
    MessageMeta,
    StoredMessage,
)
from context_manager._model._results import CompileResult, ProvenanceEntry, ThinkingStrip
from context_manager._model._usage import reply_extra
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._protocol import AnchoredHead, Lineage, Release, Store

from . import _resident, _snapshot
from ._append import Change, Sent, head_json, plan_change, request_head
from ._caching import Caching, place_breakpoints
from ._compact import CompactRender, NotARender
from ._fold import (
    SUMMARY_KIND,
    FoldRequest,
    answers_tools,
    covers_upto,
    fold_entries,
    kept_thinking,
    plan_fold,
    summary_parts,
)
from ._inflight import Restored, inflight_index, restore_inflight
from ._render import (
    Pieces,
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    close_tool_round,
    is_clean_start,
    render_message,
    render_text_prefix,
    system_betas,
)
from ._selection import jump_anchor, required_tokens
from ._shed import plan_shed
from ._strategies import Fold, Strategy, Window, estimate_tokens
from ._tokens import request_tokens

log = library_logger("context_manager.compile")

SNAPSHOT_REFRESH_MESSAGES = 64
"""A compile that restored a snapshot this many or more messages behind saves a fresh one (a
render from the stored messages always saves one; a steady compile never does)."""

INFLIGHT_LOOKBACK = 16
"""How many of a render's newest stored messages are searched for the in-flight reply before
the store is read (it is the newest assistant message: only results and notices follow it)."""

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when the head's settings give none (the API requires the field)."""

BINDING_BETA = "thinking-binding-controls-2026-08-01"
"""Needed for ``thinking.block_binding`` and for ``input_transformations`` in responses."""

BUDGET_REANCHOR = 0.5
"""How far a budget-driven window jumps: to half the budget, like ``Window``'s default."""

READ_CHUNK = 512
"""Messages read per step when finding a window's start from the newest backwards."""

STAMP_CACHE_LIMIT = 100_000
"""Stamps kept in memory per manager; past it the oldest not needed now are evicted (re-read on
demand)."""


@attrs.define
class BindingRecord:
    """A branch's binding record in memory (mirrors the store; see ``_store.BindingRecordData``)."""

    first_compiled: bool
    releases: dict[MessageId, Release]
    """Releases of the messages in ``looked_up`` only (read for the window, never the whole
    branch: one per reply that ever left the window)."""
    anchor: int | None
    left_out: frozenset[tuple[MessageId, int]] = frozenset()
    looked_up: set[MessageId] = attrs.field(factory=set)
    anchored_head: AnchoredHead | None = None

    def _check(self) -> None:
        for message_id, release in self.releases.items():
            assert release.message_id == message_id
            assert release.from_block >= 0


@attrs.frozen
class _CacheKey:
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


@attrs.define
class _WindowMemo:
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


def _piece_bytes(pieces: Pieces) -> int:
    """The canonical bytes of every block encoded in ``pieces``."""
    total = 0
    for memo in pieces.values():
        for piece in memo:
            if piece is not None:
                total += len(piece[1])
    return total


@attrs.frozen
class _Fresh:
    """The messages stored after sequence ``after``, read with the serials."""

    after: int
    messages: list[StoredMessage]


@attrs.define
class _Steady:
    """The last unchanged append-only plan of a branch: reused while the anchor, the asked head
    and the newest rendered change stay the same (a steady compile costs no head digests)."""

    anchor: AnchoredHead
    asked: Head
    base: Head
    last_change: Any
    sent: Head


class CompileHost(Protocol):
    """What the compiler reads from the facade that owns it (``ContextManager`` is one).

    The compiler holds no reference upward: it gets the store, the namespace, the binding, the
    strategy, the estimator and the sidecar hooks through this, and returns each strip in its
    ``CompileResult``; telling observers is the facade's job.
    """

    store: Store
    namespace: str
    binding: ThinkingBinding
    strategy: Strategy
    estimator: Callable[[Any], int]
    caching: Caching
    reasoning: ReasoningCapture | None
    token: str

    def current_branch_key(self) -> str: ...

    def lineage(self, key: str | None = None) -> Lineage: ...

    def resolve_reasoning(self, block: Block) -> Block | None: ...

    def capture_reasoning(
        self, blocks: tuple[Block, ...], result: CompileResult
    ) -> tuple[Block, ...]: ...


PREVIEW_SUMMARY_ID: MessageId = "summary_preview"
"""The id of a dry compile's fold summary (never stored)."""


class Compiler:
    """Compiles requests and records replies for one ``CompileHost``."""

    def __init__(self, manager: CompileHost) -> None:
        # a proxy: no cycle between the manager and its compiler, so a manager the host drops
        # frees its cached renders at once (and leaves the per-process bound), not at a collection
        self.manager: CompileHost = weakref.proxy(manager)
        self._states: dict[str, tuple[_CacheKey, RenderState | CompactRender]] = {}
        """Each branch's cached render, hot or compact (``_resident`` decides which)."""
        self._sizes: dict[str, int] = {}
        """Each branch's hot render's bytes, as last counted."""
        self._records: dict[str, BindingRecord] = {}
        self._steady: dict[str, _Steady] = {}
        self._stamps: dict[MessageId, dict[str, Any]] = {}
        self._windows: dict[str, _WindowMemo] = {}
        self._skips: dict[str, tuple[tuple[int, int], bool]] = {}
        """Per branch: whether a window start skips a change stored after the anchor (the
        messages between them never change, so the answer is kept)."""
        self._heads: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._heads_models: dict[str, str] = {}
        self.stamp_cache_limit = STAMP_CACHE_LIMIT
        """Stamps kept in memory; the oldest not needed by the current render go first."""
        self._unedited: tuple[int, int] | None = None
        """``(change serial, _unedited_below())`` as last read."""
        self._binding_serial: int | None = None
        """The agent's binding serial the kept records and renders reflect (``None``: not read
        yet, or the store cannot say)."""

    # cache control
    def forget(self, key: str) -> None:
        """Drop everything held for branch ``key`` (it was deleted, or its run or fork ended):
        its render, its binding record, and the stamps only its render read. O(its window,
        plus the other cached windows when stamps are kept for them)."""
        memo = self._windows.get(key)
        if memo is not None and self._stamps:
            others = {
                msg.id
                for other, kept in self._windows.items()
                if other != key
                for msg in kept.messages
            }
            for msg in [*memo.messages, *self._recorded_since(memo)]:
                if msg.id not in others:
                    self._stamps.pop(msg.id, None)
        self.drop_render(key)
        self._records.pop(key, None)
        _resident.forget(self, key)

    def _recorded_since(self, memo: _WindowMemo) -> list[StoredMessage]:
        """Messages stored on ``memo``'s branch after its render (the reply recorded last);
        none when the store cannot say (forgetting never fails)."""
        m = self.manager
        try:
            return m.store.read(m.namespace, memo.lineage, after=memo.last())
        except Exception as err:  # a failing store: those stamps wait for the cache's bound
            log.info("stamps_kept", error=repr(err))
            return []

    def forget_all(self) -> None:
        """Drop everything held for every branch (the manager's run ended)."""
        for key in {*self._states, *self._records, *self._windows, *self._steady}:
            self.forget(key)
        self._stamps.clear()
        self._heads.clear()
        self._heads_models.clear()

    def held(self) -> dict[str, int]:
        """What is held in memory now, counted: render states, binding records, window memos,
        steady plans and stamps (for tests and diagnostics)."""
        return {
            "states": len(self._states),
            "records": len(self._records),
            "windows": len(self._windows),
            "steady": len(self._steady),
            "stamps": len(self._stamps),
        }

    def drop_render(self, key: str) -> None:
        """Drop branch ``key``'s cached render (the per-process bound evicted it); its next
        compile re-renders the window from the store."""
        self._states.pop(key, None)
        self._sizes.pop(key, None)
        self._windows.pop(key, None)
        self._steady.pop(key, None)
        self._release_unused()

    def compact_render(self, key: str) -> int | None:
        """Keep branch ``key``'s render compact (``_resident`` pushed it out of the hot tier):
        its Python objects and the window's stored messages are freed; its next compile
        restores the render. Returns the compact size (``None``: nothing was kept)."""
        entry = self._states.get(key)
        self._windows.pop(key, None)
        if entry is None:
            self._release_unused()
            return None
        if isinstance(entry[1], CompactRender):
            return entry[1].nbytes
        try:
            compact = CompactRender.of(entry[1], self._stored_releases(key, entry[1]))
        except Exception as err:  # e.g. its own compile, in another thread, is extending it
            # this runs inside another branch's compile: never fail it, drop the render instead
            log.info("render_not_compacted", branch=key, error=repr(err))
            self.drop_render(key)
            return None
        if self._states.get(key) is entry:  # not compiled meanwhile (another thread)
            self._states[key] = (entry[0], compact)
            # an idle branch: what waking it (here or in a restarted host) restores
            self._save_snapshot(key, entry[0], compact)
        self._release_unused()
        return compact.nbytes

    # render snapshots (``_snapshot``)
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
            and callable(getattr(m.store, "load_render", None))
            and callable(getattr(m.store, "save_render", None))
            and _snapshot.code_digest() is not None
        )

    def _skips_a_change(
        self, key: str, lineage: Lineage, anchor: AnchoredHead | None, start: int
    ) -> bool:
        """True when a window starting at ``start`` leaves out a ``head-change`` message stored
        after ``anchor``: the request could not say it. One store read per branch, anchor and
        start (remembered), made only when a compile would re-anchor for it."""
        if anchor is None or start <= anchor.at_sequence + 1:
            return False
        asked = (anchor.at_sequence, start)
        known = self._skips.get(key)
        if known is not None and known[0] == asked:
            return known[1]
        m = self.manager
        found = bool(
            m.store.read(
                m.namespace,
                lineage,
                after=anchor.at_sequence,
                upto=start - 1,
                kind=HEAD_CHANGE_KIND,
                limit=1,
            )
        )
        self._skips[key] = (asked, found)
        return found

    def _load_snapshot(
        self,
        key: str,
        cache_key: _CacheKey,
        serial: int,
        lineage: Lineage,
        record: BindingRecord,
    ) -> bool:
        """Restore branch ``key``'s stored snapshot as its cached render when it is usable now
        (``_snapshot.usable``), and learn the window's releases it holds into ``record``. Never
        fails the compile: a failing store, a snapshot that does not match and bytes that are
        not a render all read as none."""
        if not self._snapshots():
            return False
        m = self.manager
        try:
            saved = m.store.load_render(m.namespace, key)
        except Exception as err:
            log.info("render_snapshot_unread", branch=key, error=repr(err)[:200])
            return False
        if saved is None:
            return False
        assert self._binding_serial is not None
        compact = _snapshot.usable(
            saved[0],
            saved[1],
            branch=key,
            lineage=lineage,
            change_serial=serial,
            binding_serial=self._binding_serial,
            cache_key=_snapshot.cache_key_name(cache_key),
            code=_snapshot.code_digest() or "",
        )
        if compact is None:
            return False
        try:
            state, releases = compact.restore_window()
        except NotARender as err:  # bytes that are not a render: render from the store instead
            log.warning("render_snapshot_refused", branch=key, error=str(err))
            return False
        if releases is not None:  # read when it was saved, at this binding serial
            for release in releases:
                if release.message_id not in record.looked_up:
                    record.releases[release.message_id] = release
            record.looked_up.update(state.sequences)
        self._states[key] = (cache_key, state)
        self._sizes[key] = self._sizes.get(key, compact.raw_size)
        return True

    def _save_snapshot(
        self,
        key: str,
        cache_key: _CacheKey,
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

    def _window_releases(self, state: RenderState, record: BindingRecord, key: str) -> None:
        """Read the releases of every message a restored snapshot rendered (as its render
        would have): a re-render later in this compile (a shed, a jump) judges by them."""
        unknown = [mid for mid in state.sequences if mid not in record.looked_up]
        if unknown:
            m = self.manager
            record.releases.update(m.store.releases(m.namespace, key, unknown))
            record.looked_up.update(unknown)

    def _release_unused(self) -> None:
        """No hot render is kept: neither are the stamps it judged by (re-read on demand)."""
        if not any(isinstance(state, RenderState) for _, state in self._states.values()):
            self._stamps.clear()
            self._heads.clear()

    def invalidate(self, key: str) -> None:
        """Re-read branch ``key``'s binding record and re-render it at the next compile."""
        self.forget(key)

    def wrote_binding(self) -> None:
        """This manager wrote one binding record (a release, a commit): the agent's binding
        serial moved by one, and what is kept already reflects it."""
        if self._binding_serial is not None:
            self._binding_serial += 1

    def _serials(self, key: str, lineage: Lineage) -> tuple[int, _Fresh | None]:
        """The agent's change serial, after seeing other writers (``_see_other_writers``),
        and, when branch ``key`` keeps a render, what was stored since it in the same call
        (``Store.serials_and_read``: one round trip where the store has them)."""
        m = self.manager
        kept = self._states.get(key)
        with_read = getattr(m.store, "serials_and_read", None)
        if kept is not None and with_read is not None:
            after = kept[1].last_sequence
            changes, bindings, new = with_read(m.namespace, lineage, after)
            self._see_other_writers(int(bindings))
            return int(changes), _Fresh(after, new)
        both = getattr(m.store, "serials", None)
        if both is None:  # a store written before ``serials``: this process's writes only
            return m.store.change_serial(m.namespace), None
        changes, bindings = both(m.namespace)
        self._see_other_writers(int(bindings))
        return int(changes), None

    def _see_other_writers(self, serial: int) -> None:
        """Drop every kept binding record and render when another process, host or manager
        wrote the agent's binding records since this one last looked (``serial`` moved by
        more than this one's writes: a release, a report, an anchor): kept, they would send
        thinking the other writer released. The window's stored messages and the stamps stay
        (they change only with the change serial)."""
        m = self.manager
        if self._binding_serial is not None and serial != self._binding_serial:
            log.info(
                "binding_written_elsewhere",
                namespace=m.namespace,
                serial=serial,
                kept=self._binding_serial,
            )
            for key in [*self._states, *self._records, *self._steady]:
                self._states.pop(key, None)
                self._records.pop(key, None)
                self._steady.pop(key, None)
        self._binding_serial = serial

    def record_for(self, key: str) -> BindingRecord:
        record = self._records.get(key)
        if record is None:
            data = self.manager.store.binding_record(self.manager.namespace, key, releases=False)
            record = BindingRecord(
                data.first_compiled,
                dict(data.releases),
                data.anchor,
                data.left_out,
                anchored_head=data.anchored_head,
            )
            self._records[key] = record
        return record

    # compile drivers
    def compile(self, head: Head, *, budget: int | None, dry_run: bool) -> CompileResult:
        """Build the next request for the current branch. See ``ContextManager.compile``."""
        steps = self._run(head, budget, dry_run)
        try:
            request = next(steps)
            while True:
                request = steps.send(self._summarize(request, allow_async=False))
        except StopIteration as done:
            result: CompileResult = done.value
            return result

    async def compile_async(
        self, head: Head, *, budget: int | None, dry_run: bool
    ) -> CompileResult:
        """``compile`` that awaits an async summarizer."""
        steps = self._run(head, budget, dry_run)
        try:
            request = next(steps)
            while True:
                text = self._summarize(request, allow_async=True)
                if inspect.isawaitable(text):
                    text = await text
                request = steps.send(_summary_text(text))
        except StopIteration as done:
            result: CompileResult = done.value
            return result

    def _summarize(self, request: FoldRequest, *, allow_async: bool) -> Any:
        strategy = self.manager.strategy
        assert isinstance(strategy, Fold)
        text = strategy.summarizer(request.covered)
        if inspect.isawaitable(text):
            if allow_async:
                return text
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return _summary_text(asyncio.run(_await(text)))
            close = getattr(text, "close", None)
            if callable(close):
                close()
            raise TypeError(
                "the Fold summarizer is async and an event loop is running: "
                "use `await cm.compile_async(head)`"
            )
        return _summary_text(text)

    # the compile itself
    def _run(
        self, head: Head, budget: int | None, dry_run: bool
    ) -> Generator[FoldRequest, str, CompileResult]:
        if not isinstance(head, Head):
            raise TypeError(f"compile needs a Head, got {head!r}")
        if budget is not None and budget <= 0:
            raise ValueError(f"budget must be a positive token count, got {budget!r}")
        m = self.manager
        key = m.current_branch_key()
        lineage = m.lineage()
        serial, since = self._serials(key, lineage)
        record = self.record_for(key)
        asked = head
        appends = m.binding.appends(head.model)
        anchor = record.anchored_head
        steady = self._steady.get(key)
        if steady is not None and not (
            steady.anchor is anchor and (steady.asked is asked or steady.asked == asked)
        ):
            steady = None
        if appends and anchor is not None:
            head = (
                steady.base
                if steady is not None
                else request_head(anchor, Sent.anchored(anchor), asked)
            )
        base_head = head
        ctx = self._context(head, record, serial, appends, anchor if appends else None)
        cache_key = _CacheKey(
            tuple(head.digests[c] for c in m.binding.bound_components()),
            m.binding.binds,
            ctx.system_notices,
            appends,
            ctx.anchor_sequence,
            m.binding.reads,
            m.binding.prefix_check,
            m.strategy,
            budget,
            m.reasoning.erase_serial() if m.reasoning is not None else 0,
        )
        repeat = key in self._states or key in self._windows
        snapshot = False
        if not repeat:  # about to be built from the store: the previous newest is compacted
            _resident.admit(self, key)
            snapshot = self._load_snapshot(key, cache_key, serial, lineage, record)
        try:
            state, extended = self._extend_cached(
                key, cache_key, serial, ctx, lineage, dry_run, since
            )
        except NotARender as err:  # a kept compact render that does not restore (never
            # expected: this process made it; a snapshot is restored above): render instead
            log.warning("compact_render_refused", branch=key, error=str(err))
            self._states.pop(key, None)
            state, snapshot, extended = None, False, 0
        if snapshot and state is not None:
            self._window_releases(state, record, key)
            log.debug("render_snapshot_restored", branch=key, messages=len(state.messages))
        limit = self._window_limit(budget)
        if state is None:
            state = self._full_render(ctx, lineage, record, serial, windowed=limit)
        appended_before = state.last_change is not None
        stored_change: StoredMessage | None = None
        new_anchor: AnchoredHead | None = None
        if appends and anchor is not None:
            unchanged = steady is not None and steady.last_change is state.last_change
            sent: Sent | None = None
            if unchanged:
                change: Change | bool | None = None  # nothing new since the last compile
            else:
                sent = (
                    Sent.from_json(state.last_change)
                    if state.last_change is not None
                    else Sent.anchored(anchor)
                )
                change = plan_change(sent, asked, inline_tools=m.binding.inline_tools)
            if change is False:  # cannot be appended: a head change as before
                anchor = new_anchor = AnchoredHead(state.last_sequence, head_json(asked))
                head = asked
                ctx = attrs.evolve(
                    self._context(asked, record, serial, appends, anchor), head_changed=True
                )
                cache_key = attrs.evolve(
                    cache_key,
                    bound=tuple(head.digests[c] for c in m.binding.bound_components()),
                    anchor_sequence=anchor.at_sequence,
                )
                state = self._full_render(ctx, lineage, record, serial, windowed=limit)
            elif isinstance(change, Change):
                if dry_run:  # shown, not stored
                    message = StoredMessage(
                        id="head_change_preview",
                        sequence=state.last_sequence + 1,
                        branch=key,
                        role="system",
                        content=change.content,
                        metadata=change.metadata,
                        created_at=_now(),
                    )
                else:
                    message = stored_change = m.store.append(
                        m.namespace, key, "system", change.content, change.metadata
                    )
                render_message(state, ctx, message)
                head = request_head(anchor, change.sent, asked)
            elif steady is not None and unchanged:
                head = steady.sent
            else:
                assert sent is not None
                head = request_head(anchor, sent, asked)
                self._steady[key] = _Steady(anchor, asked, base_head, state.last_change, head)
        elif anchor is None and m.binding.append_changes:  # the first anchor
            anchor = new_anchor = AnchoredHead(state.last_sequence, head_json(asked))
        elif anchor is not None and steady is None:  # not appending: anchor what is sent now
            if _json(anchor.head) != _json(head_json(asked)):
                anchor = new_anchor = AnchoredHead(state.last_sequence, head_json(asked))
            else:
                self._steady[key] = _Steady(anchor, asked, asked, state.last_change, asked)
        start_before = state.start

        if budget is not None:  # before a fold stores anything (issue 17 item 2)
            needed = required_tokens(state.spans)
            if needed > budget:
                raise OverBudget(budget, needed)
        strategy = m.strategy
        fold = (
            self._plan_fold(state, strategy, lineage, key, serial)
            if isinstance(strategy, Fold) and state.total_tokens > strategy.trigger_tokens
            else None
        )
        summary: StoredMessage | None = None  # the fold's summary, stored or (dry) a preview
        if fold is not None:
            request = fold
            text = yield request
            summary = self._keep_summary(request, text, state, dry_run)
            folded = self._full_render(ctx, lineage, record, serial, summary=summary)
            folded.unreported = fold_entries(state, folded)
            _carry_ages(state, folded)
            state = folded
        if limit is not None and fold is None and self._sheds() and state.total_tokens > limit[1]:
            state = self._shed(ctx, lineage, record, serial, state, limit[0])
        if limit is not None:
            target, cap = limit
            if budget is not None:
                needed = required_tokens(state.spans)
                if needed > budget:
                    raise OverBudget(budget, needed)
            mid_round = inflight_index(state) is not None
            over_budget = budget is not None and state.total_tokens > budget
            if state.total_tokens > cap and (not mid_round or over_budget):
                # mid-round, a jump would change what precedes the in-flight reply
                # (VENDOR_RULES 6): deferred until the round closes, unless over the budget
                jump = jump_anchor(state.spans, target)
                if jump is not None and jump != state.start:
                    state = self._full_render(ctx, lineage, record, serial, start=jump)
        skipped = anchor is not None and state.start > anchor.at_sequence + 1
        fresh: AnchoredHead | None = None
        if appends and (fold is not None or state.start != start_before or skipped):
            fresh = AnchoredHead(state.last_sequence, head_json(asked))
        if (
            fresh is not None
            and (
                anchor is None
                or appended_before
                or stored_change is not None
                or _json(fresh.head) != _json(anchor.head)
            )
            and (
                fold is not None
                or state.start != start_before
                or self._skips_a_change(key, lineage, anchor, state.start)
            )
        ):
            # the whole tail is re-rendered anyway: the current head becomes the anchored one,
            # and the changes appended so far become part of it (SPEC 7b); so too when a
            # window starts past a change appended since the anchor (not rendered, so the
            # request could not say it)
            again = attrs.evolve(
                self._context(asked, record, serial, appends, fresh),
                releases=ctx.releases,
            )
            opener = (
                summary
                if summary is not None and summary.id == state.summary_id
                else m.store.get(m.namespace, state.summary_id)
                if state.summary_id and state.summary_id != PREVIEW_SUMMARY_ID
                else None
            )
            before = state
            state = self._full_render(
                again, lineage, record, serial, start=state.start, summary=opener
            )
            state.unreported = before.unreported + state.unreported
            _carry_ages(before, state)
            head, anchor, new_anchor, ctx = asked, fresh, fresh, again
            cache_key = attrs.evolve(
                cache_key,
                bound=tuple(head.digests[c] for c in m.binding.bound_components()),
                anchor_sequence=fresh.at_sequence,
            )

        memo = self._windows.get(key)
        if memo is not None:
            self._sizes[key] = memo.nbytes
        if key in self._sizes:
            _resident.note(self, key, self._sizes[key], repeat=repeat)
        compile_id = f"cmp_{uuid.uuid4().hex[:16]}"
        inflight = self._inflight(
            state, memo if memo is not None and memo.serial == serial else None
        )
        body, end_chain = self._request(head, state)
        provenance = list(state.provenance)
        put_back: frozenset[tuple[MessageId, int]] = frozenset()
        end_predecessor = state.last_kept
        if inflight is not None:
            body["messages"][inflight.index] = inflight.message
            provenance[inflight.index] = inflight.entry
            put_back = frozenset(inflight.put_back)
            end_predecessor = last_signature(body["messages"])
        body = place_breakpoints(body, m.caching)
        entries = [
            e for e in _report_entries(state, record) if (e.message_id, e.block) not in put_back
        ]
        strip = _strip(
            [e for e in entries if not _already_out(e, record)],
            record.first_compiled,
            key,
            compile_id,
        )
        restored = _restored(state, record)
        if not dry_run:
            left_out = frozenset(state.left_out) - put_back
            held = [e for e in state.unreported if (e.message_id, e.block) in put_back]
            self._commit(key, record, state, entries, left_out, limit is not None, new_anchor)
            state.unreported = held  # sent as recorded now; reported once the round closes
            if put_back:
                # the request differs from the render (the in-flight reply as recorded): the
                # next compile judges afresh, so what is reported once the round closes reads
                # the head of that compile, not this one's
                self._states.pop(key, None)
            else:
                self._states[key] = (cache_key, state)
                if not repeat and (not snapshot or extended >= SNAPSHOT_REFRESH_MESSAGES):
                    # rendered from the stored messages, or restored from a snapshot far behind
                    self._save_snapshot(key, cache_key, state, lineage)
        result = CompileResult(
            request=body,
            provenance=tuple(provenance) + _tail_provenance(body, state),
            thinking_strip=strip,
            compile_id=compile_id,
            dry=dry_run,
            tokens=request_tokens(m.estimator, body)
            or state.total_tokens + self._head_tokens(head),
            branch=key,
            namespace=m.namespace,
            head_digests=dict(head.digests),
            end_chain=end_chain,
            manager_token=m.token,
            last_sequence=state.last_sequence,
            end_predecessor=end_predecessor,
            restored=restored,
            appended=() if stored_change is None else (stored_change.id,),
            unreadable=tuple(state.unread.values()),
            start_sequence=state.start,
        )
        if strip is not None and not dry_run:
            log.info(
                "thinking_stripped",
                namespace=m.namespace,
                branch=key,
                compile_id=compile_id,
                cause=strip.cause,
                changed=list(strip.changed),
                replies=len(strip.replies),
                blocks=strip.blocks,
            )
        return result

    def _context(
        self,
        head: Head,
        record: BindingRecord,
        serial: int,
        appends: bool = False,
        anchor: AnchoredHead | None = None,
    ) -> RenderContext:
        m = self.manager
        checks = m.binding.prefix_check(head.model)
        return RenderContext(
            appends=appends,
            anchor_sequence=-1 if anchor is None else anchor.at_sequence,
            binds=m.binding.binds,
            system_notices=m.binding.system_role(head.model),
            digests=head.digests,
            bound=m.binding.bound_components(),
            releases=record.releases,
            stamps=self._stamps,
            estimator=m.estimator,
            resolve=m.resolve_reasoning,
            model=head.model,
            reads=m.binding.reads,
            checks_prefix=checks,
            unedited_below=self._unedited_below(serial) if m.binding.binds and not checks else 0,
        )

    def _unedited_below(self, serial: int) -> int:
        """The lowest stored sequence ever edited in this agent (every lower one is as first
        stored), or one past any sequence when nothing was: read once per change ``serial``."""
        m = self.manager
        if self._unedited is None or self._unedited[0] != serial:
            first = m.store.changed_since(m.namespace, 0)
            self._unedited = (serial, sys.maxsize if first is None else first)
        return self._unedited[1]

    def _inflight(self, state: RenderState, memo: _WindowMemo | None) -> Restored | None:
        """The open round's reply as recorded, when the rules would alter it (SPEC 7); read
        from ``memo`` (the stored messages this render read, at this change serial) when it
        holds it near its end, as it does in a tool loop, else from the store.

        Raises:
            InFlightThinkingInvalid: it carries failing thinking and ``drop_block`` is off.
        """
        m = self.manager
        if not m.binding.binds:
            return None

        def read(mid: MessageId) -> StoredMessage:
            for message in reversed(memo.messages[-INFLIGHT_LOOKBACK:] if memo else ()):
                if message.id == mid:
                    return message
            return m.store.get(m.namespace, mid)

        inflight = restore_inflight(state, read, m.resolve_reasoning)
        if inflight is not None and not m.binding.drop_block:
            mid = inflight.put_back[0][0]
            raise InFlightThinkingInvalid(mid, tuple(b for _, b in inflight.put_back))
        return inflight

    def _sheds(self) -> bool:
        strategy = self.manager.strategy
        return self.manager.binding.binds and (
            not isinstance(strategy, Window) or strategy.shed_thinking
        )

    def _shed(
        self,
        ctx: RenderContext,
        lineage: Lineage,
        record: BindingRecord,
        serial: int,
        state: RenderState,
        target: int,
    ) -> RenderState:
        """Re-render with the oldest sent thinking shed down to ``target`` tokens (SPEC 7).

        Shed replies are released at commit and reported (cause ``messages``, or ``first``).
        """
        shed = plan_shed(state, self.manager.estimator, state.total_tokens - target)
        if not shed:
            return state
        releases = dict(record.releases)
        for message_id, block in shed.items():
            prior = releases.get(message_id)
            low = block if prior is None else min(prior.from_block, block)
            releases[message_id] = Release(message_id, low, False)
        shed_ctx = attrs.evolve(ctx, releases=releases)
        pending = list(state.unreported)
        again = self._full_render(shed_ctx, lineage, record, serial, start=state.start)
        marked = [  # a block the model cannot read keeps that cause: it was lost to it first
            attrs.evolve(e, reason="shed" if e.reason != "head" else e.reason, kind="release")
            if e.kind == "released"
            and e.message_id in shed
            and ((prior := record.releases.get(e.message_id)) is None or e.block < prior.from_block)
            else e
            for e in again.unreported
        ]
        again.unreported = [*pending, *marked]
        _carry_ages(state, again)
        log.info(
            "thinking_shed",
            namespace=self.manager.namespace,
            replies=len(shed),
            tokens_before=state.total_tokens,
            tokens_after=again.total_tokens,
        )
        return again

    def _window_limit(self, budget: int | None) -> tuple[int, int] | None:
        """``(target after a jump, cap that triggers one)`` or ``None`` for no window."""
        strategy = self.manager.strategy
        limits: list[tuple[int, int]] = []
        if isinstance(strategy, Window):
            limits.append((int(strategy.max_tokens * strategy.reanchor), strategy.max_tokens))
        if budget is not None:
            limits.append((int(budget * BUDGET_REANCHOR), budget))
        return min(limits, key=lambda pair: pair[1]) if limits else None

    def _extend_cached(
        self,
        key: str,
        cache_key: _CacheKey,
        serial: int,
        ctx: RenderContext,
        lineage: Lineage,
        dry_run: bool,
        fresh: _Fresh | None = None,
    ) -> tuple[RenderState | None, int]:
        """The cached render extended by the messages stored since (and how many), or
        ``None`` when it cannot be (none kept, another key or change serial, a new summary).
        ``fresh``: what was stored since a sequence, read with the serials (used when that
        sequence is still the render's last)."""
        cached = self._states.get(key)
        if cached is None or cached[0] != cache_key or cached[1].change_serial != serial:
            return None, 0
        m = self.manager
        last = cached[1].last_sequence
        new = (
            fresh.messages
            if fresh is not None and fresh.after == last
            else m.store.read(m.namespace, lineage, after=last)
        )
        if any(message.metadata.kind == SUMMARY_KIND for message in new):
            return None, 0
        if isinstance(cached[1], CompactRender):
            compact = cached[1]
            state = compact.restore()
            self._sizes[key] = self._sizes.get(key, compact.raw_size)
            if not dry_run:
                cached = (cached[0], state)
                self._states[key] = cached
        else:
            state = cached[1].copy() if dry_run else cached[1]
        self._prefetch(new, self.record_for(key), key)
        memo = self._windows.get(key)
        if (
            memo is not None
            and memo.serial == serial
            and memo.lineage == lineage
            and memo.last() == cached[1].last_sequence
        ):
            memo.messages.extend(new)
            ctx = attrs.evolve(ctx, pieces=memo.pieces)
        else:
            self._windows.pop(key, None)
            memo = None
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
        replies = [
            msg
            for msg in messages
            if msg.role == "assistant" and any(isinstance(b, THINKING_TYPES) for b in msg.content)
        ]
        unknown = [msg.id for msg in replies if msg.id not in record.looked_up]
        if unknown:
            record.releases.update(
                self.manager.store.releases(self.manager.namespace, key, unknown)
            )
            record.looked_up.update(unknown)
        needed = [msg.id for msg in replies if not _all_thinking_reported(msg, record.releases)]
        wanted = [mid for mid in needed if mid not in self._stamps]
        overflow = len(self._stamps) + len(wanted) - self.stamp_cache_limit
        if overflow > 0:
            keep = set(needed)
            for mid in [k for k in self._stamps if k not in keep][:overflow]:
                del self._stamps[mid]
        if wanted:
            loaded = self.manager.store.stamps(self.manager.namespace, wanted)
            for stamp in loaded.values():
                self._share_head(stamp)
            self._stamps.update(loaded)

    def _share_head(self, stamp: dict[str, Any]) -> None:
        """Let stamps made under one head share one ``head`` dict (and model string): a window's
        stamps mostly repeat them, and each copy costs more than the stamp's own seals."""
        head = stamp.get("head")
        if isinstance(head, dict) and all(isinstance(v, str) for v in head.values()):
            shared = self._heads.setdefault(tuple(sorted(head.items())), head)
            stamp["head"] = shared
        model = stamp.get("model")
        if isinstance(model, str):
            stamp["model"] = self._heads_models.setdefault(model, model)

    def _latest_summary(self, lineage: Lineage) -> StoredMessage | None:
        m = self.manager
        found = m.store.read(m.namespace, lineage, kind=SUMMARY_KIND, limit=1, newest_first=True)
        return found[0] if found else None

    @_resident.paused_collector
    def _full_render(
        self,
        ctx: RenderContext,
        lineage: Lineage,
        record: BindingRecord,
        serial: int,
        *,
        start: int | None = None,
        summary: StoredMessage | None = None,
        windowed: tuple[int, int] | None = None,
    ) -> RenderState:
        m = self.manager
        if summary is None:
            summary = self._latest_summary(lineage)
        base = covers_upto(summary) + 1 if summary is not None else 0
        if start is None and windowed is not None:
            if record.anchor is not None and record.anchor >= base:
                start = record.anchor
            else:
                start = self._cold_anchor(lineage, base, windowed)
        start = max(base, start or 0)
        key = m.current_branch_key()
        memo = self._read_window(key, lineage, start, serial)
        messages = memo.messages
        self._prefetch(messages, record, key)
        ctx = attrs.evolve(ctx, pieces=memo.pieces)
        state = RenderState(chain=CHAIN_SEED, start=start, change_serial=serial)
        stamps = self._stamps
        if any(stamps[m.id].get("v") == LEGACY_STAMP_VERSION for m in messages if m.id in stamps):
            state.legacy_chain = LEGACY_CHAIN_SEED
        if summary is not None:
            state.summary_id = summary.id
            render_text_prefix(state, ctx, summary, "summary")
        encoded = memo.nbytes  # the blocks carried from the last render, then the new ones
        for message in messages:
            encoded += render_message(state, ctx, message)
        memo.nbytes = encoded
        return state

    def _read_window(self, key: str, lineage: Lineage, start: int, serial: int) -> _WindowMemo:
        """The stored messages from ``start`` on: what the last render read is reused, only
        newer messages are read (O(new)), or the window when that does not cover ``start``."""
        m = self.manager
        memo = self._windows.get(key)
        pieces: Pieces = {}
        if memo is not None and memo.serial == serial and memo.lineage == lineage:
            pieces = memo.pieces
            if memo.start <= start:
                newer = m.store.read(m.namespace, lineage, after=memo.last())
                messages = [*memo.messages, *newer]
            else:
                messages = m.store.read(m.namespace, lineage, after=start - 1)
        else:
            messages = m.store.read(m.namespace, lineage, after=start - 1)
        first = bisect.bisect_left(messages, start, key=lambda msg: msg.sequence)
        messages = messages[first:]
        if pieces:
            pieces = {msg.id: pieces[msg.id] for msg in messages if msg.id in pieces}
        memo = _WindowMemo(lineage, serial, start, messages, pieces, _piece_bytes(pieces))
        self._windows[key] = memo
        return memo

    def _cold_anchor(self, lineage: Lineage, base: int, limit: tuple[int, int]) -> int:
        """A window start found from the newest message backwards, reading O(window).

        ``limit`` is the compile's ``(target, cap)`` (a ``Window``'s, a budget's, or the lower);
        a history from ``base`` that fits the cap starts at ``base``. A stored summary is not a
        start: what it does not cover starts at ``base``. Otherwise the window starts where the
        newest reply's window started when that still fits (``_made_at``), else it jumps.
        """
        m = self.manager
        cap = max(limit[1], 1)
        spans: list[Span] = []
        tail = 0
        upto: int | None = None
        newest_reply: StoredMessage | None = None
        answered = True  # every message after the newest reply answers its tool calls
        while tail <= cap:
            chunk = m.store.read(
                m.namespace, lineage, upto=upto, limit=READ_CHUNK, newest_first=True
            )
            chunk = [msg for msg in chunk if msg.sequence >= base]
            if not chunk:
                break
            upto = chunk[-1].sequence - 1
            for msg in chunk:
                if newest_reply is None:
                    if msg.role == "assistant":
                        newest_reply = msg
                    elif msg.role == "user":
                        answered = answered and answers_tools(msg)
                tokens = m.estimator(
                    {"role": msg.role, "content": [block_to_wire(b) for b in msg.content]}
                )
                tail += tokens
                if msg.metadata.kind == SUMMARY_KIND:
                    continue  # rendered first whatever the start: never a start itself
                spans.append(Span(msg.sequence, tokens, is_clean_start(msg)))
            if len(chunk) < READ_CHUNK:
                break
        if tail <= cap:
            return base
        open_round = (
            newest_reply is not None
            and answered
            and any(isinstance(b, ToolUseBlock) for b in newest_reply.content)
        )
        made_at = self._made_at(newest_reply, spans, base, None if open_round else cap)
        if made_at is not None:
            return made_at
        anchor = jump_anchor(spans[::-1], limit[0])
        return anchor if anchor is not None else base

    def _made_at(
        self, reply: StoredMessage | None, spans: Sequence[Span], base: int, cap: int | None
    ) -> int | None:
        """Where ``reply``'s window started (its stamp's ``start``), when that is a clean
        start at or after ``base`` and the tail from it fits ``cap`` (``None``: an open round's
        reply, which goes out as recorded, VENDOR_RULES 6: a window does not jump mid-round,
        so it starts where the reply was made whatever the cap; shedding still applies). A
        branch with no window start of its own (made at an earlier point, ``branch_at``) then
        starts where its newest reply was made, so that reply's thinking stays valid.
        ``spans``: newest first. One stamp read."""
        if reply is None:
            return None
        m = self.manager
        stamp = m.store.stamps(m.namespace, [reply.id]).get(reply.id) or {}
        start = stamp.get("start")
        if not isinstance(start, int) or not base <= start <= reply.sequence:
            return None
        if cap is None:
            return start
        tail = 0
        for span in spans:
            if span.sequence < start:
                break
            tail += span.tokens
        clean = any(span.sequence == start and span.clean for span in spans)
        return start if clean and tail <= cap else None

    def _plan_fold(
        self, state: RenderState, strategy: Fold, lineage: Lineage, key: str, serial: int
    ) -> FoldRequest | None:
        m = self.manager
        window = [
            msg
            for msg in self._read_window(key, lineage, state.start, serial).messages
            if msg.metadata.kind != SUMMARY_KIND
        ]
        previous = m.store.get(m.namespace, state.summary_id) if state.summary_id else None
        return plan_fold(
            window, previous, state.spans, strategy.keep_tokens, bool(kept_thinking(state))
        )

    def _keep_summary(
        self, request: FoldRequest, text: str, state: RenderState, dry_run: bool
    ) -> StoredMessage:
        m = self.manager
        content, meta = summary_parts(request, text)
        if dry_run:
            return StoredMessage(
                id=PREVIEW_SUMMARY_ID,
                sequence=state.last_sequence,
                branch=m.current_branch_key(),
                role="user",
                content=tuple(content),
                metadata=meta,
                created_at=_now(),
            )
        stored = m.store.append(m.namespace, m.current_branch_key(), "user", content, meta)
        log.info(
            "folded",
            namespace=m.namespace,
            branch=m.current_branch_key(),
            summary=stored.id,
            covers_upto=request.covers_upto,
            covered=len(request.covered),
        )
        return stored

    def _request(self, head: Head, state: RenderState) -> tuple[dict[str, Any], bytes]:
        binding = self.manager.binding
        request: dict[str, Any] = {k: v for k, v in head.settings.items() if k != "betas"}
        request["model"] = head.model
        if head.system:
            request["system"] = (
                head.system if isinstance(head.system, str) else [dict(b) for b in head.system]
            )
        if head.tools:
            request["tools"] = [dict(t) for t in head.tools]
        request.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        betas = [str(b) for b in head.settings.get("betas", ())]
        if binding.binds and head.thinking_enabled:
            if BINDING_BETA not in betas:
                betas.append(BINDING_BETA)
            if binding.drop_block:
                thinking = dict(head.settings["thinking"])
                thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
                request["thinking"] = thinking
        tail = close_tool_round(state)
        for beta in sorted(state.betas.union(*(system_betas(t) for t in tail))):
            if beta not in betas:
                betas.append(beta)
        if betas:
            request["betas"] = betas
        chain = state.chain
        for message in tail:
            for block in message["content"]:
                if not is_wire_thinking(block):
                    chain = feed_block(chain, message["role"], block)
        request["messages"] = [*state.messages, *tail]
        return request, chain

    def _head_tokens(self, head: Head) -> int:
        return int(self.manager.estimator({"system": head.system, "tools": list(head.tools)}))

    def _commit(
        self,
        key: str,
        record: BindingRecord,
        state: RenderState,
        entries: Sequence[StripEntry],
        left_out: frozenset[tuple[MessageId, int]],
        windowed: bool,
        anchored_head: AnchoredHead | None = None,
    ) -> None:
        """Write what is permanent (new releases, reports), the left-out set and the anchor."""
        m = self.manager
        releases: dict[MessageId, int] = {}
        reported: list[MessageId] = []
        for entry in entries:
            if entry.kind == "released":
                reported.append(entry.message_id)
            elif entry.kind == "release":
                prior = releases.get(entry.message_id)
                releases[entry.message_id] = (
                    entry.block if prior is None else min(prior, entry.block)
                )
        anchor = state.start if windowed and state.start != record.anchor else None
        left_changed = left_out != record.left_out
        if (
            record.first_compiled
            and not releases
            and not reported
            and anchor is None
            and not left_changed
            and anchored_head is None
        ):
            state.unreported = []
            return
        m.store.commit_binding(
            m.namespace,
            key,
            first_compiled=True,
            releases=sorted(releases.items()),
            reported=reported,
            anchor=anchor,
            left_out=sorted(left_out) if left_changed else None,
            at_sequence=state.last_sequence,
            anchored_head=anchored_head,
        )
        self.wrote_binding()
        record.first_compiled = True
        if anchored_head is not None:
            record.anchored_head = anchored_head
        record.left_out = left_out
        if anchor is not None:
            record.anchor = anchor
        for message_id, block in releases.items():
            prior_release = record.releases.get(message_id)
            low = block if prior_release is None else min(prior_release.from_block, block)
            record.releases[message_id] = Release(
                message_id, low, True, at_sequence=state.last_sequence
            )
        for message_id in reported:
            prior_release = record.releases.get(message_id)
            if prior_release is not None:
                record.releases[message_id] = attrs.evolve(prior_release, reported=True)
        state.unreported = []

    # replies
    def record_reply(
        self,
        message: object,
        result: CompileResult,
        *,
        appended: Sequence[object],
        extra: Mapping[str, Any] | None = None,
    ) -> MessageId:
        """Store an assistant reply, stamping each thinking block against what produced it.

        Raises:
            ValueError: ``result`` is dry, from another manager, or from another branch.
            TypeError: the reply's content is not blocks, wire dicts or an SDK message.
        """
        m = self.manager
        if not isinstance(result, CompileResult):
            raise TypeError(
                f"record_reply needs the CompileResult that produced it, got {result!r}"
            )
        if result.dry:
            raise ValueError(
                f"compile {result.compile_id} was a dry run; record replies against a "
                "committing compile"
            )
        if result.manager_token != m.token:
            raise ValueError(
                f"compile {result.compile_id} came from another context manager; record the "
                "reply on the manager that compiled it"
            )
        if result.branch != m.current_branch_key():
            raise ValueError(
                f"compile {result.compile_id} was for branch {result.branch}, but the current "
                f"branch is {m.current_branch_key()}; switch back before recording"
            )
        blocks = reply_blocks(message)
        stamped = stamp_reply(blocks, result, appended)
        for index in stamped.unsigned:
            log.warning(
                "thinking_unsigned",
                namespace=m.namespace,
                compile_id=result.compile_id,
                block=index,
                note="stored, never sent",
            )
        stamp, signatures = stamped.stamp, list(stamped.signatures)
        if m.reasoning is not None:
            blocks = m.capture_reasoning(blocks, result)
        stored = m.store.append(
            m.namespace,
            result.branch,
            "assistant",
            blocks,
            MessageMeta(extra={**(extra or {}), **reply_extra(message)}),
            stamp=stamp,
            signatures=signatures,
        )
        self._stamps[stored.id] = stamp
        record = self._records.get(result.branch)
        if record is not None:  # a reply just stored has no release: none to read for it
            record.looked_up.add(stored.id)
        return stored.id


def _all_thinking_reported(message: StoredMessage, releases: Mapping[MessageId, Release]) -> bool:
    """Whether every thinking block of ``message`` is released and reported (never judged)."""
    release = releases.get(message.id)
    if release is None:
        return False
    for index, block in enumerate(message.content):
        if isinstance(block, THINKING_TYPES) and not release.reported_at(index):
            return False
    return True


def _report_entries(state: RenderState, record: BindingRecord) -> list[StripEntry]:
    """What this compile newly leaves out, oldest first: released or covered blocks not yet
    reported, and blocks left out now that the last committing compile did not leave out."""
    seen: set[tuple[MessageId, int]] = set()
    entries: list[StripEntry] = []
    fresh = [e for spot, e in state.left_out.items() if spot not in record.left_out]
    for entry in [*state.unreported, *fresh]:
        spot = (entry.message_id, entry.block)
        if spot in seen or spot in state.kept_thinking:
            continue
        seen.add(spot)
        entries.append(entry)
    age = state.sequences
    return sorted(entries, key=lambda e: (age.get(e.message_id, -1), e.block))


def _already_out(entry: StripEntry, record: BindingRecord) -> bool:
    """A block released or folded away now that the last committing compile had already left
    out (or sent knowing the model cannot read it): its loss was reported then, so the strip
    does not name it again (its release is recorded)."""
    return entry.kind in ("released", "release", "covered") and (
        entry.message_id,
        entry.block,
    ) in record.left_out


def _carry_ages(before: RenderState, after: RenderState) -> None:
    """Give ``after`` the age of every reply its unreported entries carry over from
    ``before`` (a re-render that no longer meets them: a fold covered them), so the strip
    stays oldest first."""
    for entry in after.unreported:
        sequence = before.sequences.get(entry.message_id)
        if sequence is not None:
            after.sequences.setdefault(entry.message_id, sequence)


def _restored(state: RenderState, record: BindingRecord) -> tuple[MessageId, ...]:
    """Replies whose thinking the last committing compile left out and this one sends."""
    back = record.left_out & state.kept_thinking
    if not back:
        return ()
    age = state.sequences
    return tuple(
        dict.fromkeys(mid for mid, _ in sorted(back, key=lambda s: (age.get(s[0], -1), s[1])))
    )


def _strip(
    entries: Sequence[StripEntry], first_compiled: bool, key: str, compile_id: str
) -> ThinkingStrip | None:
    if not entries:
        return None
    first = entries[0]
    if first.reason == "head":
        cause, changed = "head", first.changed
    elif not first_compiled:
        cause, changed = "first", ()
    else:
        cause, changed = "messages", ()
    replies = tuple(dict.fromkeys(entry.message_id for entry in entries))
    return ThinkingStrip(
        cause=cause,  # type: ignore[arg-type]
        changed=changed,
        replies=replies,
        blocks=len(entries),
        branch=key,
        compile_id=compile_id,
    )


def _tail_provenance(request: dict[str, Any], state: RenderState) -> tuple[ProvenanceEntry, ...]:
    extra = len(request["messages"]) - len(state.messages)
    return tuple(ProvenanceEntry(kind="synthetic") for _ in range(extra))


def _json(value: Any) -> str:
    return canonical_json(value)


def _summary_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a Fold summarizer must return text, got {value!r}")
    return value


async def _await(value: Any) -> Any:
    return await value


def _now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC)
