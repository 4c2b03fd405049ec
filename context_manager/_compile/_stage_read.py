"""Stage 1, read the branch: validate the call, then the serials, what was stored since the
kept render, and the binding record. The only stage that takes raw arguments; it raises before
anything else runs (a bad head, a bad budget) and writes nothing."""

from __future__ import annotations

import uuid

from context_manager._model._errors import InvalidType, InvalidValue
from context_manager._model._head import Head

from ._run import Engine, Run
from ._strategies import Strategy, Window

BUDGET_REANCHOR = 0.5
"""How far a budget-driven window jumps: to half the budget, like ``Window``'s default."""


def window_limit(strategy: Strategy, budget: int | None) -> tuple[int, int] | None:
    """``(target after a jump, cap that triggers one)`` or ``None`` for no window.

    >>> window_limit(Window(max_tokens=1000), 400)
    (200, 400)
    """
    limits: list[tuple[int, int]] = []
    if isinstance(strategy, Window):
        limits.append((int(strategy.max_tokens * strategy.reanchor), strategy.max_tokens))
    if budget is not None:
        limits.append((int(budget * BUDGET_REANCHOR), budget))
    return min(limits, key=lambda pair: pair[1]) if limits else None


def read_branch(engine: Engine, head: Head, budget: int | None, dry_run: bool) -> Run:
    """The compile's inputs. O(messages stored since the kept render).

    Raises:
        TypeError: ``head`` is not a ``Head``.
        ValueError: ``budget`` is not a positive token count.
    """
    if not isinstance(head, Head):
        raise InvalidType(f"compile needs a Head, got {head!r}")
    if budget is not None and budget <= 0:
        raise InvalidValue(f"budget must be a positive token count, got {budget!r}")
    m = engine.manager
    # the budget caps the whole request: what ``system`` and ``tools`` take is not the
    # messages' (issue 28 item 11)
    head_tokens = (
        0
        if budget is None
        else int(m.estimator({"system": head.system, "tools": list(head.tools)}))
    )
    key = m.current_branch_key()
    lineage = m.lineage()
    serial, since = engine.serials(key, lineage)
    record = engine.record_for(key)
    steady = engine.cache(key).steady
    anchor = record.anchored_head
    if steady is not None and not (
        steady.anchor is anchor and (steady.asked is head or steady.asked == head)
    ):
        steady = None
    return Run(
        engine=engine,
        asked=head,
        budget=budget,
        dry_run=dry_run,
        key=key,
        lineage=lineage,
        serial=serial,
        since=since,
        record=record,
        appends=m.binding.appends(head.model),
        limit=window_limit(m.strategy, None if budget is None else budget - head_tokens),
        steady=steady,
        compile_id=f"cmp_{uuid.uuid4().hex[:16]}",
        head_tokens=head_tokens,
    )
