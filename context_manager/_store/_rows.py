"""Row shapes shared by the SQL stores (SQLite and PostgreSQL): one reading of each, used by both.

Pure functions of a fetched row; the statements that fetch them stay in each store's module.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

from context_manager._model._content import blocks_from_wire
from context_manager._model._messages import MessageMeta, StoredMessage

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


PLAIN_META = json.dumps(MessageMeta().to_json())
"""How the metadata of most messages is stored (nothing set): read without decoding."""


def messages_from_rows(
    rows: Sequence[Sequence[Any]], created: Callable[[Any], dt.datetime]
) -> list[StoredMessage]:
    """The messages ``MESSAGE_COLUMNS`` rows hold (``created`` reads a row's ``created_at`` as
    its driver gives it), their contents decoded as one JSON array: one call, not one per row
    (a window is thousands of rows). Any doubt falls back to row by row."""
    if len(rows) > 1:
        try:
            contents = json.loads("[" + ",".join([row[4] for row in rows]) + "]")
        except (TypeError, ValueError):
            contents = None
        if contents is not None and len(contents) == len(rows):
            return [
                message_from_row(row, created, content)
                for row, content in zip(rows, contents, strict=True)
            ]
    return [message_from_row(row, created) for row in rows]


def message_from_row(
    row: Sequence[Any], created: Callable[[Any], dt.datetime], decoded: Any = None
) -> StoredMessage:
    """The message a ``MESSAGE_COLUMNS`` row holds; ``decoded``: its content already decoded."""
    message_id, sequence, branch, role, content, meta, created_at = row
    return StoredMessage(  # positional, in field order: a third cheaper, once per row read
        message_id,
        int(sequence),
        branch,
        role,
        blocks_from_wire(json.loads(content) if decoded is None else decoded),
        MessageMeta() if meta == PLAIN_META else MessageMeta.from_json(json.loads(meta)),
        created(created_at),
    )
