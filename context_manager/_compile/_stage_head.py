"""Stages 2 and 4, plan the head: the head the request goes out with (the anchored one while
changes are appended, SPEC 7b), then, once rendered, the change to append or the head change
to make. A change is rendered as a preview and stored only at commit."""

from __future__ import annotations

import datetime as dt

import attrs

from context_manager._model._canonical import canonical_json
from context_manager._model._head import Head
from context_manager._model._messages import HEAD_CHANGE_KIND, StoredMessage
from context_manager._store._protocol import AnchoredHead

from ._append import Change, Sent, head_json, plan_change, request_head
from ._branch import CacheKey, Steady
from ._compaction import COMPACTION_KIND
from ._message import render_message
from ._render import RenderContext
from ._run import HEAD_CHANGE_PREVIEW_ID, Draft, Run
from ._stage_reanchor import anchor_head


def plan_head(run: Run) -> tuple[Head, RenderContext, CacheKey]:
    """The head to render under, its render context and the cache key it renders for."""
    engine, asked, anchor = run.engine, run.asked, run.record.anchored_head
    head = asked
    if run.appends and anchor is not None:
        head = (
            run.steady.base
            if run.steady is not None
            else request_head(anchor, Sent.anchored(anchor), asked)
        )
    elif run.steady is not None:  # not appending: what the last compile sent for ``asked``
        head = run.steady.sent
    ctx = engine.context(head, run.record, run.serial, run.appends, anchor if run.appends else None)
    return head, ctx, engine.cache_key(head, ctx, run.budget)


def append_change(run: Run, draft: Draft) -> Draft:
    """Append the difference between the asked head and what the branch has sent (a preview
    ``head-change`` message), or re-render under the asked head when it cannot be appended;
    the first committing compile anchors the head it sends. Records where the render starts
    before any pressure stage moves it."""
    planned = _append_change(run, draft)
    return attrs.evolve(planned, start_before=planned.state.start)


def _append_change(run: Run, draft: Draft) -> Draft:
    anchor, asked, state = draft.anchor, run.asked, draft.state
    cache = run.engine.cache(run.key)
    if run.appends and anchor is not None:
        return _appended(run, draft, anchor)
    if anchor is None and run.engine.manager.binding.append_changes:  # the first anchor
        return _first_anchor(run, draft, AnchoredHead(state.last_sequence, head_json(asked)))
    if anchor is not None and run.steady is None:  # not appending: anchor what is sent now
        anchored = anchor_head(run, state)
        sent = attrs.evolve(asked, tools=anchored["tools"])
        if canonical_json(anchor.head) != canonical_json(anchored):
            new = AnchoredHead(state.last_sequence, anchored)
            return attrs.evolve(_anchored(draft, new), head=sent)
        cache.steady = Steady(anchor, asked, asked, state.last_change, sent)
        return attrs.evolve(draft, head=sent)
    return draft


def _first_anchor(run: Run, draft: Draft, anchor: AnchoredHead) -> Draft:
    """The branch's first anchor. Only a stored head change or compaction block renders
    differently under an anchor than under none (``_message._route``,
    ``_compaction.render_compaction``); a render read from a window holding neither is kept
    under the anchored key, so the branch's next compile extends it and the snapshot saved now
    is one a restart restores (under the unanchored key, neither matched: the next compile
    re-rendered the window, and a restart rendered it from the store)."""
    anchored = _anchored(draft, anchor)
    if not run.appends or not _reads_no_anchor(run, draft):
        return anchored
    at = anchor.at_sequence
    return attrs.evolve(
        anchored,
        ctx=attrs.evolve(draft.ctx, anchor_sequence=at),
        cache_key=attrs.evolve(draft.cache_key, anchor_sequence=at),
    )


def _reads_no_anchor(run: Run, draft: Draft) -> bool:
    """Whether nothing ``draft`` rendered reads the anchor: the window it was read from (this
    compile's, covering the render) holds no head change and no compaction block, and no
    opener or preview came with it."""
    state, memo = draft.state, run.engine.cache(run.key).window
    if memo is None or memo.serial != run.serial or memo.lineage != run.lineage:
        return False
    if memo.start > state.start or memo.last() < state.last_sequence or draft.pending():
        return False
    if state.summary_id is not None or state.kept_from is not None:
        return False
    return not any(m.metadata.kind in _ANCHOR_READERS for m in memo.messages)


_ANCHOR_READERS = frozenset({HEAD_CHANGE_KIND, COMPACTION_KIND})
"""The stored kinds whose rendering depends on the anchor."""


def _anchored(draft: Draft, anchor: AnchoredHead) -> Draft:
    return attrs.evolve(
        draft, anchor=anchor, effects=attrs.evolve(draft.effects, anchored_head=anchor)
    )


def _appended(run: Run, draft: Draft, anchor: AnchoredHead) -> Draft:
    state, steady, asked = draft.state, run.steady, run.asked
    if steady is not None and steady.last_change is state.last_change:
        return attrs.evolve(draft, head=steady.sent)  # nothing new since the last compile
    sent = (
        Sent.from_json(state.last_change)
        if state.last_change is not None
        else Sent.anchored(anchor)
    )
    change = plan_change(sent, asked, inline_tools=run.engine.manager.binding.inline_tools)
    if change is False:  # cannot be appended: a head change as before
        return _head_changed(run, draft)
    if isinstance(change, Change):
        message = StoredMessage(
            id=HEAD_CHANGE_PREVIEW_ID,
            sequence=draft.next_sequence(),
            branch=run.key,
            role="system",
            content=change.content,
            metadata=change.metadata,
            created_at=dt.datetime.now(dt.UTC),
        )
        render_message(state, draft.ctx, message)
        return attrs.evolve(
            draft,
            head=request_head(anchor, change.sent, asked),
            effects=attrs.evolve(draft.effects, head_change=message),
        )
    head = request_head(anchor, sent, asked)
    run.engine.cache(run.key).steady = Steady(
        anchor, asked, draft.base_head, state.last_change, head
    )
    return attrs.evolve(draft, head=head)


def _head_changed(run: Run, draft: Draft) -> Draft:
    """The asked head becomes the anchored one, and the window is rendered under it."""
    engine = run.engine
    anchored = anchor_head(run, draft.state)
    asked = attrs.evolve(run.asked, tools=anchored["tools"])
    anchor = AnchoredHead(draft.state.last_sequence, anchored)
    ctx = attrs.evolve(
        engine.context(asked, run.record, run.serial, run.appends, anchor), head_changed=True
    )
    state = engine.full_render(run, ctx, windowed=run.limit, pending=draft.pending())
    cache_key = attrs.evolve(
        draft.cache_key,
        bound=engine.cache_key(asked, ctx, run.budget).bound,
        anchor_sequence=anchor.at_sequence,
    )
    return attrs.evolve(
        _anchored(draft, anchor), state=state, head=asked, ctx=ctx, cache_key=cache_key
    )
