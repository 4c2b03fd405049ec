"""SQL text the SQLite and PostgreSQL stores build alike (only their placeholders differ): the
message reads. The binding record's statements are ``_statements``.

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
