"""Row shapes shared by the SQL stores (SQLite and PostgreSQL): one reading of each, used by both.

Pure functions of a fetched row; the statements that fetch them stay in each store's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._protocol import BranchRecord, BranchRef, Release

RELEASE_COLUMNS = "message_id, from_block, reported, reported_from, at_seq"
"""The columns ``release_from_row`` reads, in order."""


def release_from_row(row: Sequence[Any]) -> Release:
    """The release a ``RELEASE_COLUMNS`` row holds."""
    return Release(
        row[0],
        int(row[1]),
        bool(row[2]),
        None if row[3] is None else int(row[3]),
        None if row[4] is None else int(row[4]),
    )


def branch_from_row(row: Sequence[Any], *, deleted: bool = False) -> BranchRecord:
    """The branch an ``(id, name, created, parent, fork_sequence)`` row holds."""
    branch_id, name, created, parent, fork_sequence = row
    return BranchRecord(
        ref=BranchRef(id=branch_id, name=name, created=int(created)),
        parent=parent,
        fork_sequence=fork_sequence,
        deleted=deleted,
    )
