"""Merging per-branch index ranges into one ordered read: shared by both stores.

Pure: takes already-ordered iterables (one per lineage segment) and returns the merged,
filtered, limited list. Stops consuming as soon as ``limit`` is reached, so a tail read of a long
history costs O(limit), not O(history).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from context_manager._model._errors import InvalidValue
from context_manager._model._messages import StoredMessage


def check_limit(limit: int | None) -> None:
    """Refuse a negative ``limit`` (``0`` reads nothing, ``None`` reads all).

    Raises:
        ValueError: naming the limit.
    """
    if limit is not None and limit < 0:
        raise InvalidValue(f"limit must be None or at least 0, got {limit!r}")


def select_window(
    segments: Iterable[Iterable[StoredMessage]],
    *,
    kind: str | None,
    limit: int | None,
    newest_first: bool,
) -> list[StoredMessage]:
    """Merge ``segments`` (each ordered alike) by sequence, keep ``kind``, cut at ``limit``.

    One segment that is a list, with no ``kind`` and no ``limit``, is returned as it is (the
    stores pass lists they just built)."""
    check_limit(limit)
    out: list[StoredMessage] = []
    if limit == 0:
        return out
    parts = list(segments)
    merged: Iterable[StoredMessage] = (
        parts[0]  # one segment (a branch without forks): already in order
        if len(parts) == 1
        else heapq.merge(*parts, key=lambda m: m.sequence, reverse=newest_first)
    )
    if kind is None and limit is None and isinstance(merged, list):
        return merged
    for message in merged:
        if kind is not None and message.metadata.kind != kind:
            continue
        out.append(message)
        if limit is not None and len(out) >= limit:
            break
    return out
