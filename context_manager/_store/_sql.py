"""SQL text the SQLite and PostgreSQL stores build alike (only their placeholders differ).

Pure: builds statements and their parameters; runs nothing. Every value goes in as a
parameter, never into the text.
"""

from __future__ import annotations

from typing import Any

MESSAGE_COLUMNS = "id, seq, branch, role, content, meta, created_at"
"""The ``messages`` columns a stored message is read from, in the order the stores decode."""


def segment_query(
    mark: str,
    namespace: str,
    key: str,
    top: int | None,
    *,
    after: int | None = None,
    upto: int | None = None,
    kind: str | None = None,
    limit: int | None = None,
    newest_first: bool = False,
) -> tuple[str, list[Any]]:
    """The statement reading one lineage segment's messages (branch ``key`` up to ``top``)
    with ``read``'s filters, its placeholders written ``mark`` (``?`` or ``%s``)."""
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
    sql += f" ORDER BY seq {'DESC' if newest_first else 'ASC'}"
    if limit is not None:
        sql += f" LIMIT {mark}"
        params.append(limit)
    return sql, params
