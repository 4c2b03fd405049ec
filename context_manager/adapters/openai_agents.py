"""OpenAI Agents SDK: a ``Session`` whose items live in this library's store.

``TranscriptSession`` implements the Agents SDK's session protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``; the ``openai-agents`` extra, this module imports
``agents``). Each item is one record (``Records``, namespace ``SESSION#agents``), stored as the
SDK gave it and handed back byte for byte: a ``reasoning`` item keeps its ``encrypted_content``
and its ``provider_data`` (where the SDK's LiteLLM route keeps Claude's signed
``thinking_blocks``), so a replayed turn carries the reasoning it was given.

Invariants: nothing stored is lost: ``pop_item`` goes on on a branch that ends before the popped
item (the old branch keeps it, as the library's own rewinds do), and ``clear_session`` starts an
empty branch and hides the old one; ``get_items(limit)`` reads the newest ``limit`` items from
the store's index (O(log n + limit)). One writer per session.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from context_manager._store._protocol import Store

from ._records import Records, record_of

__all__ = ["ITEM_KIND", "RECORDS_SUFFIX", "TranscriptSession"]

ITEM_KIND = "agents-item"
"""``metadata.kind`` of a stored session item."""
RECORDS_SUFFIX = "#agents"
"""A session's items live in namespace ``session_id + RECORDS_SUFFIX``."""


def _plain(item: Any) -> dict[str, Any]:
    """An item as the JSON object it is (the SDK's models dumped as it dumps them)."""
    if hasattr(item, "model_dump"):
        dumped: dict[str, Any] = item.model_dump(exclude_unset=True, mode="json")
        return dumped
    plain: dict[str, Any] = json.loads(json.dumps(item))
    return plain


class TranscriptSession:
    """An Agents SDK ``Session`` backed by this library's store (see the module docstring).

    Args:
        session_id: the session (``Runner.run(..., session=...)`` keeps its items here).
        store: where the items live.
        session_settings: the SDK's ``SessionSettings`` (its ``limit`` is the default of
            ``get_items``).
    """

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        self.records = Records(store, f"{session_id}{RECORDS_SUFFIX}")
        self._lock = threading.RLock()

    def items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (all when ``None``), oldest first."""
        if limit is not None and limit <= 0:
            return []
        with self._lock:
            newest = self.records.newest(ITEM_KIND, limit)
        loaded: list[TResponseInputItem] = [record_of(m)["item"] for m in reversed(newest)]
        return loaded

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's history: the newest ``limit`` items (default: the settings' limit,
        else all), oldest first."""
        return self.items(resolve_session_limit(limit, self.session_settings))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items``, each as the SDK gave it."""
        with self._lock, self.records.store.batch():
            for item in items:
                self.records.add(ITEM_KIND, {"item": _plain(item)})

    async def pop_item(self) -> TResponseInputItem | None:
        """Take back the newest item (it stays stored on the branch the session left)."""
        with self._lock:
            newest = self.records.newest(ITEM_KIND, 1)
            if not newest:
                return None
            self.records.rewind_before(newest[0])
        popped: TResponseInputItem = record_of(newest[0])["item"]
        return popped

    async def clear_session(self) -> None:
        """Start the session over (its items stay stored, hidden)."""
        with self._lock:
            self.records.reset()
