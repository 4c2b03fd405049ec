"""Merging per-branch index ranges into one ordered read: shared by both stores.

Pure: takes already-ordered iterables (one per lineage segment) and returns the merged,
filtered, limited list. Stops consuming as soon as ``limit`` is reached, so a tail read of a long
history costs O(limit), not O(history).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from ._messages import StoredMessage


def select_window(
    segments: Iterable[Iterable[StoredMessage]],
    *,
    kind: str | None,
    limit: int | None,
    newest_first: bool,
) -> list[StoredMessage]:
    """Merge ``segments`` (each ordered the same way) by sequence, keep ``kind``, cut at ``limit``."""
    merged = heapq.merge(*segments, key=lambda m: m.sequence, reverse=newest_first)
    out: list[StoredMessage] = []
    for message in merged:
        if kind is not None and message.metadata.kind != kind:
            continue
        out.append(message)
        if limit is not None and len(out) >= limit:
            break
    return out
