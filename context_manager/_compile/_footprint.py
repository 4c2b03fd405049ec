"""What a kept render costs in memory: an O(1) estimate, the size the per-process bound counts.

A hot render is more than its encoded bytes: each rendered message is a dict of block dicts
with their strings, a provenance entry, a span, a token count and an entry in ``sequences``;
the binding record learns the window's releases, the stamp cache its stamps, and a render
built from the store also keeps the window's stored messages (block objects, metadata) and
each block's encoded piece. Walking all of that at every compile would cost more than the
compile, so the bound counts

    encoded bytes + RENDERED_MESSAGE_BYTES x rendered messages + WINDOW_MESSAGE_BYTES x stored
    messages kept in the window memo

(``len()`` of two lists: O(1)). The constants were calibrated with ``tracemalloc`` as the
growth of a process by one manager's first compile (everything that compile keeps), on the
benchmark history (2,432 messages in the window, tool rounds, 0.8 MB encoded: 4.6 MB restored
from a snapshot, 8.1 MB rendered from the store) and on three ``MemoryStore`` histories (72
messages with 70 kB thinking blocks, 800 one-line messages, 400 messages of 2 kB): a snapshot
restore measured 1.5 kB per rendered message beyond its pickled bytes in all four, and a
render from the store 0.35 to 1.5 kB more per stored message. The estimate lands within
0.8x to 1.4x of the measured size on all of them (``tests/compile/test_render_footprint.py``
holds it within ``FOOTPRINT_FACTOR``). On the benchmark history that is about five times the
request's wire bytes; the encoded bytes alone, all the bound counted before issue 36, are about
one. A compact render is counted as its compressed bytes (one ``bytes`` object: exact). Pure.
"""

from __future__ import annotations

RENDERED_MESSAGE_BYTES = 1536
"""Python objects per rendered message beyond its encoded bytes (dicts, provenance, span,
token count, sequence, its share of releases and stamps)."""

WINDOW_MESSAGE_BYTES = 1024
"""Python objects per stored message kept in the window memo (block objects, metadata)."""

FOOTPRINT_FACTOR = 2.0
"""The estimate is within this factor of the measured size, either way (the test's bound)."""


def hot_render_bytes(encoded: int, rendered: int, stored: int) -> int:
    """The estimated memory of a hot render: ``encoded`` bytes (its encoded blocks or pickled
    fields), ``rendered`` messages in it and ``stored`` messages kept in its window memo."""
    return encoded + RENDERED_MESSAGE_BYTES * rendered + WINDOW_MESSAGE_BYTES * stored
