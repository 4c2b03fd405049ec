"""Stamps at the store boundary: what each store's ``stamps`` returns, read one way by all three.

A stored row (JSON text in the SQL stores, the decoded object in ``MemoryStore``) is parsed
once per read by ``_model._stamps.parse_stamp``: a readable one becomes a typed ``Stamp`` or
``LegacyStamp``, an unreadable one ``None``, logged once per row for the store's life (not at
every read). A store writes ``stamp_to_json`` / ``stamp_to_wire``.
"""

from __future__ import annotations

from collections.abc import Iterable

from context_manager._model._messages import MessageId
from context_manager._model._stamps import AnyStamp, parse_stamp


class StampRows:
    """One store's reading of its stamp rows, remembering the unreadable rows it has logged."""

    def __init__(self) -> None:
        self._logged: set[tuple[object, ...]] = set()

    def read(
        self, namespace: str, rows: Iterable[tuple[MessageId, object]]
    ) -> dict[MessageId, AnyStamp | None]:
        """``{message id: its stamp}`` of ``(message id, stored stamp)`` rows; ``None`` for an
        unreadable row (logged the first time this store reads it)."""
        out: dict[MessageId, AnyStamp | None] = {}
        for message_id, raw in rows:
            out[message_id] = parse_stamp(raw, message_id, namespace=namespace, logged=self._logged)
        return out
