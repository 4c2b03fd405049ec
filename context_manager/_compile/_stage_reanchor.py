"""Stage 6, re-anchor (SPEC 7b): when the whole tail was re-rendered anyway (a fold, a window
jump) or the window starts past a change appended since the anchor, the asked head becomes the
anchored one and the window is rendered under it. Never under a compaction block whose kept
turns are still sent: their thinking needs the anchored ``system`` and ``tools`` unchanged
(provider rule 25 c); a change summarized away is appended again instead (rule 26). A window
that starts past them has changed every later block's prefix anyway (rule 5), so the head
re-anchors as without a block (a change it skipped would otherwise be contradicted), keeping
the block's tool definitions as deferred ones (``_compaction.block_deferred``: a tool a
summarized change added still binds the thinking made since, rules 3 and 25 c)."""

from __future__ import annotations

from typing import Any

import attrs

from context_manager._model._canonical import canonical_json
from context_manager._model._messages import StoredMessage
from context_manager._store._protocol import AnchoredHead

from ._append import head_json
from ._compaction import block_deferred
from ._editing import carries_compaction
from ._render import RenderState
from ._run import PREVIEW_SUMMARY_ID, Draft, Run
from ._stage_fold import carry_ages


def reanchor(run: Run, draft: Draft) -> Draft:
    """Re-render under the asked head when the rules above call for it (one full render)."""
    if not _due(run, draft):
        return draft
    engine, state = run.engine, draft.state
    anchored = anchor_head(run, state)
    asked = attrs.evolve(run.asked, tools=anchored["tools"])
    fresh = AnchoredHead(state.last_sequence, anchored)
    again = attrs.evolve(
        engine.context(asked, run.record, run.serial, run.appends, fresh),
        releases=draft.ctx.releases,
    )
    rendered = engine.full_render(
        run, again, start=state.start, summary=_opener(run, draft), pending=draft.pending()
    )
    rendered.unreported = state.unreported + rendered.unreported
    carry_ages(state, rendered)
    cache_key = attrs.evolve(
        draft.cache_key,
        bound=engine.cache_key(asked, again, run.budget).bound,
        anchor_sequence=fresh.at_sequence,
    )
    return attrs.evolve(
        draft,
        state=rendered,
        head=asked,
        anchor=fresh,
        ctx=again,
        cache_key=cache_key,
        effects=attrs.evolve(draft.effects, anchored_head=fresh),
    )


def _due(run: Run, draft: Draft) -> bool:
    """The whole tail is re-rendered anyway, and the anchored head would change with it."""
    state, anchor = draft.state, draft.anchor
    if carries_compaction({"messages": state.messages}) and (
        state.kept_from is None or state.start <= state.kept_from
    ):
        return False  # the kept turns need the head they were made under (rule 25 c)
    moved = state.start != draft.start_before
    skipped = anchor is not None and state.start > anchor.at_sequence + 1
    if not (run.appends and (draft.folded or moved or skipped)):
        return False
    fresh = canonical_json(anchor_head(run, state))
    if not (
        anchor is None
        or draft.appended_before
        or draft.effects.head_change is not None
        or fresh != canonical_json(anchor.head)
    ):
        return False
    return (
        draft.folded
        or moved
        or run.engine.skips_a_change(run.key, run.lineage, anchor, state.start)
    )


def anchor_head(run: Run, state: RenderState) -> dict[str, Any]:
    """The asked head as a new anchor (``{"system", "tools"}``), keeping the deferred
    definitions of the compaction block the render opens with (``block_deferred``)."""
    m = run.engine.manager
    return block_deferred(
        head_json(run.asked), state, lambda message_id: m.store.get(m.namespace, message_id)
    )


def _opener(run: Run, draft: Draft) -> StoredMessage | None:
    """The summary the render opens with (this compile's preview, or the stored one)."""
    state, summary = draft.state, draft.effects.summary
    if summary is not None and summary.id == state.summary_id:
        return summary
    if state.summary_id and state.summary_id != PREVIEW_SUMMARY_ID:
        m = run.engine.manager
        return m.store.get(m.namespace, state.summary_id)
    return None
