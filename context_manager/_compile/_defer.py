"""Pressure pass: a release recorded while a tool round is open waits for the round's end.

Invariant (provider rule 6, issue 28 item 3): a release never changes what precedes the open
round's in-flight reply. Releases recorded since the round's turn began (unreported, with a
known sequence) are held back from the render when applying them would leave out thinking
that is kept without them: the in-flight reply's own (it goes out as recorded, released or
not), or a block a gap would cost. A compile with no round open applies and reports them. (A
provider's organization or end-user drop is no release at all: it is kept, item 6.) The held
render is never kept for the next compile, which judges afresh.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping

import attrs

from context_manager._model._messages import MessageId
from context_manager._store._protocol import Release

from ._fold import FoldRequest
from ._inflight import inflight_index
from ._releases import Releases
from ._run import Draft, Run
from ._shed import newest_turn_start


def defer_releases(run: Run, draft: Draft) -> Generator[FoldRequest, str, Draft]:
    """The draft rendered without the round's recent releases when they would cost kept
    thinking; the draft itself otherwise. One extra render, only mid-round with such releases."""
    yield from ()
    state, ctx = draft.state, draft.ctx
    index = inflight_index(state)
    began = newest_turn_start(state.spans)
    if draft.folded or index is None or began is None:
        return draft
    recent = recorded_since(ctx.releases, began)
    if not recent:
        return draft
    source = state.provenance[index].single_source
    inflight = source.message_id if source is not None else None
    held = attrs.evolve(ctx, releases=_without_recent(ctx.releases, recent))
    without = run.engine.full_render(run, held, start=state.start, pending=draft.pending())
    lost = [
        spot
        for spot in without.kept_thinking - state.kept_thinking
        if spot[0] not in recent or spot[0] == inflight
    ]
    if not lost:
        return draft
    return attrs.evolve(draft, state=without, ctx=held, deferred=True)


def recorded_since(releases: Mapping[MessageId, Release], began: int) -> set[MessageId]:
    """The replies whose release is unreported and was recorded since sequence ``began`` (a
    branch's ``Releases`` keeps the answer until they change; another mapping is scanned)."""
    if isinstance(releases, Releases):
        return set(releases.recorded_since(began))
    return {
        mid
        for mid, release in releases.items()
        if not release.reported and release.at_sequence is not None and release.at_sequence >= began
    }


def _without_recent(
    releases: Mapping[MessageId, Release], recent: set[MessageId]
) -> dict[MessageId, Release]:
    """``releases`` with the recent ones held back. A recent release that lowered an earlier,
    reported one holds back only the blocks it added: the earlier one's blocks stay released
    (they were released before the round, or were already applied and told in it)."""
    kept: dict[MessageId, Release] = {}
    for mid, release in releases.items():
        if mid not in recent:
            kept[mid] = release
        elif release.reported_from is not None:
            kept[mid] = Release(mid, release.reported_from, True)
    return kept
