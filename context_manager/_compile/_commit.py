"""The commit: the one place a compile writes (issue 27).

``commit`` stores the previewed messages (a ``head-change``, a fold's summary) and the binding
record's write, in one store batch when there is more than one write (a batch rolls back whole
on every store), then re-binds the render to what was stored and updates the in-memory record.
It runs after every check that can raise; a dry compile never calls it. ``rebind`` is pure
bookkeeping: a preview's id and sequence become the stored message's everywhere the render
holds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import attrs

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ProvenanceEntry, Source
from context_manager._store._semantics import committed_release

from ._branch import BindingRecord
from ._render import RenderState, Span
from ._run import Draft, Run

log = library_logger("context_manager.compile")


def commit(run: Run, draft: Draft) -> tuple[StoredMessage, ...]:
    """Write ``draft.effects``; returns the stored messages (previews in order).

    Raises:
        Whatever the store raises; then nothing of this compile is stored.
    """
    m = run.engine.manager
    effects, state = draft.effects, draft.state
    pending, binding = effects.pending(), effects.binding
    writes = len(pending) + (binding is not None)
    with m.store.batch() if writes > 1 else contextlib.nullcontext():
        stored = tuple(
            m.store.append(m.namespace, run.key, p.role, p.content, p.metadata) for p in pending
        )
        moved = rebind(state, pending, stored)
        anchored = effects.anchored_head
        if anchored is not None:
            anchored = attrs.evolve(anchored, at_sequence=moved(anchored.at_sequence))
        if binding is not None:
            m.store.commit_binding(
                m.namespace,
                run.key,
                first_compiled=True,
                releases=list(binding.releases),
                reported=list(binding.reported),
                anchor=binding.window_start,
                left_out=None if binding.left_out is None else sorted(binding.left_out),
                at_sequence=state.last_sequence,
                anchored_head=anchored,
            )
    if binding is not None:
        run.engine.wrote_binding()
        _learn(run.record, binding.releases, binding.reported, state.last_sequence)
        run.record.first_compiled = True
        run.record.left_out = effects.left_out
        if anchored is not None:
            run.record.anchored_head = anchored
        if binding.window_start is not None:
            run.record.anchor = binding.window_start
    if effects.summary is not None and effects.fold is not None:
        log.info(
            "folded",
            namespace=m.namespace,
            branch=run.key,
            summary=stored[-1].id,
            covers_upto=effects.fold.covers_upto,
            covered=len(effects.fold.covered),
        )
    return stored


def _learn(
    record: BindingRecord,
    releases: Sequence[tuple[MessageId, int]],
    reported: Sequence[MessageId],
    at_sequence: int,
) -> None:
    """What the store now holds for the releases and reports just written."""
    for message_id, block in releases:
        prior = record.releases.get(message_id)
        record.releases[message_id] = committed_release(prior, message_id, block, at_sequence)
    for message_id in reported:
        prior = record.releases.get(message_id)
        if prior is not None:
            record.releases[message_id] = attrs.evolve(prior, reported=True)


class _Moved:
    """A preview's sequence to the stored one's (every other sequence stays)."""

    def __init__(self, pairs: Mapping[int, int]) -> None:
        self.pairs = pairs

    def __call__(self, sequence: int) -> int:
        return self.pairs.get(sequence, sequence)


def rebind(
    state: RenderState, previews: Sequence[StoredMessage], stored: Sequence[StoredMessage]
) -> _Moved:
    """Give ``state`` the stored ids and sequences of ``previews`` (in place). O(window) when
    there are previews, nothing otherwise."""
    moved = _Moved({p.sequence: s.sequence for p, s in zip(previews, stored, strict=True)})
    if not previews:
        return moved
    ids: dict[MessageId, MessageId] = {p.id: s.id for p, s in zip(previews, stored, strict=True)}
    state.last_sequence = moved(state.last_sequence)
    state.spans = [Span(moved(s.sequence), s.tokens, s.clean) for s in state.spans]
    state.sequences = {ids.get(k, k): moved(v) for k, v in state.sequences.items()}
    if state.summary_id is not None:
        state.summary_id = ids.get(state.summary_id, state.summary_id)
    state.pending_system = [(ids.get(i, i), w, b) for i, w, b in state.pending_system]
    state.provenance = [_rebound(entry, ids) for entry in state.provenance]
    return moved


def _rebound(entry: ProvenanceEntry, ids: Mapping[MessageId, MessageId]) -> ProvenanceEntry:
    if not any(s.message_id in ids for s in entry.sources):
        return entry
    sources = tuple(
        Source(ids.get(s.message_id, s.message_id), s.blocks, s.signatures) for s in entry.sources
    )
    return attrs.evolve(entry, sources=sources)
