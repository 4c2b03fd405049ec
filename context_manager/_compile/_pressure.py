"""Stage 5, pressure: the ordered passes that keep a request inside its budget or window.

``PRESSURE`` is the order (SPEC 18): refuse what can never fit, then context editing (the
server's own clearing, ``_stage_edit``: the later passes measure the window as the API will see
it after its edits, ``pressure_tokens``), then compaction or fold, then holding back releases
made mid-round (``_defer``), then shedding the oldest thinking, then a window jump. Each pass
is a generator ``(run, draft) -> Draft`` (a fold yields its ``FoldRequest`` to be summarized);
a new strategy is a new module whose pass is added here, in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import attrs

from context_manager._model._errors import OverBudget

from ._defer import defer_releases
from ._fold import FoldRequest
from ._inflight import inflight_index
from ._run import Draft, Run
from ._selection import jump_anchor, required_tokens
from ._stage_edit import pressure_tokens
from ._stage_fold import fold
from ._stage_shed import shed

Pass = Callable[[Run, Draft], Generator[FoldRequest, str, Draft]]
"""One pressure pass."""


def refuse_over_budget(run: Run, draft: Draft) -> Generator[FoldRequest, str, Draft]:
    """``OverBudget`` when the newest turn alone does not fit, before a fold asks for a
    summary (issue 17 item 2) and before anything is stored."""
    yield from ()
    _fits(run, draft)
    return draft


def _fits(run: Run, draft: Draft) -> None:
    if run.budget is not None and run.allowed is not None:
        needed = required_tokens(draft.state.spans)
        if needed > run.allowed:  # the budget caps the whole request (issue 28 item 11)
            raise OverBudget(run.budget, needed + run.head_tokens)


def jump(run: Run, draft: Draft) -> Generator[FoldRequest, str, Draft]:
    """Over the cap, start the window later (``jump_anchor``); mid-round a jump would change
    what precedes the in-flight reply (provider rule 6): deferred until the round closes, and
    over the hard budget then nothing fits (``OverBudget``; issue 28 item 4)."""
    yield from ()
    if run.limit is None:
        return draft
    _fits(run, draft)
    target, cap = run.limit
    state = draft.state
    mid_round = inflight_index(state) is not None
    if pressure_tokens(run, draft) > cap and not mid_round:
        start = jump_anchor(state.spans, target)
        if start is not None and start != state.start:
            state = run.engine.full_render(run, draft.ctx, start=start, pending=draft.pending())
            return attrs.evolve(draft, state=state)
    elif mid_round and run.budget is not None and state.total_tokens > (run.allowed or 0):
        raise OverBudget(run.budget, state.total_tokens + run.head_tokens)
    return draft


PRESSURE: tuple[Pass, ...] = (refuse_over_budget, fold, defer_releases, shed, jump)
"""The pressure passes, in order (server compaction goes before ``fold``; context editing is
measured by each pass, ``pressure_tokens``)."""
