"""A cached render kept compact: one compressed ``bytes`` object instead of Python objects.

``CompactRender.of(state)`` pickles a ``RenderState`` (messages, provenance, spans, strips and
the rest, everything a later compile extends; every object of this library as a plain tuple)
and compresses it; ``restore()`` gives back a ``RenderState`` equal to the one kept, so a
compile from it builds exactly the request a compile from the hot render would. A compact
render holds no reference into the hot one (a restored state shares nothing with the state it
was made from). Made for a store (``_snapshot``), it also holds the stored releases of every
message the render met, read when it was made, so a restore needs no release read
(``restore_window``). Its bytes hold built-in values only, and ``restore`` refuses any class
while unpickling, so bytes read back from a store can make no object and run no code. It
also holds the cache markers the rendered messages carry (``_caching.scan_before_last``), which
a restore gives back to the marker scan's memo (``remember_scan``): the first request from a
restored render scans none of them again. Pure apart from that memo (which never changes a
result): no store, no process state.
"""

from __future__ import annotations

import io
import pickle
import zlib
from collections.abc import Mapping
from itertools import starmap
from typing import Any

import attrs

from context_manager._model._messages import MessageId
from context_manager._model._results import ProvenanceEntry, Source
from context_manager._store._protocol import Release

from ._caching import CacheTtl, Position, remember_scan, scan_before_last
from ._render import RenderState, Span, StripEntry
from ._resident import paused_collector

LEVEL = 1
"""zlib's fastest level: a window's pickle (about its wire bytes) shrinks three- to fourfold in
a few milliseconds; higher levels gain little on this kind of text and cost several times more.
(zstd, tried, packed 2.5 times and restored twice as fast, but the allocator kept its
megabyte-sized buffers: resident agents cost a third of a request more each.)"""


def pack(raw: bytes) -> bytes:
    """``raw`` compressed as a compact render holds it."""
    return zlib.compress(raw, LEVEL)


def unpack(blob: bytes) -> bytes:
    """``pack``'s input back.

    Raises:
        zlib.error: ``blob`` is not what ``pack`` made.
    """
    return zlib.decompress(blob)


_RELEASES = "window_releases"
"""The key of ``of``'s releases among the pickled fields (not a ``RenderState`` field)."""

_MARKERS = "window_markers"
"""The key of the rendered messages' cache markers among the pickled fields (as ``_RELEASES``)."""


class NotARender(ValueError):
    """The bytes are not a compact render this library made (damaged, or naming a class)."""


class _BuiltinsOnly(pickle.Unpickler):
    """Unpickles built-in values only: any class or function named in the bytes is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise NotARender(f"a compact render names no class, found {module}.{name}")


@attrs.frozen
class CompactRender:
    """One branch's render as compressed bytes, with what deciding to restore it needs."""

    blob: bytes
    change_serial: int
    last_sequence: int
    raw_size: int
    """The uncompressed pickle's length (about the hot render's rendered bytes)."""

    @classmethod
    def of(
        cls, state: RenderState, releases: Mapping[MessageId, Release] | None = None
    ) -> CompactRender:
        """``state`` compacted; ``releases``: the stored releases of every message in
        ``state.sequences`` (none for a message: it has none), or ``None`` (not read)."""
        fields: dict[str, Any] = attrs.asdict(state, recurse=False)
        # one provenance entry and one span per message: as tuples they pickle in C
        fields["provenance"] = [_flat_provenance(entry) for entry in state.provenance]
        fields["spans"] = [(span.sequence, span.tokens, span.clean) for span in state.spans]
        fields["unreported"] = [attrs.astuple(e, recurse=False) for e in state.unreported]
        fields["left_out"] = {k: attrs.astuple(e, recurse=False) for k, e in state.left_out.items()}
        fields[_RELEASES] = (
            None
            if releases is None
            else [attrs.astuple(release, recurse=False) for release in releases.values()]
        )
        fields[_MARKERS] = scan_before_last(state.messages)
        raw = pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(pack(raw), state.change_serial, state.last_sequence, len(raw))

    def restore(self) -> RenderState:
        """A new ``RenderState`` equal to the one compacted.

        Raises:
            NotARender: the bytes do not decompress, or do not hold a render's fields.
        """
        return self.restore_window()[0]

    @paused_collector
    def restore_window(self) -> tuple[RenderState, list[Release] | None]:
        """``restore()``, and the releases given to ``of`` (``None``: none were given). The
        collector is paused meanwhile: everything unpickled stays alive.

        Raises:
            NotARender: the bytes do not decompress, or do not hold a render's fields.
        """
        try:
            fields = _BuiltinsOnly(io.BytesIO(unpack(self.blob))).load()
            released = fields.pop(_RELEASES)
            markers = [_marker(*found) for found in fields.pop(_MARKERS)]
            fields["provenance"] = _provenance(fields["provenance"])
            fields["spans"] = list(starmap(Span, fields["spans"]))
            fields["unreported"] = [StripEntry(*e) for e in fields["unreported"]]
            fields["left_out"] = {k: StripEntry(*e) for k, e in fields["left_out"].items()}
            releases = None if released is None else list(starmap(Release, released))
            state = RenderState(**fields)
        except NotARender:
            raise
        except Exception as err:  # damaged bytes fail in many ways; each is the same refusal
            raise NotARender(f"not a compact render: {err!r:.200}") from err
        remember_scan(state.messages, markers)
        return state, releases

    @property
    def nbytes(self) -> int:
        return len(self.blob)


def _marker(position: Any, ttl: Any) -> tuple[Position, CacheTtl]:
    """A cache marker read back, checked (``ValueError``: not one ``scan_before_last`` gave)."""
    section, i, j = position
    if section not in ("tools", "system", "messages") or ttl not in ("5m", "1h"):
        raise ValueError(f"not a cache marker: {position!r:.80} {ttl!r:.20}")
    return (section, int(i), int(j)), ttl


def _flat_provenance(entry: ProvenanceEntry) -> tuple[Any, ...]:
    """``entry`` as built-in values: ``(kind, message_id, blocks, signatures)`` for one source
    (nearly every entry: one stored message behind one compiled message), else ``(kind,
    [(message_id, blocks, signatures), ...])``."""
    if len(entry.sources) == 1:
        only = entry.sources[0]
        return (entry.kind, only.message_id, only.blocks, only.signatures)
    return (entry.kind, [(s.message_id, s.blocks, s.signatures) for s in entry.sources])


def _provenance(flat: list[tuple[Any, ...]]) -> list[ProvenanceEntry]:
    """The entries ``_flat_provenance`` gave, rebuilt (a restarted host's first compile makes
    one per message: the common case first, no generator)."""
    entries: list[ProvenanceEntry] = []
    append = entries.append
    for entry in flat:
        if len(entry) == 4:
            append(ProvenanceEntry(entry[0], (Source(entry[1], entry[2], entry[3]),)))
        else:
            append(ProvenanceEntry(entry[0], tuple(starmap(Source, entry[1]))))
    return entries
