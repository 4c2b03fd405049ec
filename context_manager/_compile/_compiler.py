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
10. commit (``_commit``): every effect in one store batch. A dry run stops before it;
11. cache diagnostics (``_diagnostics.diagnose``, ``Caching(diagnostics=True)``): the previous
    reply's response id in ``request["diagnostics"]``, and what changed since its request.

Every check that can raise runs before the commit, so a refused compile writes nothing (and
drops the branch's cached render, which it may have extended). State per branch lives in one
``BranchCache`` (``_branch``); stamps in a bounded ``StampCache``. A steady compile reads only
the messages stored since the last one and renders only those: O(new), not O(history).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import weakref
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from context_manager._model._errors import InFlightThinkingInvalid, InvalidType
from context_manager._model._head import Head
from context_manager._model._log import library_logger
from context_manager._model._messages import (
    HEAD_CHANGE_KIND,
    MessageId,
    StoredMessage,
)
from context_manager._model._results import CompileResult
from context_manager._reasoning._capture import resolve_without_sidecar
from context_manager._store import _protocol as parts
from context_manager._store._protocol import AnchoredHead, Lineage

from . import _resident
from ._branch import (
    BindingRecord,
    BranchCache,
    CacheKey,
    Fresh,
    WindowMemo,
)
from ._cold import READ_CHUNK
from ._commit import commit
from ._diagnostics import diagnose, log_verdict, reply_extra
from ._fold import SUMMARY_KIND, FoldRequest, kept_thinking, plan_fold
from ._footprint import hot_render_bytes
from ._host import CompileHost
from ._inflight import INFLIGHT_CAUSES, Restored, restore_inflight
from ._observe import log_observed, observe_reply
from ._pressure import PRESSURE
from ._releases import Releases
from ._render import (
    RenderContext,
    RenderState,
)
from ._reply import store_reply
from ._run import PREVIEW_SUMMARY_ID, Draft, Run
from ._stage_finish import (
    BINDING_BETA,
    DEFAULT_MAX_TOKENS,
    finish_request,
    inflight_round,
)
from ._stage_head import append_change, plan_head
from ._stage_read import BUDGET_REANCHOR, read_branch
from ._stage_reanchor import reanchor
from ._stage_render import render
from ._stage_report import SNAPSHOT_REFRESH_MESSAGES, compile_result, report
from ._stamp_cache import STAMP_CACHE_LIMIT, StampCache
from ._strategies import Fold
from ._window import WindowRenderer

log = library_logger("context_manager.compile")

INFLIGHT_LOOKBACK = 16
"""How many of a render's newest stored messages are searched for the in-flight reply before
the store is read (it is the newest assistant message: only results and notices follow it)."""

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


class Compiler(WindowRenderer):
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
        self.prediction_mismatches = 0
        """Observe mode: disagreements between the compiler's predictions and the provider's
        ``thinking_mismatch_allowed`` entries, counted over every reply recorded."""
        self.on_release: Callable[[str], None] = lambda key: None  # the bound freed its render
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
        if kept is not None and parts.supports(m.store, parts.ReadsTogether):
            after = kept[1].last_sequence
            changes, bindings, new = m.store.serials_and_read(m.namespace, lineage, after)
            self._see_other_writers(int(bindings))
            return int(changes), Fresh(after, new)
        if not parts.supports(m.store, parts.BindingSerials):
            # a store written before ``serials``: this process's writes only
            return m.store.change_serial(m.namespace), None
        changes, bindings = m.store.serials(m.namespace)
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

    def _parent_compiled(self, key: str, anchored: AnchoredHead | None) -> bool:
        """A fork or ``branch_at`` made after its parent's first committing compile: what it
        inherits was reported there, so its own first compile is no ``first`` (SPEC 5: a loss
        the parent told is not told again). The inherited anchored head shows the parent had
        compiled by the fork point; without appended changes an ancestor's flag is taken."""
        m = self.manager
        segments = m.lineage(key)
        if len(segments) < 2 or (m.binding.append_changes and anchored is None):
            return False
        # an ancestor's flag: a fork that inherited it may never write its own
        return any(
            m.store.binding_record(m.namespace, ancestor, releases=False).first_compiled
            for ancestor, _ in segments[1:]
        )

    def record_for(self, key: str) -> BindingRecord:
        """Branch ``key``'s binding record (read once, then kept in its cache)."""
        cache = self.cache(key)
        record = cache.record
        if record is None:
            data = self.manager.store.binding_record(self.manager.namespace, key, releases=False)
            record = cache.record = BindingRecord(
                data.first_compiled or self._parent_compiled(key, data.anchored_head),
                Releases(data.releases),
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
        try:
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
        finally:
            # counted once everything this compile keeps is kept (a refused compile too): an
            # eviction of this very branch then frees what it holds, never what is set after
            self.note_size(run.key, draft.rendered.repeat)
        return diagnose(self.manager, compile_result(run, draft, appended))

    def _keep(self, run: Run, draft: Draft) -> None:
        """After the commit: keep the render for the next compile (and its snapshot)."""
        state, cache = draft.state, self.cache(run.key)
        put_back = frozenset(draft.inflight.put_back) if draft.inflight is not None else ()
        # sent as recorded now; reported once the round closes
        state.unreported = [e for e in state.unreported if (e.message_id, e.block) in put_back]
        if put_back or draft.deferred:
            # the request differs from the render (the in-flight reply as recorded): the
            # next compile judges afresh, so what is reported once the round closes reads
            # the head of that compile, not this one's
            cache.render = None
            return
        cache.render = (draft.cache_key, state)
        if draft.effects.snapshot:
            # rendered from the stored messages, or restored from a snapshot far behind
            self._save_snapshot(run.key, draft.cache_key, state, run.lineage)

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
            # no sidecar: the plain function, which the lean reply path recognises
            resolve=m.resolve_reasoning if m.reasoning is not None else resolve_without_sidecar,
            model=head.model,
            reads=m.binding.reads,
            checks_prefix=checks,
            observe=m.binding.enforcement == "observe",
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
            m.binding.enforcement,
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
        """Tell the per-process bound what the branch's render costs (``_resident``; the
        estimate is ``_footprint``'s, O(1))."""
        cache = self.cache(key)
        memo = cache.window
        if memo is not None:
            cache.size = memo.nbytes
        if cache.size is not None:
            state = cache.render[1] if cache.render is not None else None
            rendered = len(state.messages) if isinstance(state, RenderState) else 0
            stored = len(memo.messages) if memo is not None else 0
            size = hot_render_bytes(cache.size, rendered, stored)
            _resident.note(self, key, size, repeat=repeat)

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
            why = state.left_out.get(inflight.put_back[0])
            raise InFlightThinkingInvalid(
                mid,
                tuple(b for _, b in inflight.put_back),
                INFLIGHT_CAUSES.get(
                    why.reason if why is not None else "released", "a change mid-round"
                ),
            )
        return inflight

    def plan_fold(self, run: Run, state: RenderState, strategy: Fold) -> FoldRequest | None:
        """What a fold of ``state`` would summarize and keep (``plan_fold``), or ``None``."""
        m = self.manager
        window = [
            msg for msg in self.read_window(run, state.start) if msg.metadata.kind != SUMMARY_KIND
        ]
        previous = m.store.get(m.namespace, state.summary_id) if state.summary_id else None
        return plan_fold(
            window,
            previous,
            state.spans,
            strategy.keep_tokens,
            bool(kept_thinking(state)),
            m.estimator if _strips_kept_tail(m, run.asked.model) else None,
        )

    # replies
    def record_reply(
        self,
        message: object,
        result: CompileResult,
        *,
        appended: Sequence[object],
        extra: Mapping[str, Any] | None = None,
    ) -> MessageId:
        """Store an assistant reply, stamping each thinking block against what produced it
        (``_reply.store_reply``); its stamp is kept for the next render."""
        cached, verdict = reply_extra(result, message)
        extra = {**(extra or {}), **cached} if cached else extra
        stored, stamp = store_reply(self.manager, message, result, appended=appended, extra=extra)
        if verdict is not None:
            log_verdict(self.manager.namespace, stored.id, result, verdict)
        if self.manager.binding.enforcement == "observe":
            self._observe(result, message)
        self._stamps.put(stored.id, stamp)
        cache = self._caches.get(result.branch)
        record = cache.record if cache is not None else None
        if record is not None:  # a reply just stored has no release: none to read for it
            record.looked_up.add(stored.id)
        return stored.id

    def _observe(self, result: CompileResult, response: object) -> None:
        """Compare the reply's report with the compile's predictions (``_observe``)."""
        observed = observe_reply(result, response)
        if observed is not None:
            self.prediction_mismatches += observed.mismatches
            log_observed(self.manager.namespace, result, observed)


def _strips_kept_tail(manager: CompileHost, model: str) -> bool:
    """Whether a fold's kept tail goes without its thinking (its prefix changed and the model
    checks it, provider rules 5 and 20): it is then measured as it is sent."""
    binding = manager.binding
    return binding.binds and binding.prefix_check(model) and binding.enforcement != "observe"


def _summary_text(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"a Fold summarizer must return text, got {value!r}")
    return value


async def _await(value: Any) -> Any:
    return await value
