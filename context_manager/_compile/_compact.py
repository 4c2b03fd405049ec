"""A cached render kept compact: one compressed ``bytes`` object instead of Python objects.

``CompactRender.of(state)`` pickles a ``RenderState`` (messages, provenance, spans, strips and
the rest, everything a later compile extends; the per-message objects as plain tuples) and
compresses it; ``restore()`` gives back a
``RenderState`` equal to the one kept, so a compile from it builds exactly the request a compile
from the hot render would. A compact render holds no reference into the hot one (a restored
state shares nothing with the state it was made from). Pure: no store, no process state. The
bytes are made and read in this process only (never stored, never sent), so unpickling them
runs nothing but this library's own classes.
"""

from __future__ import annotations

import pickle
import zlib

import attrs

from context_manager._model._results import ProvenanceEntry, Source

from ._render import RenderState, Span
from ._resident import paused_collector

LEVEL = 1
"""zlib's fastest level: a window's pickle (about its wire bytes) shrinks three- to fourfold in
a few milliseconds; higher levels gain little on this kind of text and cost several times more."""


@attrs.frozen
class CompactRender:
    """One branch's render as compressed bytes, with what deciding to restore it needs."""

    blob: bytes
    change_serial: int
    last_sequence: int
    raw_size: int
    """The uncompressed pickle's length (about the hot render's rendered bytes)."""

    @classmethod
    def of(cls, state: RenderState) -> CompactRender:
        fields = attrs.asdict(state, recurse=False)
        # one provenance entry and one span per message: as tuples they pickle in C
        fields["provenance"] = [
            (entry.kind, [(s.message_id, s.blocks, s.signatures) for s in entry.sources])
            for entry in state.provenance
        ]
        fields["spans"] = [(span.sequence, span.tokens, span.clean) for span in state.spans]
        raw = pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(zlib.compress(raw, LEVEL), state.change_serial, state.last_sequence, len(raw))

    @paused_collector
    def restore(self) -> RenderState:
        """A new ``RenderState`` equal to the one compacted (the collector paused meanwhile:
        everything unpickled stays alive)."""
        fields = pickle.loads(zlib.decompress(self.blob))
        fields["provenance"] = [
            ProvenanceEntry(kind, tuple(Source(*source) for source in sources))
            for kind, sources in fields["provenance"]
        ]
        fields["spans"] = [Span(*span) for span in fields["spans"]]
        return RenderState(**fields)

    @property
    def nbytes(self) -> int:
        return len(self.blob)
