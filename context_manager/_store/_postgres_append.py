"""``PostgresStore.append`` outside a batch in one round trip (issue 36: a tool loop's record).

Invariants: the same rows as the batch path (``_statements.message_insert`` and
``signature_insert``), written all-or-nothing under the agent's advisory lock. The statements
go out pipelined with the transaction's ``COMMIT``: the lock is the waiting kind under the
transaction's ``lock_timeout`` (a timeout is ``AgentBusy``, as for every write), the sequence
number is drawn inside the insert (the message id is ``msg_<sequence>``), and a branch that
does not exist inserts nothing (the caller raises ``BranchNotFound``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

APPEND = """
WITH m AS (
    INSERT INTO messages (seq, id, ns, branch, role, content, meta, kind, created_at, stamp)
    SELECT s.seq, 'msg_' || s.seq, %(ns)s, %(branch)s, %(role)s, %(content)s, %(meta)s,
        %(kind)s, %(created_at)s, %(stamp)s
    FROM (SELECT nextval('counter') AS seq) AS s
    WHERE EXISTS (SELECT 1 FROM branches WHERE ns = %(ns)s AND id = %(branch_id)s)
    RETURNING seq, id
), signed AS (
    INSERT INTO signatures (ns, sig, message_id)
    SELECT %(ns)s, sig, m.id FROM m, unnest(CAST(%(sigs)s AS text[])) AS sig
)
SELECT seq FROM m
"""
"""The message row and its signature rows, or nothing when the branch id is not there."""

WAIT_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"


def append_params(row: dict[str, Any], branch: str, signatures: Sequence[str]) -> dict[str, Any]:
    """``APPEND``'s parameters from ``message_row``'s (its sequence and id are drawn inside)."""
    params = {k: v for k, v in row.items() if k not in ("seq", "id")}
    return {**params, "branch_id": branch.partition("@")[0], "sigs": list(signatures)}


def append_once(conn: Any, lock: tuple[int, int], timeout_ms: int, params: dict[str, Any]) -> Any:
    """Run ``APPEND`` in one pipelined transaction on ``conn`` (autocommit): ``BEGIN`` to
    ``COMMIT`` go out together and are answered together. The new sequence, or ``None`` when
    the branch is not there. Raises what the server raises (a lock timeout is
    ``LockNotAvailable``), the transaction rolled back."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(f"SET LOCAL lock_timeout = {int(timeout_ms)}")
            conn.execute(WAIT_LOCK, lock)
            cursor = conn.execute(APPEND, params)
            conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")  # the server left the failed block open
        raise
    row = cursor.fetchone()
    return None if row is None else int(row[0])
