"""Branch lineage: which stored messages a branch sees. Pure functions over ``BranchRecord``.

A branch sees its own messages and its parent's up to the fork point, recursively; the visible
bound only ever shrinks going up the lineage.
"""

from __future__ import annotations

from collections.abc import Callable

from ._protocol import BranchRecord, Lineage


def lineage_of(record: BranchRecord, lookup: Callable[[str], BranchRecord]) -> Lineage:
    """The ``(branch key, highest visible sequence)`` segments ``record`` reads, itself first."""
    segments: list[tuple[str, int | None]] = [(record.key, None)]
    bound: int | None = None
    current = record
    while current.parent is not None:
        fork = current.fork_sequence
        bound = fork if bound is None else (bound if fork is None else min(bound, fork))
        current = lookup(current.parent)
        segments.append((current.key, bound))
    return tuple(segments)
