"""SQL text the SQLite and PostgreSQL stores build alike (only their placeholders differ),
including the binding record's release rules (``_semantics`` in SQL).

Pure: builds statements and their parameters; runs nothing. Every value goes in as a
parameter, never into the text.
"""

from __future__ import annotations

from typing import Any

from ._protocol import Lineage

MESSAGE_COLUMNS = "id, seq, branch, role, content, meta, created_at"
"""The ``messages`` columns a stored message is read from, in the order the stores decode."""


def segment_queries(
    mark: str,
    namespace: str,
    lineage: Lineage,
    *,
    after: int | None = None,
    upto: int | None = None,
    kind: str | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> list[tuple[str, list[Any]]]:
    """One statement per segment of ``lineage`` (branch ``key`` up to ``top``) reading its
    messages with ``read``'s filters, placeholders written ``mark`` (``?`` or ``%s``)."""
    order = "DESC" if newest_first else "ASC"
    out = []
    for key, top in lineage:
        bounds = [x for x in (top, upto) if x is not None]
        sql = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE ns = {mark} AND branch = {mark}"
        params: list[Any] = [namespace, key]
        if after is not None:
            sql += f" AND seq > {mark}"
            params.append(after)
        if bounds:
            sql += f" AND seq <= {mark}"
            params.append(min(bounds))
        if kind is not None:
            sql += f" AND kind = {mark}"
            params.append(kind)
        sql += f" ORDER BY seq {order}"
        if limit is not None:
            sql += f" LIMIT {mark}"
            params.append(limit)
        out.append((sql, params))
    return out


def committed_release_sql(mark: str) -> str:
    """``commit_binding``'s release write, the SQL form of ``_semantics.committed_release``:
    the lower ``from_block`` wins, and ``at_seq`` moves only when it lowers. Parameters:
    ``(ns, branch, message_id, from_block, reported=True, at_seq)``."""
    lowers = "excluded.from_block < releases.from_block"
    return (
        "INSERT INTO releases (ns, branch, message_id, from_block, reported, at_seq) "
        f"VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}) "
        "ON CONFLICT (ns, branch, message_id) DO UPDATE SET "
        f"at_seq = CASE WHEN {lowers} THEN excluded.at_seq ELSE releases.at_seq END, "
        f"from_block = CASE WHEN {lowers} THEN excluded.from_block "
        "ELSE releases.from_block END, "
        "reported = excluded.reported"
    )


def added_release_sql(mark: str) -> str:
    """``add_release``'s write, the SQL form of ``_semantics.added_release``: only a lower
    ``from_block`` changes anything, and what was reported is kept in ``reported_from``.
    Parameters: ``(ns, branch, message_id, from_block, reported=False, at_seq)``."""
    return (
        "INSERT INTO releases (ns, branch, message_id, from_block, reported, at_seq) "
        f"VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}) "
        "ON CONFLICT (ns, branch, message_id) DO UPDATE SET "
        "at_seq = excluded.at_seq, "
        "reported_from = CASE WHEN releases.reported THEN releases.from_block "
        "ELSE releases.reported_from END, "
        "from_block = excluded.from_block, reported = excluded.reported "
        "WHERE excluded.from_block < releases.from_block"
    )
