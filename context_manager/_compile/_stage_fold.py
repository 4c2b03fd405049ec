"""Pressure, client-side fold: over ``Fold.trigger_tokens``, the older range is replaced by
a summary from the summarizer (asked by yielding the ``FoldRequest``); the summary is a preview
until commit, and the branch is rendered from it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator

import attrs

from context_manager._model._messages import StoredMessage

from ._fold import FoldRequest, fold_entries, summary_parts
from ._render import RenderState
from ._run import PREVIEW_SUMMARY_ID, Draft, Run
from ._stage_edit import pressure_tokens
from ._strategies import Fold


def carry_ages(before: RenderState, after: RenderState) -> None:
    """Give ``after`` the age of every reply its unreported entries carry over from
    ``before`` (a re-render that no longer meets them: a fold covered them), so the strip
    stays oldest first."""
    for entry in after.unreported:
        sequence = before.sequences.get(entry.message_id)
        if sequence is not None:
            after.sequences.setdefault(entry.message_id, sequence)


def fold(run: Run, draft: Draft) -> Generator[FoldRequest, str, Draft]:
    """Fold when the render, as the API sees it after its context edits, is over the
    strategy's trigger (SPEC 7, ``Fold``)."""
    strategy = run.engine.manager.strategy
    state = draft.state
    if not isinstance(strategy, Fold) or pressure_tokens(run, draft) <= strategy.trigger_tokens:
        return draft
    request = run.engine.plan_fold(run, state, strategy)
    if request is None:
        return draft
    text = yield request
    content, meta = summary_parts(request, text)
    summary = StoredMessage(
        id=PREVIEW_SUMMARY_ID,
        sequence=draft.next_sequence(),
        branch=run.key,
        role="user",
        content=tuple(content),
        metadata=meta,
        created_at=dt.datetime.now(dt.UTC),
    )
    pending = (*draft.pending(), summary)
    folded = run.engine.full_render(run, draft.ctx, summary=summary, pending=pending)
    folded.unreported = fold_entries(state, folded)
    carry_ages(state, folded)
    effects = attrs.evolve(draft.effects, summary=summary, fold=request)
    return attrs.evolve(draft, state=folded, folded=True, effects=effects)
