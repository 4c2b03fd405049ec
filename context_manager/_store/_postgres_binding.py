"""``PostgresStore``'s binding records: each branch's releases, reports, window anchor, left-out
set and anchored heads. Each write is one transaction under the agent's lock and adds one to the
agent's binding serial (``Store.serials``)."""

from __future__ import annotations

from collections.abc import Sequence

from context_manager._model._messages import MessageId

from ._postgres_connection import PostgresConnections
from ._protocol import AnchoredHead, BindingRecordData, Release
from ._rows import RELEASE_COLUMNS, release_from_row
from ._statements import POSTGRES, anchored_head_row, left_out_rows, release_rows


class PostgresBindingRecords(PostgresConnections):
    """The binding-record half of ``PostgresStore`` (a base class: it is one)."""

    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        at = {"ns": namespace, "branch": branch}
        with self._reading(namespace) as conn:
            with conn.pipeline():  # one round trip: the results are read after
                states = conn.execute(POSTGRES.branch_state_of, at)
                found = conn.execute(POSTGRES.releases_of, at) if releases else None
                lefts = conn.execute(POSTGRES.left_out_of, at)
                heads = conn.execute(POSTGRES.anchored_head_of, at)
            state = states.fetchone()
            rows = found.fetchall() if found is not None else []
            left = lefts.fetchall()
            head = heads.fetchone()
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
        at = {"ns": namespace, "branch": branch}
        with self._write(namespace) as conn, conn.cursor() as cursor:
            cursor.execute(POSTGRES.bump_binding, at)
            if anchored_head is not None:
                cursor.execute(POSTGRES.anchored_head, {**at, **anchored_head_row(anchored_head)})
            if left_out is not None:
                cursor.execute(POSTGRES.left_out_since, at)
                since = {(row[0], int(row[1])): row[2] for row in cursor.fetchall()}
                cursor.execute(POSTGRES.left_out_clear, at)
                if left_out:
                    cursor.executemany(
                        POSTGRES.left_out_add, left_out_rows(at, left_out, since, at_sequence)
                    )
            if first_compiled or anchor is not None:
                cursor.execute(
                    POSTGRES.branch_state,
                    {**at, "first_compiled": first_compiled, "anchor": anchor},
                )
            if releases:
                written = release_rows(at, releases, at_sequence)
                cursor.executemany(POSTGRES.committed_release, written)
                cursor.executemany(POSTGRES.release_history, written)
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
        (row,) = release_rows(
            {"ns": namespace, "branch": branch}, [(message_id, from_block)], at_sequence
        )
        with self._write(namespace) as conn:
            conn.execute(POSTGRES.bump_binding, row)
            conn.execute(POSTGRES.added_release, row)
            conn.execute(POSTGRES.release_history, row)
