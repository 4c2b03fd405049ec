"""Shedding: under a budget, leave out the oldest sendable thinking first (SPEC 7).

Pure. Removing a leading run of thinking blocks keeps every later block valid (provider rule 4):
the first block still sent has no kept thinking before it. Whole replies are shed, oldest
first, and never one of the newest turn. Scans for sent thinking start at the render's
``signed_from`` (nothing before it is sent thinking), so a shed near the window's cap costs
what it sheds, not the replies shed before it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from context_manager._model._messages import MessageId

from ._render import RenderState, Span


def newest_turn_start(spans: Sequence[Span]) -> int | None:
    """The sequence the newest turn starts at (the last clean start), or ``None``."""
    for span in reversed(spans):
        if span.clean:
            return span.sequence
    return None


def plan_shed(
    state: RenderState, estimator: Callable[[Any], int], excess: int
) -> dict[MessageId, int]:
    """Which replies to shed, as ``{reply id: first thinking block index}``, oldest first.

    Sheds whole replies until their thinking's estimated tokens reach ``excess``, or no sent
    thinking is left before the newest turn. A block left out (not sent) before the first
    block still sent goes with them: with nothing kept before it, it would be in order and put
    back, and a block put back invalidates those made while it was gone (provider rule 4), so
    the run shed is every thinking block before the first one kept. O(rendered messages).
    """
    shed = _shed_sent(state, estimator, excess)
    if not shed:
        return shed
    boundary = newest_turn_start(state.spans)
    kept_from = min(
        first_kept_sequence(state, shed), float("inf") if boundary is None else boundary
    )
    for message_id, block in sorted(state.left_out):
        sequence = state.sequences.get(message_id)
        if (message_id, block) in state.unread or sequence is None or sequence >= kept_from:
            continue
        prior = shed.get(message_id)
        shed[message_id] = block if prior is None else min(prior, block)
    return shed


def first_kept_sequence(state: RenderState, shed: Mapping[MessageId, int]) -> float:
    """The sequence of the first reply whose thinking is still sent once ``shed`` is shed."""
    provenance = state.provenance
    for i in range(state.signed_from, len(provenance)):
        for source in provenance[i].sources:
            if source.signatures and source.message_id not in shed:
                return state.sequences.get(source.message_id, float("inf"))
    return float("inf")


def first_signed(state: RenderState, start: int) -> int:
    """The index of the first provenance entry from ``start`` on with sent thinking, at most
    the last entry's (what ``RenderState.signed_from`` may be); ``start``: a bound already
    known. O(entries scanned)."""
    provenance = state.provenance
    last = max(len(provenance) - 1, 0)
    for i in range(start, last):
        for source in provenance[i].sources:
            if source.signatures:
                return i
    return last


def _shed_sent(
    state: RenderState, estimator: Callable[[Any], int], excess: int
) -> dict[MessageId, int]:
    if excess <= 0:
        return {}
    boundary = newest_turn_start(state.spans)
    empty = estimator({"role": "assistant", "content": []})
    shed: dict[MessageId, int] = {}
    saved = 0
    provenance = state.provenance
    for i in range(state.signed_from, len(provenance)):
        for source in provenance[i].sources:
            if not source.signatures:
                continue
            sequence = state.sequences.get(source.message_id)
            if boundary is None or sequence is None or sequence >= boundary:
                return shed
            if saved >= excess and source.message_id not in shed:
                return shed
            content = state.messages[i]["content"]
            for j in sorted(source.signatures):
                block = source.blocks[j]
                prior = shed.get(source.message_id)
                shed[source.message_id] = block if prior is None else min(prior, block)
                saved += estimator({"role": "assistant", "content": [content[j]]}) - empty
    return shed
