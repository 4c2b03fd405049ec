"""Pressure, shedding (SPEC 7): leave out the oldest sent thinking (a leading run, which keeps
every later block valid) down to the window's target, before a window jumps. Shed replies are
released at commit (``release`` entries) and reported with cause ``messages`` (or ``first``)."""

from __future__ import annotations

import functools
from collections.abc import Generator, Mapping, Sequence

import attrs

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._store._protocol import Release
from context_manager._store._semantics import lowered

from ._fold import FoldRequest
from ._render import RenderContext, RenderState
from ._run import Draft, Run
from ._shed import plan_shed
from ._shed_patch import patched
from ._stage_edit import pressure_tokens
from ._stage_fold import carry_ages
from ._strategies import Window

log = library_logger("context_manager.compile")


def shed(run: Run, draft: Draft) -> Generator[FoldRequest, str, Draft]:
    """Shed when over the window's cap, unless a fold ran (it re-rendered already)."""
    yield from ()
    limit, m = run.limit, run.engine.manager
    if limit is None or draft.folded or not m.binding.binds:
        return draft
    if isinstance(m.strategy, Window) and not m.strategy.shed_thinking:
        return draft
    if pressure_tokens(run, draft) <= limit[1]:
        return draft
    state = shed_thinking(run, draft.ctx, draft.state, limit[0], draft.pending())
    return attrs.evolve(draft, state=state)


def _shed_range(run: Run, state: RenderState, shed: Mapping[MessageId, int]) -> list[StoredMessage]:
    """The stored messages of the window up to the newest shed reply: the branch's window
    memo when it has one, else read from the store (a render restored from a snapshot keeps
    none). O(shed range) at most, where a re-render reads and renders the whole window."""
    memo = run.engine.cache(run.key).window
    if memo is not None:
        return memo.messages
    newest = max(state.sequences.get(message_id, -1) for message_id in shed)
    m = run.engine.manager
    return m.store.read(m.namespace, run.lineage, after=state.start - 1, upto=newest)


def shed_thinking(
    run: Run,
    ctx: RenderContext,
    state: RenderState,
    target: int,
    pending: Sequence[StoredMessage],
) -> RenderState:
    """The render with the oldest sent thinking shed down to ``target`` tokens (SPEC 7):
    the render at hand patched (``_shed_patch``), or re-rendered where a patch cannot be sure.

    Shed replies are released at commit and reported (cause ``messages``, or ``first``).
    """
    record = run.record
    shed = plan_shed(state, run.engine.manager.estimator, state.total_tokens - target)
    if not shed:
        return state
    releases = dict(record.releases)
    for message_id, block in shed.items():
        releases[message_id] = Release(message_id, lowered(releases.get(message_id), block), False)
    shed_ctx = attrs.evolve(ctx, releases=releases)
    sidecar = run.engine.manager.reasoning is not None
    window = functools.partial(_shed_range, run, state, shed)  # read only when it can patch
    again = patched(state, shed_ctx, shed, window, pending, sidecar=sidecar)
    if again is None:
        again = run.engine.full_render(run, shed_ctx, start=state.start, pending=pending)
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
        namespace=run.engine.manager.namespace,
        replies=len(shed),
        tokens_before=state.total_tokens,
        tokens_after=again.total_tokens,
    )
    return again
