"""``PostgresStore``'s binding records: each branch's releases, reports, window anchor, left-out
set and anchored heads. Each write is one transaction under the agent's lock and adds one to the
agent's binding serial (``Store.serials``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from context_manager._model._messages import MessageId

from ._postgres_connection import PostgresConnections
from ._protocol import AnchoredHead, BindingRecordData, Release, left_out_since
from ._rows import RELEASE_COLUMNS, release_from_row
from ._sql import added_release_sql, committed_release_sql

if TYPE_CHECKING:
    import psycopg

    Connection = psycopg.Connection[tuple[Any, ...]]


class PostgresBindingRecords(PostgresConnections):
    """The binding-record half of ``PostgresStore`` (a base class: it is one)."""

    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        with self._reading(namespace) as conn:
            state = conn.execute(
                "SELECT first_compiled, anchor FROM branch_state WHERE ns = %s AND branch = %s",
                (namespace, branch),
            ).fetchone()
            rows = (
                conn.execute(
                    f"SELECT {RELEASE_COLUMNS} FROM releases WHERE ns = %s AND branch = %s",
                    (namespace, branch),
                ).fetchall()
                if releases
                else []
            )
            left = conn.execute(
                "SELECT message_id, block FROM left_out WHERE ns = %s AND branch = %s",
                (namespace, branch),
            ).fetchall()
            head = conn.execute(
                "SELECT at_seq, head FROM anchored_heads WHERE ns = %s AND branch = %s "
                "ORDER BY at_seq DESC LIMIT 1",
                (namespace, branch),
            ).fetchone()
        return BindingRecordData(
            first_compiled=bool(state and state[0]),
            releases={r[0]: release_from_row(r) for r in rows},
            anchor=None if state is None or state[1] is None else int(state[1]),
            left_out=frozenset((r[0], int(r[1])) for r in left),
            anchored_head=None if head is None else AnchoredHead.from_json(head[0], head[1]),
        )

    def releases(
        self, namespace: str, branch: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, Release]:
        ids = list(message_ids)
        if not ids:
            return {}
        with self._reading(namespace) as conn:
            rows = conn.execute(
                f"SELECT {RELEASE_COLUMNS} FROM releases WHERE ns = %s AND branch = %s "
                "AND message_id = ANY(%s)",
                (namespace, branch, ids),
            ).fetchall()
        return {r[0]: release_from_row(r) for r in rows}

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
        with self._write(namespace) as conn, conn.cursor() as cursor:
            _bump_binding(cursor, namespace)
            if anchored_head is not None:
                cursor.execute(
                    "INSERT INTO anchored_heads (ns, branch, at_seq, head) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (ns, branch, at_seq) DO UPDATE SET "
                    "head = excluded.head",
                    (namespace, branch, anchored_head.at_sequence, anchored_head.to_json()),
                )
            if left_out is not None:
                cursor.execute(
                    "SELECT message_id, block, at_seq FROM left_out WHERE ns = %s AND branch = %s",
                    (namespace, branch),
                )
                since = {(row[0], int(row[1])): row[2] for row in cursor.fetchall()}
                cursor.execute(
                    "DELETE FROM left_out WHERE ns = %s AND branch = %s", (namespace, branch)
                )
                if left_out:
                    cursor.executemany(
                        "INSERT INTO left_out (ns, branch, message_id, block, at_seq) "
                        "VALUES (%s, %s, %s, %s, %s)",
                        [
                            (
                                namespace,
                                branch,
                                mid,
                                int(block),
                                left_out_since(since, mid, block, at_sequence),
                            )
                            for mid, block in left_out
                        ],
                    )
            if first_compiled or anchor is not None:
                cursor.execute(
                    "INSERT INTO branch_state (ns, branch, first_compiled, anchor) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (ns, branch) DO UPDATE SET "
                    "first_compiled = branch_state.first_compiled OR excluded.first_compiled, "
                    "anchor = coalesce(excluded.anchor, branch_state.anchor)",
                    (namespace, branch, first_compiled, anchor),
                )
            if releases:
                cursor.executemany(
                    committed_release_sql("%s"),
                    [(namespace, branch, mid, block, True, at_sequence) for mid, block in releases],
                )
                cursor.executemany(
                    "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    [(namespace, branch, mid, block, at_sequence) for mid, block in releases],
                )
            if reported:
                cursor.execute(
                    "UPDATE releases SET reported = true "
                    "WHERE ns = %s AND branch = %s AND message_id = ANY(%s)",
                    (namespace, branch, list(reported)),
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
        with self._write(namespace) as conn:
            _bump_binding(conn, namespace)
            conn.execute(
                added_release_sql("%s"),
                (namespace, branch, message_id, from_block, False, at_sequence),
            )
            conn.execute(
                "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (namespace, branch, message_id, from_block, at_sequence),
            )


def _bump_binding(conn: Connection | psycopg.Cursor[tuple[Any, ...]], namespace: str) -> None:
    """Count one binding-record write of ``namespace`` (inside the write's transaction, under
    the agent's lock)."""
    conn.execute(
        "INSERT INTO binding_serials (ns, serial) VALUES (%s, 1) "
        "ON CONFLICT (ns) DO UPDATE SET serial = binding_serials.serial + 1",
        (namespace,),
    )
