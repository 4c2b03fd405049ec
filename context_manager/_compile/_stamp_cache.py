"""The compiler's bounded stamp cache: stamps read from the store, by reply id, as the store
parsed them.

The one place the compiler reads stamps from the store: the store returns them typed
(``Store.stamps``, parsed once at that boundary); one it could not read (``None``) is held as
absent, i.e. unstamped. Nothing here parses. Bounded by ``limit``: past it, the oldest stamps
not needed by the render at hand are evicted (re-read on demand); a stamp the render is about
to read is never evicted. Stamps made under one head share one ``head`` mapping and model
string (a window's stamps mostly repeat them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from context_manager._model._messages import MessageId
from context_manager._model._stamps import AnyStamp, LegacyStamp, Stamp

STAMP_CACHE_LIMIT = 100_000
"""Stamps kept in memory per manager; past it the oldest not needed now are evicted (re-read on
demand)."""


class StampCache:
    """Parsed stamps by reply id, at most ``limit`` beyond those the current render needs."""

    def __init__(self, limit: int = STAMP_CACHE_LIMIT) -> None:
        self.limit = limit
        self.stamps: dict[MessageId, AnyStamp] = {}
        """The stamps (what a ``RenderContext`` reads)."""
        self._heads: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
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

    def put(self, message_id: MessageId, stamp: AnyStamp) -> None:
        """Hold the stamp just written for ``message_id``."""
        self._hold(message_id, stamp)

    def load(
        self,
        needed: Sequence[MessageId],
        read: Callable[[list[MessageId]], Mapping[MessageId, AnyStamp | None]],
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
            for message_id, stamp in read(wanted).items():
                self._hold(message_id, stamp)

    def _hold(self, message_id: MessageId, stamp: AnyStamp | None) -> None:
        if stamp is None:
            self.stamps.pop(message_id, None)
        else:
            self.stamps[message_id] = self._shared(stamp)

    def _shared(self, stamp: AnyStamp) -> AnyStamp:
        """``stamp`` with the shared ``head`` mapping and model string (a window's stamps
        mostly repeat them); a new value only when it held its own copies."""
        head = self._heads.setdefault(tuple(sorted(stamp.head.items())), stamp.head)
        model = stamp.model
        if model is not None:
            model = self._models.setdefault(model, model)
        if head is stamp.head and model is stamp.model:
            return stamp
        if isinstance(stamp, Stamp):  # the constructor: a third of ``attrs.evolve``'s cost
            return Stamp(model, head, stamp.blocks, stamp.owns, stamp.start)
        return LegacyStamp(model, head, stamp.seals)

    def _check(self) -> None:
        for message_id, stamp in self.stamps.items():
            assert isinstance(message_id, str)
            assert isinstance(stamp, Stamp | LegacyStamp)
