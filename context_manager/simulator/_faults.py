"""Fault knobs for tests: queued failures, forced drops and raw report entries for coming calls.

Not thread-safe on its own: ``Simulator`` holds its lock around every use. Invariant (``_check``):
every queued failure status is one of ``FAILURES``; every forced reason is a known drop reason;
every queued compaction outcome is one ``_summarize.OUTCOMES`` names.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import Any

import attrs

from context_manager import InvalidValue

from ._api import DROP_REASONS
from ._errors import SimulatedApiError
from ._respond import CallKnobs
from ._summarize import check_outcome
from ._verify import BlockPredicate, ForcedDrop

FAILURES = {
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit (simulated)."),
    500: ("api_error", "Internal server error (simulated)."),
    529: ("overloaded_error", "Overloaded (simulated)."),
}
"""Statuses ``fail_next`` can answer with, and the API's error type and message for each."""

_PATH = re.compile(r"messages\.(\d+)\.content\.(\d+)")


def parse_path(path: str | tuple[int, int]) -> tuple[int, int]:
    """``(i, j)`` from ``"messages.i.content.j"`` or an ``(i, j)`` pair.

    Raises:
        ValueError: ``path`` is neither; the message names it.
    """
    if isinstance(path, tuple) and len(path) == 2 and all(isinstance(n, int) for n in path):
        return path
    if isinstance(path, str) and (match := _PATH.fullmatch(path)):
        return int(match[1]), int(match[2])
    raise InvalidValue(f"path {path!r} is neither 'messages.I.content.J' nor an (i, j) pair")


@attrs.define
class Faults:
    """What the coming calls must do wrong."""

    failures: deque[int] = attrs.field(factory=deque)
    forced: list[ForcedDrop] = attrs.field(factory=list)
    extra: list[Any] = attrs.field(factory=list)
    compactions: deque[str] = attrs.field(factory=deque)

    def fail_compactions(self, n: int, outcome: str) -> None:
        """Queue ``n`` failed compaction requests ending with ``outcome``.

        Raises:
            ValueError: ``n`` is negative or ``outcome`` is not a scripted compaction failure.
        """
        if n < 0:
            raise InvalidValue(f"n must be at least 0, got {n}")
        self.compactions.extend([check_outcome(outcome)] * n)

    def take_compaction_outcome(self) -> str | None:
        """The next queued compaction failure, removed from the queue, or ``None``."""
        return self.compactions.popleft() if self.compactions else None

    def fail(self, n: int, status: int) -> None:
        """Queue ``n`` failures with ``status``.

        Raises:
            ValueError: ``n`` is negative or ``status`` is not one of ``FAILURES``.
        """
        if status not in FAILURES:
            known = ", ".join(str(s) for s in FAILURES)
            raise InvalidValue(f"status {status} cannot be simulated; use one of {known}")
        if n < 0:
            raise InvalidValue(f"n must be at least 0, got {n}")
        self.failures.extend([status] * n)

    def take_failure(self) -> SimulatedApiError | None:
        """The next queued failure, removed from the queue, or ``None``."""
        if not self.failures:
            return None
        status = self.failures.popleft()
        error_type, message = FAILURES[status]
        return SimulatedApiError(status, error_type, message)

    def force(
        self,
        paths: Iterable[str | tuple[int, int]] | None,
        reason: str,
        predicate: BlockPredicate | None,
    ) -> None:
        """Queue a forced drop for the next call.

        Raises:
            ValueError: ``reason`` is not a drop reason, or a path is malformed.
        """
        if reason not in DROP_REASONS:
            raise InvalidValue(f"reason {reason!r} is not one of {', '.join(DROP_REASONS)}")
        parsed = None if paths is None else frozenset(parse_path(p) for p in paths)
        self.forced.append(ForcedDrop(reason, parsed, predicate))

    def append_entries(self, entries: Iterable[Any]) -> None:
        """Queue raw ``input_transformations`` entries (any JSON values) for the next answer."""
        self.extra.extend(entries)

    def take_knobs(self) -> CallKnobs:
        """Everything queued for the next call, removed from the queue."""
        knobs = CallKnobs(tuple(self.forced), tuple(self.extra))
        self.forced.clear()
        self.extra.clear()
        return knobs

    def _check(self) -> None:
        assert all(status in FAILURES for status in self.failures)
        assert all(drop.reason in DROP_REASONS for drop in self.forced)
        assert all(check_outcome(outcome) for outcome in self.compactions)
