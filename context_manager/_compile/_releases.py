"""``Releases``: a branch's releases in memory, counting its own changes.

Invariants: a ``dict`` from reply id to ``Release`` whose every change (an item set or deleted,
an ``update``, a ``pop``, a ``clear``, a ``setdefault`` that adds) moves ``version``; a scan kept
on it (``recorded_since``) is answered again only while ``version`` and the scan's argument are
as they were, so a mid-round compile asks it in constant time while the branch's releases do not
change, instead of walking every release of a long history (issue 36's tool loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from context_manager._model._messages import MessageId
from context_manager._store._protocol import Release


class Releases(dict[MessageId, Release]):
    """A branch's releases (see the module docstring)."""

    __slots__ = ("_recent", "version")

    def __init__(
        self, items: Mapping[MessageId, Release] | Iterable[tuple[MessageId, Release]] = ()
    ) -> None:
        super().__init__(items)
        self.version = 0
        self._recent: tuple[int, int, frozenset[MessageId]] | None = None

    def __setitem__(self, key: MessageId, value: Release) -> None:
        super().__setitem__(key, value)
        self.version += 1

    def __delitem__(self, key: MessageId) -> None:
        super().__delitem__(key)
        self.version += 1

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self.version += 1

    def pop(self, key: MessageId, *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)

    def popitem(self) -> tuple[MessageId, Release]:
        self.version += 1
        return super().popitem()

    def clear(self) -> None:
        super().clear()
        self.version += 1

    def setdefault(self, key: MessageId, default: Release) -> Release:
        self.version += 1
        return super().setdefault(key, default)

    def recorded_since(self, began: int) -> frozenset[MessageId]:
        """The replies whose release is not reported yet and was recorded at or after sequence
        ``began`` (kept until the releases change)."""
        kept = self._recent
        if kept is not None and kept[0] == self.version and kept[1] == began:
            return kept[2]
        found = frozenset(
            mid
            for mid, release in self.items()
            if not release.reported and release.at_sequence is not None
            if release.at_sequence >= began
        )
        self._recent = (self.version, began, found)
        return found
