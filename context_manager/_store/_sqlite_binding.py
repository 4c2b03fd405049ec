"""``SQLiteStore``'s binding records: each branch's releases, reports, window anchor, left-out
set and anchored heads. Each write is one transaction and adds one to the agent's binding serial
(``Store.serials``)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from context_manager._model._messages import MessageId

from ._protocol import AnchoredHead, BindingRecordData, Release, left_out_since
from ._rows import RELEASE_COLUMNS, release_from_row
from ._sql import added_release_sql, committed_release_sql
from ._sqlite_schema import SQL_VARIABLES_PER_QUERY


class SQLiteBindingRecords:
    """The binding-record half of ``SQLiteStore`` (a base class: it is one)."""

    _lock: threading.RLock
    _db: sqlite3.Connection

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        state = self._query(
            "SELECT first_compiled, anchor FROM branch_state WHERE ns = ? AND branch = ?",
            (namespace, branch),
        )
        rows = (
            self._query(
                f"SELECT {RELEASE_COLUMNS} FROM releases WHERE ns = ? AND branch = ?",
                (namespace, branch),
            )
            if releases
            else []
        )
        return BindingRecordData(
            first_compiled=bool(state and state[0][0]),
            releases={r[0]: release_from_row(r) for r in rows},
            anchor=None if not state or state[0][1] is None else int(state[0][1]),
            left_out=frozenset(
                (r[0], int(r[1]))
                for r in self._query(
                    "SELECT message_id, block FROM left_out WHERE ns = ? AND branch = ?",
                    (namespace, branch),
                )
            ),
            anchored_head=next(
                (
                    AnchoredHead.from_json(r[0], r[1])
                    for r in self._query(
                        "SELECT at_seq, head FROM anchored_heads WHERE ns = ? AND branch = ? "
                        "ORDER BY at_seq DESC LIMIT 1",
                        (namespace, branch),
                    )
                ),
                None,
            ),
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
        with self._transaction() as db:
            _bump_binding(db, namespace)
            if anchored_head is not None:
                db.execute(
                    "INSERT INTO anchored_heads (ns, branch, at_seq, head) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (ns, branch, at_seq) DO UPDATE SET head = excluded.head",
                    (namespace, branch, anchored_head.at_sequence, anchored_head.to_json()),
                )
            if left_out is not None:
                since = {
                    (row[0], int(row[1])): row[2]
                    for row in db.execute(
                        "SELECT message_id, block, at_seq FROM left_out "
                        "WHERE ns = ? AND branch = ?",
                        (namespace, branch),
                    )
                }
                db.execute("DELETE FROM left_out WHERE ns = ? AND branch = ?", (namespace, branch))
                db.executemany(
                    "INSERT INTO left_out (ns, branch, message_id, block, at_seq) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [
                        (namespace, branch, mid, int(b), left_out_since(since, mid, b, at_sequence))
                        for mid, b in left_out
                    ],
                )
            if first_compiled or anchor is not None:
                db.execute(
                    "INSERT INTO branch_state (ns, branch, first_compiled, anchor) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (ns, branch) DO UPDATE SET "
                    "first_compiled = max(first_compiled, excluded.first_compiled), "
                    "anchor = coalesce(excluded.anchor, anchor)",
                    (namespace, branch, int(first_compiled), anchor),
                )
            db.executemany(
                committed_release_sql("?"),
                [(namespace, branch, mid, block, True, at_sequence) for mid, block in releases],
            )
            db.executemany(
                "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                [(namespace, branch, mid, block, at_sequence) for mid, block in releases],
            )
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
        with self._transaction() as db:
            _bump_binding(db, namespace)
            db.execute(
                added_release_sql("?"),
                (namespace, branch, message_id, from_block, False, at_sequence),
            )
            db.execute(
                "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (namespace, branch, message_id, from_block, at_sequence),
            )


def _bump_binding(db: sqlite3.Connection, namespace: str) -> None:
    """Count one binding-record write of ``namespace`` (inside the write's transaction)."""
    db.execute(
        "INSERT INTO binding_serials (ns, serial) VALUES (?, 1) "
        "ON CONFLICT (ns) DO UPDATE SET serial = serial + 1",
        (namespace,),
    )
