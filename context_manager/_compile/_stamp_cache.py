"""The compiler's bounded stamp cache: stamps read from the store, by reply id.

Bounded by ``limit``: past it, the oldest stamps not needed by the render at hand are evicted
(re-read on demand); a stamp the render is about to read is never evicted. Stamps made under
one head share one ``head`` dict and model string (a window's stamps mostly repeat them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from context_manager._model._messages import MessageId

STAMP_CACHE_LIMIT = 100_000
"""Stamps kept in memory per manager; past it the oldest not needed now are evicted (re-read on
demand)."""


class StampCache:
    """Stamps by reply id, at most ``limit`` beyond those the current render needs."""

    def __init__(self, limit: int = STAMP_CACHE_LIMIT) -> None:
        self.limit = limit
        self.stamps: dict[MessageId, dict[str, Any]] = {}
        """The stamps (what a ``RenderContext`` reads)."""
        self._heads: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._models: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.stamps)

    def clear(self) -> None:
        self.stamps.clear()
        self._heads.clear()
        self._models.clear()

    def clear_shared(self) -> None:
        """Forget the stamps and the shared heads (no hot render needs them)."""
        self.stamps.clear()
        self._heads.clear()

    def drop(self, message_ids: Iterable[MessageId]) -> None:
        for message_id in message_ids:
            self.stamps.pop(message_id, None)

    def put(self, message_id: MessageId, stamp: dict[str, Any]) -> None:
        self.stamps[message_id] = stamp

    def load(
        self,
        needed: Sequence[MessageId],
        read: Callable[[list[MessageId]], dict[MessageId, dict[str, Any]]],
    ) -> None:
        """Make sure every stamp in ``needed`` is held (reading the missing ones with ``read``),
        evicting the oldest others first when over the limit."""
        wanted = [mid for mid in needed if mid not in self.stamps]
        overflow = len(self.stamps) + len(wanted) - self.limit
        if overflow > 0:
            keep = set(needed)
            for mid in [k for k in self.stamps if k not in keep][:overflow]:
                del self.stamps[mid]
        if wanted:
            loaded = read(wanted)
            for stamp in loaded.values():
                self._share_head(stamp)
            self.stamps.update(loaded)

    def _share_head(self, stamp: dict[str, Any]) -> None:
        head = stamp.get("head")
        if isinstance(head, dict) and all(isinstance(v, str) for v in head.values()):
            shared = self._heads.setdefault(tuple(sorted(head.items())), head)
            stamp["head"] = shared
        model = stamp.get("model")
        if isinstance(model, str):
            stamp["model"] = self._models.setdefault(model, model)

    def _check(self) -> None:
        for message_id, stamp in self.stamps.items():
            assert isinstance(message_id, str)
            assert isinstance(stamp, dict)
