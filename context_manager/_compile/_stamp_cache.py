"""The compiler's bounded stamp cache: stamps read from the store, by reply id, parsed.

The one place the compiler reads stamps from the store: each stored stamp is parsed once here
(``_binding._stamp_read.parse_stamp``; a corrupt or unknown one is held as absent, i.e.
unstamped). Bounded by ``limit``: past it, the oldest stamps not needed by the render at hand
are evicted (re-read on demand); a stamp the render is about to read is never evicted. Stamps
made under one head share one ``head`` dict and model string (a window's stamps mostly repeat
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from context_manager._binding._stamp_read import AnyStamp, LegacyStamp, Stamp, parse_stamp
from context_manager._model._messages import MessageId

STAMP_CACHE_LIMIT = 100_000
"""Stamps kept in memory per manager; past it the oldest not needed now are evicted (re-read on
demand)."""


class StampCache:
    """Parsed stamps by reply id, at most ``limit`` beyond those the current render needs."""

    def __init__(self, limit: int = STAMP_CACHE_LIMIT) -> None:
        self.limit = limit
        self.stamps: dict[MessageId, AnyStamp] = {}
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

    def put(self, message_id: MessageId, stamp: Mapping[str, Any]) -> None:
        """Hold the stamp just written for ``message_id`` (a stored stamp's JSON object)."""
        self._hold(message_id, stamp)

    def load(
        self,
        needed: Sequence[MessageId],
        read: Callable[[list[MessageId]], Mapping[MessageId, Mapping[str, Any]]],
    ) -> None:
        """Make sure every stamp in ``needed`` is held (reading the missing ones with ``read``,
        the store's ``stamps``), evicting the oldest others first when over the limit."""
        wanted = [mid for mid in needed if mid not in self.stamps]
        overflow = len(self.stamps) + len(wanted) - self.limit
        if overflow > 0:
            keep = set(needed)
            for mid in [k for k in self.stamps if k not in keep][:overflow]:
                del self.stamps[mid]
        if wanted:
            for message_id, raw in read(wanted).items():
                self._hold(message_id, raw)

    def _hold(self, message_id: MessageId, raw: Mapping[str, Any]) -> None:
        stamp = parse_stamp(self._shared(raw), message_id)
        if stamp is None:
            self.stamps.pop(message_id, None)
        else:
            self.stamps[message_id] = stamp

    def _shared(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """``raw`` with the shared ``head`` dict and model string, when it has them."""
        head, model = raw.get("head"), raw.get("model")
        if not isinstance(raw, dict):
            return raw
        if isinstance(head, dict) and all(isinstance(v, str) for v in head.values()):
            raw["head"] = self._heads.setdefault(tuple(sorted(head.items())), head)
        if isinstance(model, str):
            raw["model"] = self._models.setdefault(model, model)
        return raw

    def _check(self) -> None:
        for message_id, stamp in self.stamps.items():
            assert isinstance(message_id, str)
            assert isinstance(stamp, Stamp | LegacyStamp)
