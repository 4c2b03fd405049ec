"""``SQLiteStore``'s binding records: each branch's releases, reports, window anchor, left-out
set and anchored heads. Each write is one transaction and adds one to the agent's binding serial
(``Store.serials``)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from context_manager._model._messages import MessageId

from ._protocol import AnchoredHead, BindingRecordData, Release
from ._rows import RELEASE_COLUMNS, release_from_row
from ._sqlite_schema import SQL_VARIABLES_PER_QUERY
from ._statements import SQLITE, anchored_head_row, left_out_rows, release_rows


class SQLiteBindingRecords:
    """The binding-record half of ``SQLiteStore`` (a base class: it is one)."""

    _lock: threading.RLock
    _db: sqlite3.Connection

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        raise NotImplementedError

    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        at = {"ns": namespace, "branch": branch}
        state = self._query(SQLITE.branch_state_of, at)
        rows = self._query(SQLITE.releases_of, at) if releases else []
        heads = self._query(SQLITE.anchored_head_of, at)
        return BindingRecordData(
            first_compiled=bool(state and state[0][0]),
            releases={r[0]: release_from_row(r) for r in rows},
            anchor=None if not state or state[0][1] is None else int(state[0][1]),
            left_out=frozenset((r[0], int(r[1])) for r in self._query(SQLITE.left_out_of, at)),
            anchored_head=AnchoredHead.from_json(*heads[0]) if heads else None,
        )

    def releases(
        self, namespace: str, branch: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, Release]:
        out: dict[MessageId, Release] = {}
        ids = list(message_ids)
        for start in range(0, len(ids), SQL_VARIABLES_PER_QUERY):
            chunk = ids[start : start + SQL_VARIABLES_PER_QUERY]
            marks = ",".join("?" * len(chunk))
            for row in self._query(
                f"SELECT {RELEASE_COLUMNS} FROM releases WHERE ns = ? AND branch = ? "
                f"AND message_id IN ({marks})",
                [namespace, branch, *chunk],
            ):
                out[row[0]] = release_from_row(row)
        return out

    def commit_binding(
        self,
        namespace: str,
        branch: str,
        *,
        first_compiled: bool,
        releases: Sequence[tuple[MessageId, int]],
        reported: Sequence[MessageId],
        anchor: int | None = None,
        left_out: Sequence[tuple[MessageId, int]] | None = None,
        at_sequence: int | None = None,
        anchored_head: AnchoredHead | None = None,
    ) -> None:
        at = {"ns": namespace, "branch": branch}
        with self._transaction() as db:
            db.execute(SQLITE.bump_binding, at)
            if anchored_head is not None:
                db.execute(SQLITE.anchored_head, {**at, **anchored_head_row(anchored_head)})
            if left_out is not None:
                since = {(r[0], int(r[1])): r[2] for r in db.execute(SQLITE.left_out_since, at)}
                db.execute(SQLITE.left_out_clear, at)
                db.executemany(SQLITE.left_out_add, left_out_rows(at, left_out, since, at_sequence))
            if first_compiled or anchor is not None:
                db.execute(
                    SQLITE.branch_state, {**at, "first_compiled": first_compiled, "anchor": anchor}
                )
            written = release_rows(at, releases, at_sequence)
            db.executemany(SQLITE.committed_release, written)
            db.executemany(SQLITE.release_history, written)
            db.executemany(
                "UPDATE releases SET reported = 1 WHERE ns = ? AND branch = ? AND message_id = ?",
                [(namespace, branch, mid) for mid in reported],
            )

    def add_release(
        self,
        namespace: str,
        branch: str,
        message_id: MessageId,
        from_block: int,
        *,
        at_sequence: int | None = None,
    ) -> None:
        (row,) = release_rows(
            {"ns": namespace, "branch": branch}, [(message_id, from_block)], at_sequence
        )
        with self._transaction() as db:
            db.execute(SQLITE.bump_binding, row)
            db.execute(SQLITE.added_release, row)
            db.execute(SQLITE.release_history, row)
