"""``create_branch`` in SQL, once for both SQL stores: the statements (``_statements``) each
runs inside its own write transaction, in one order.

A branch's row, then (for a fork) its inheritance of the parent's binding record as of the
fork point (SPEC 5). Raises before writing anything when the name is taken by a live branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from context_manager._model._errors import BranchExists

from ._protocol import BranchRecord, BranchRef
from ._statements import Statements


class Executes(Protocol):
    """A connection that runs a statement with named parameters (``sqlite3`` and psycopg)."""

    def execute(self, sql: str, params: Mapping[str, Any], /) -> Any:
        """Run ``sql``; the result has ``fetchone``."""
        ...


def insert_branch(
    conn: Executes,
    statements: Statements,
    next_created: Callable[[], int],
    namespace: str,
    name: str,
    parent: str | None,
    fork_sequence: int | None,
) -> BranchRecord:
    """Write branch ``name`` (forked from branch key ``parent`` at ``fork_sequence``) with
    ``conn``, its ``created`` counter from ``next_created``. Raises ``BranchExists``."""
    if conn.execute(statements.branch_taken, {"ns": namespace, "name": name}).fetchone():
        raise BranchExists(name)
    created = next_created()
    ref = BranchRef(id=f"b{created}", name=name, created=created)
    record = BranchRecord(ref=ref, parent=parent, fork_sequence=fork_sequence)
    row = {"ns": namespace, "name": name, "parent": parent, "fork": fork_sequence}
    conn.execute(statements.branch_insert, {**row, "id": ref.id, "created": created})
    if parent is not None:  # inherit the binding record as of the fork point (SPEC 5)
        for statement in statements.fork:
            conn.execute(statement, {**row, "key": record.key})
    return record
