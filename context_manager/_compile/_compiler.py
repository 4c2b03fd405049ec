"""The compiler: builds each request as a fixed pipeline of stages, then commits once.

The stages, in order (each a function of its inputs returning a new frozen ``Draft`` and the
``Effects`` it wants; see ``_run``):

1. read the branch (``_stage_read``): the serials, what was stored since, the binding record;
2. plan the head (``_stage_head.plan_head``): the anchored head while changes are appended;
3. render (``_stage_render``): extend the kept render, restore a snapshot, or render the window;
4. the change (``_stage_head.append_change``): the ``head-change`` to append, or a head change;
5. pressure (``_pressure.PRESSURE``): refuse what cannot fit, context editing (none yet),
   compaction or fold, shedding, then a window jump;
6. re-anchor (``_stage_reanchor``);
7. the in-flight round (``_stage_finish.inflight_round``);
8. finish the request (``_stage_finish.finish_request``): settings, betas, cache markers;
9. the report (``_stage_report``): the strip, the restored replies, the binding write;
10. commit (``_commit``): every effect in one store batch. A dry run stops before it.

Every check that can raise runs before the commit, so a refused compile writes nothing (and
drops the branch's cached render, which it may have extended). State per branch lives in one
``BranchCache`` (``_branch``); stamps in a bounded ``StampCache``. A steady compile reads only
the messages stored since the last one and renders only those: O(new), not O(history).
"""

from __future__ import annotations

import asyncio
import bisect
import inspect
import sys
import weakref
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

import attrs

from context_manager._binding._chain import CHAIN_SEED, LEGACY_CHAIN_SEED
from context_manager._binding._stamp import LEGACY_STAMP_VERSION, stamp_reply
from context_manager._model._content import (
    THINKING_TYPES,
    ToolUseBlock,
    block_to_wire,
    reply_blocks,
)
from context_manager._model._errors import InFlightThinkingInvalid, InvalidType, InvalidValue
from context_manager._model._head import Head
from context_manager._model._log import library_logger
from context_manager._model._messages import (
    HEAD_CHANGE_KIND,
    MessageId,
    MessageMeta,
    StoredMessage,
)
from context_manager._model._results import CompileResult, ProvenanceEntry
from context_manager._model._usage import reply_extra
from context_manager._store._protocol import AnchoredHead, Lineage, Release

from . import _resident, _snapshot
from ._branch import (
    BindingRecord,
    BranchCache,
    CacheKey,
    Fresh,
    WindowMemo,
    piece_bytes,
)
from ._commit import commit
from ._compact import CompactRender, NotARender
from ._fold import SUMMARY_KIND, FoldRequest, answers_tools, covers_upto, kept_thinking, plan_fold
from ._host import CompileHost
from ._inflight import Restored, restore_inflight
from ._pressure import PRESSURE
from ._render import (
    RenderContext,
    RenderState,
    Span,
    is_clean_start,
    render_message,
    render_text_prefix,
)
from ._run import PREVIEW_SUMMARY_ID, Draft, Rendered, Run
from ._selection import jump_anchor
from ._shed import plan_shed
from ._stage_finish import (
    BINDING_BETA,
    DEFAULT_MAX_TOKENS,
    end_predecessor,
    finish_request,
    inflight_round,
)
from ._stage_fold import carry_ages
from ._stage_head import append_change, plan_head
from ._stage_read import BUDGET_REANCHOR, read_branch
from ._stage_reanchor import reanchor
from ._stage_render import render
from ._stage_report import SNAPSHOT_REFRESH_MESSAGES, report
from ._stamp_cache import STAMP_CACHE_LIMIT, StampCache
from ._strategies import Fold, Window, estimate_tokens
from ._tokens import request_tokens

log = library_logger("context_manager.compile")

INFLIGHT_LOOKBACK = 16
"""How many of a render's newest stored messages are searched for the in-flight reply before
the store is read (it is the newest assistant message: only results and notices follow it)."""

READ_CHUNK = 512
"""Messages read per step when finding a window's start from the newest backwards."""

__all__ = [
    "BINDING_BETA",
    "BUDGET_REANCHOR",
    "DEFAULT_MAX_TOKENS",
    "PREVIEW_SUMMARY_ID",
    "READ_CHUNK",
    "SNAPSHOT_REFRESH_MESSAGES",
    "STAMP_CACHE_LIMIT",
    "BindingRecord",
    "CompileHost",
    "Compiler",
]


class Compiler:
    """Compiles requests and records replies for one ``CompileHost``."""

    def __init__(self, manager: CompileHost) -> None:
        # a proxy: no cycle between the manager and its compiler, so a manager the host drops
        # frees its cached renders at once (and leaves the per-process bound), not at a collection
        self.manager: CompileHost = weakref.proxy(manager)
        self._caches: dict[str, BranchCache] = {}
        """Everything held per branch key (``BranchCache``)."""
        self._stamps = StampCache()
        self._unedited: tuple[int, int] | None = None
        """``(change serial, _unedited_below())`` as last read (per agent, not per branch)."""
        self._binding_serial: int | None = None
        """The agent's binding serial the kept records and renders reflect (``None``: not read
        yet, or the store cannot say)."""

    @property
    def stamp_cache_limit(self) -> int:
        """Stamps kept in memory; the oldest not needed by the current render go first."""
        return self._stamps.limit

    @stamp_cache_limit.setter
    def stamp_cache_limit(self, limit: int) -> None:
        self._stamps.limit = limit

    def cache(self, key: str) -> BranchCache:
        """Branch ``key``'s cache (made empty on first use)."""
        found = self._caches.get(key)
        if found is None:
            found = self._caches[key] = BranchCache()
        return found

    def caches(self) -> Iterator[tuple[str, BranchCache]]:
        """Every branch cache held, by key (for the model-based tests' ``_check``)."""
        return iter(list(self._caches.items()))

    # cache control
    def forget(self, key: str) -> None:
        """Drop everything held for branch ``key`` (it was deleted, or its run or fork ended):
        one ``pop`` of its ``BranchCache``, and the stamps only its render read. O(its window,
        plus the other cached windows when stamps are kept for them)."""
        cache = self._caches.pop(key, None)
        memo = cache.window if cache is not None else None
        if memo is not None and len(self._stamps):
            others = {
                msg.id
                for other in self._caches.values()
                if other.window is not None
                for msg in other.window.messages
            }
            self._stamps.drop(
                msg.id
                for msg in [*memo.messages, *self._recorded_since(memo)]
                if msg.id not in others
            )
        self._release_unused()
        _resident.forget(self, key)

    def _recorded_since(self, memo: WindowMemo) -> list[StoredMessage]:
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
        for key in list(self._caches):
            self.forget(key)
        self._stamps.clear()

    def held(self) -> dict[str, int]:
        """What is held in memory now, counted: render states, binding records, window memos,
        steady plans and stamps (for tests and diagnostics)."""
        caches = self._caches.values()
        return {
            "states": sum(c.render is not None for c in caches),
            "records": sum(c.record is not None for c in caches),
            "windows": sum(c.window is not None for c in caches),
            "steady": sum(c.steady is not None for c in caches),
            "stamps": len(self._stamps),
        }

    def drop_render(self, key: str) -> None:
        """Drop branch ``key``'s cached render (the per-process bound evicted it); its next
        compile re-renders the window from the store."""
        cache = self._caches.get(key)
        if cache is not None:
            cache.drop_render()
            if cache.empty():
                del self._caches[key]
        self._release_unused()

    def compact_render(self, key: str) -> int | None:
        """Keep branch ``key``'s render compact (``_resident`` pushed it out of the hot tier):
        its Python objects and the window's stored messages are freed; its next compile
        restores the render. Returns the compact size (``None``: nothing was kept)."""
        cache = self._caches.get(key)
        entry = cache.render if cache is not None else None
        if cache is not None:
            cache.window = None
        if cache is None or entry is None:
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
        if cache.render is entry:  # not compiled meanwhile (another thread)
            cache.render = (entry[0], compact)
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

    def skips_a_change(
        self, key: str, lineage: Lineage, anchor: AnchoredHead | None, start: int
    ) -> bool:
        """True when a window starting at ``start`` leaves out a ``head-change`` message stored
        after ``anchor``: the request could not say it. One store read per branch, anchor and
        start (remembered), made only when a compile would re-anchor for it."""
        if anchor is None or start <= anchor.at_sequence + 1:
            return False
        asked = (anchor.at_sequence, start)
        cache = self.cache(key)
        known = cache.skips
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
        cache.skips = (asked, found)
        return found

    def _load_snapshot(
        self,
        key: str,
        cache_key: CacheKey,
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
        cache = self.cache(key)
        cache.render = (cache_key, state)
        cache.size = compact.raw_size if cache.size is None else cache.size
        return True

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
        if not any(
            c.render is not None and isinstance(c.render[1], RenderState)
            for c in self._caches.values()
        ):
            self._stamps.clear_shared()

    def invalidate(self, key: str) -> None:
        """Re-read branch ``key``'s binding record and re-render it at the next compile."""
        self.forget(key)

    def wrote_binding(self) -> None:
        """This manager wrote one binding record (a release, a commit): the agent's binding
        serial moved by one, and what is kept already reflects it."""
        if self._binding_serial is not None:
            self._binding_serial += 1

    def serials(self, key: str, lineage: Lineage) -> tuple[int, Fresh | None]:
        """The agent's change serial, after seeing other writers (``_see_other_writers``),
        and, when branch ``key`` keeps a render, what was stored since it in the same call
        (``Store.serials_and_read``: one round trip where the store has them)."""
        m = self.manager
        cache = self._caches.get(key)
        kept = cache.render if cache is not None else None
        with_read = getattr(m.store, "serials_and_read", None)
        if kept is not None and with_read is not None:
            after = kept[1].last_sequence
            changes, bindings, new = with_read(m.namespace, lineage, after)
            self._see_other_writers(int(bindings))
            return int(changes), Fresh(after, new)
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
            for cache in self._caches.values():
                cache.render = cache.record = cache.steady = None
        self._binding_serial = serial

    def record_for(self, key: str) -> BindingRecord:
        """Branch ``key``'s binding record (read once, then kept in its cache)."""
        cache = self.cache(key)
        record = cache.record
        if record is None:
            data = self.manager.store.binding_record(self.manager.namespace, key, releases=False)
            record = cache.record = BindingRecord(
                data.first_compiled,
                dict(data.releases),
                data.anchor,
                data.left_out,
                anchored_head=data.anchored_head,
            )
        return record

    # compile drivers
    def compile(self, head: Head, *, budget: int | None, dry_run: bool) -> CompileResult:
        """Build the next request for the current branch. See ``ContextManager.compile``."""
        key = self.manager.current_branch_key()
        steps = self._run(head, budget, dry_run)
        try:
            request = next(steps)
            while True:
                request = steps.send(self._summarize(request, allow_async=False))
        except StopIteration as done:
            result: CompileResult = done.value
            return result
        except BaseException:
            self._refused(key, steps)
            raise

    async def compile_async(
        self, head: Head, *, budget: int | None, dry_run: bool
    ) -> CompileResult:
        """``compile`` that awaits an async summarizer."""
        key = self.manager.current_branch_key()
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
        except BaseException:
            self._refused(key, steps)
            raise

    def _refused(self, key: str, steps: Generator[FoldRequest, str, CompileResult]) -> None:
        """A compile raised: nothing was committed, and its branch's kept render (which it may
        have extended by a preview) and record are dropped (re-read at the next compile)."""
        steps.close()
        cache = self._caches.get(key)
        if cache is not None:
            cache.drop_render()
            cache.record = None
        self._release_unused()

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
            raise InvalidType(
                "the Fold summarizer is async and an event loop is running: "
                "use `await cm.compile_async(head)`"
            )
        return _summary_text(text)

    # the compile itself: the stages in order (see the module docstring)
    def _run(
        self, head: Head, budget: int | None, dry_run: bool
    ) -> Generator[FoldRequest, str, CompileResult]:
        run = read_branch(self, head, budget, dry_run)
        draft = render(run, *plan_head(run))
        draft = append_change(run, draft)
        for stage in PRESSURE:
            draft = yield from stage(run, draft)
        draft = reanchor(run, draft)
        draft = inflight_round(run, draft)
        draft = finish_request(run, draft)
        draft = report(run, draft)
        appended: tuple[MessageId, ...] = ()
        if not dry_run:
            stored = commit(run, draft)
            appended = tuple(
                s.id
                for s, p in zip(stored, draft.pending(), strict=True)
                if p.metadata.kind == HEAD_CHANGE_KIND
            )
            self._keep(run, draft)
        return self._result(run, draft, appended)

    def _keep(self, run: Run, draft: Draft) -> None:
        """After the commit: keep the render for the next compile (and its snapshot)."""
        state, cache = draft.state, self.cache(run.key)
        put_back = frozenset(draft.inflight.put_back) if draft.inflight is not None else ()
        # sent as recorded now; reported once the round closes
        state.unreported = [e for e in state.unreported if (e.message_id, e.block) in put_back]
        if put_back:
            # the request differs from the render (the in-flight reply as recorded): the
            # next compile judges afresh, so what is reported once the round closes reads
            # the head of that compile, not this one's
            cache.render = None
            return
        cache.render = (draft.cache_key, state)
        if draft.effects.snapshot:
            # rendered from the stored messages, or restored from a snapshot far behind
            self._save_snapshot(run.key, draft.cache_key, state, run.lineage)

    def _result(self, run: Run, draft: Draft, appended: tuple[MessageId, ...]) -> CompileResult:
        m, state, body = self.manager, draft.state, draft.body
        provenance = list(state.provenance)
        if draft.inflight is not None:
            provenance[draft.inflight.index] = draft.inflight.entry
        extra = len(body["messages"]) - len(state.messages)
        strip = draft.strip
        if strip is not None and not run.dry_run:
            log.info(
                "thinking_stripped",
                namespace=m.namespace,
                branch=run.key,
                compile_id=run.compile_id,
                cause=strip.cause,
                changed=list(strip.changed),
                replies=len(strip.replies),
                blocks=strip.blocks,
            )
        return CompileResult(
            request=body,
            provenance=(*provenance, *(ProvenanceEntry(kind="synthetic") for _ in range(extra))),
            thinking_strip=strip,
            compile_id=run.compile_id,
            dry=run.dry_run,
            tokens=request_tokens(m.estimator, body)
            or state.total_tokens + self._head_tokens(draft.head),
            branch=run.key,
            namespace=m.namespace,
            head_digests=dict(draft.head.digests),
            end_chain=draft.end_chain,
            manager_token=m.token,
            last_sequence=state.last_sequence,
            end_predecessor=end_predecessor(draft),
            restored=draft.restored,
            appended=appended,
            unreadable=tuple(state.unread.values()),
            start_sequence=state.start,
            shed=tuple(dict.fromkeys(e.message_id for e in draft.entries if e.reason == "shed")),
            folded=len(draft.effects.fold.covered) if draft.effects.fold is not None else 0,
        )

    def context(
        self,
        head: Head,
        record: BindingRecord,
        serial: int,
        appends: bool = False,
        anchor: AnchoredHead | None = None,
    ) -> RenderContext:
        """What stays fixed while rendering under ``head``."""
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
            stamps=self._stamps.stamps,
            estimator=m.estimator,
            resolve=m.resolve_reasoning,
            model=head.model,
            reads=m.binding.reads,
            checks_prefix=checks,
            unedited_below=self._unedited_below(serial) if m.binding.binds and not checks else 0,
        )

    def cache_key(self, head: Head, ctx: RenderContext, budget: int | None) -> CacheKey:
        """What a render under ``head`` and ``ctx`` is valid for."""
        m = self.manager
        return CacheKey(
            tuple(head.digests[c] for c in m.binding.bound_components()),
            m.binding.binds,
            ctx.system_notices,
            ctx.appends,
            ctx.anchor_sequence,
            m.binding.reads,
            m.binding.prefix_check,
            m.strategy,
            budget,
            m.reasoning.erase_serial() if m.reasoning is not None else 0,
        )

    def _unedited_below(self, serial: int) -> int:
        """The lowest stored sequence ever edited in this agent (every lower one is as first
        stored), or one past any sequence when nothing was: read once per change ``serial``."""
        m = self.manager
        if self._unedited is None or self._unedited[0] != serial:
            first = m.store.changed_since(m.namespace, 0)
            self._unedited = (serial, sys.maxsize if first is None else first)
        return self._unedited[1]

    def note_size(self, key: str, repeat: bool) -> None:
        """Tell the per-process bound the branch's render size (``_resident``)."""
        cache = self.cache(key)
        if cache.window is not None:
            cache.size = cache.window.nbytes
        if cache.size is not None:
            _resident.note(self, key, cache.size, repeat=repeat)

    def inflight(self, run: Run, state: RenderState) -> Restored | None:
        """The open round's reply as recorded, when the rules would alter it (SPEC 7); read
        from the window this render read (at this change serial) when it holds it near its
        end, as it does in a tool loop, else from the store.

        Raises:
            InFlightThinkingInvalid: it carries failing thinking and ``drop_block`` is off.
        """
        m = self.manager
        if not m.binding.binds:
            return None
        memo = self.cache(run.key).window
        if memo is not None and memo.serial != run.serial:
            memo = None

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

    def sheds(self) -> bool:
        """Whether pressure may shed thinking (binding on, and the strategy allows it)."""
        strategy = self.manager.strategy
        return self.manager.binding.binds and (
            not isinstance(strategy, Window) or strategy.shed_thinking
        )

    def shed(
        self,
        run: Run,
        ctx: RenderContext,
        state: RenderState,
        target: int,
        pending: Sequence[StoredMessage],
    ) -> RenderState:
        """Re-render with the oldest sent thinking shed down to ``target`` tokens (SPEC 7).

        Shed replies are released at commit and reported (cause ``messages``, or ``first``).
        """
        record = run.record
        shed = plan_shed(state, self.manager.estimator, state.total_tokens - target)
        if not shed:
            return state
        releases = dict(record.releases)
        for message_id, block in shed.items():
            prior = releases.get(message_id)
            low = block if prior is None else min(prior.from_block, block)
            releases[message_id] = Release(message_id, low, False)
        shed_ctx = attrs.evolve(ctx, releases=releases)
        again = self.full_render(run, shed_ctx, start=state.start, pending=pending)
        marked = [  # a block the model cannot read keeps that cause: it was lost to it first
            attrs.evolve(e, reason="shed" if e.reason != "head" else e.reason, kind="release")
            if e.kind == "released"
            and e.message_id in shed
            and ((prior := record.releases.get(e.message_id)) is None or e.block < prior.from_block)
            else e
            for e in again.unreported
        ]
        again.unreported = [*state.unreported, *marked]
        carry_ages(state, again)
        log.info(
            "thinking_shed",
            namespace=self.manager.namespace,
            replies=len(shed),
            tokens_before=state.total_tokens,
            tokens_after=again.total_tokens,
        )
        return again

    def render_cached(self, run: Run, cache_key: CacheKey, ctx: RenderContext) -> Rendered:
        """The branch's render under ``ctx``: the kept one extended by what was stored since,
        a restored snapshot, or (neither usable) the window rendered from the store."""
        key, cache = run.key, self.cache(run.key)
        repeat = cache.render is not None or cache.window is not None
        snapshot = False
        if not repeat:  # about to be built from the store: the previous newest is compacted
            _resident.admit(self, key)
            snapshot = self._load_snapshot(key, cache_key, run.serial, run.lineage, run.record)
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
            state = self.full_render(run, ctx, windowed=run.limit)
        return Rendered(state, repeat, snapshot, extended)

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
        if any(message.metadata.kind == SUMMARY_KIND for message in new):
            return None, 0
        if isinstance(cached[1], CompactRender):
            compact = cached[1]
            state = compact.restore()
            cache.size = compact.raw_size if cache.size is None else cache.size
            if not run.dry_run:
                cache.render = (cached[0], state)
        else:
            state = cached[1].copy() if run.dry_run else cached[1]
        self._prefetch(new, run.record, key)
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
        replies = [
            msg
            for msg in messages
            if msg.role == "assistant" and any(isinstance(b, THINKING_TYPES) for b in msg.content)
        ]
        unknown = [msg.id for msg in replies if msg.id not in record.looked_up]
        if unknown:
            record.releases.update(m.store.releases(m.namespace, key, unknown))
            record.looked_up.update(unknown)
        needed = [msg.id for msg in replies if not _all_thinking_reported(msg, record.releases)]
        self._stamps.load(needed, lambda wanted: m.store.stamps(m.namespace, wanted))

    def _latest_summary(self, lineage: Lineage) -> StoredMessage | None:
        m = self.manager
        found = m.store.read(m.namespace, lineage, kind=SUMMARY_KIND, limit=1, newest_first=True)
        return found[0] if found else None

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
            summary = next((p for p in pending if p.metadata.kind == SUMMARY_KIND), None)
        if summary is None:
            summary = self._latest_summary(run.lineage)
        record = run.record
        base = covers_upto(summary) + 1 if summary is not None else 0
        if start is None and windowed is not None:
            if record.anchor is not None and record.anchor >= base:
                start = record.anchor
            else:
                start = self._cold_anchor(run.lineage, base, windowed)
        start = max(base, start or 0)
        memo = self._read_window(run.key, run.lineage, start, run.serial)
        messages = memo.messages
        self._prefetch(messages, record, run.key)
        ctx = attrs.evolve(ctx, pieces=memo.pieces)
        state = RenderState(chain=CHAIN_SEED, start=start, change_serial=run.serial)
        stamps = self._stamps.stamps
        if any(stamps[m.id].get("v") == LEGACY_STAMP_VERSION for m in messages if m.id in stamps):
            state.legacy_chain = LEGACY_CHAIN_SEED
        if summary is not None:
            state.summary_id = summary.id
            render_text_prefix(state, ctx, summary, "summary")
        encoded = memo.nbytes  # the blocks carried from the last render, then the new ones
        for message in messages:
            encoded += render_message(state, ctx, message)
        memo.nbytes = encoded
        for message in pending:
            render_message(state, ctx, message)
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
        pieces: dict[MessageId, Any] = {}
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
        memo = WindowMemo(lineage, serial, start, messages, pieces, piece_bytes(pieces))
        cache.window = memo
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

    def plan_fold(self, run: Run, state: RenderState, strategy: Fold) -> FoldRequest | None:
        """What a fold of ``state`` would summarize and keep (``plan_fold``), or ``None``."""
        m = self.manager
        window = [
            msg for msg in self.read_window(run, state.start) if msg.metadata.kind != SUMMARY_KIND
        ]
        previous = m.store.get(m.namespace, state.summary_id) if state.summary_id else None
        return plan_fold(
            window, previous, state.spans, strategy.keep_tokens, bool(kept_thinking(state))
        )

    def _head_tokens(self, head: Head) -> int:
        return int(self.manager.estimator({"system": head.system, "tools": list(head.tools)}))

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
            raise InvalidType(
                f"record_reply needs the CompileResult that produced it, got {result!r}"
            )
        if result.dry:
            raise InvalidValue(
                f"compile {result.compile_id} was a dry run; record replies against a "
                "committing compile"
            )
        if result.manager_token != m.token:
            raise InvalidValue(
                f"compile {result.compile_id} came from another context manager; record the "
                "reply on the manager that compiled it"
            )
        if result.branch != m.current_branch_key():
            raise InvalidValue(
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
        self._stamps.put(stored.id, stamp)
        cache = self._caches.get(result.branch)
        record = cache.record if cache is not None else None
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


def _summary_text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"a Fold summarizer must return text, got {value!r}")
    return value


async def _await(value: Any) -> Any:
    return await value
