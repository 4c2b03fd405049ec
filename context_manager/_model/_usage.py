"""Token usage of one model call, as the API reports it, and where a stored reply keeps it.

Pure data and functions. ``CallUsage`` splits a call's input the way ``usage`` does: tokens
read from the prompt cache, tokens written to it, and the rest (``input_tokens``); the whole
input is their sum. A recorded reply keeps its call's usage in ``metadata.extra["usage"]``
(``USAGE_KEY``), so no store schema carries it. A compaction's cost is not in the top-level
fields (provider rule 23: they are 0) but in the ``compaction`` entry of ``usage.iterations``;
``usage_from`` counts both, so a compaction call and a threshold compaction are billed in full.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._editing import editing_extra

USAGE_KEY = "usage"
"""The ``metadata.extra`` key a recorded reply's usage is kept under."""

USAGE_FIELDS = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)
"""The ``usage`` fields kept, in the API's names."""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@attrs.frozen
class CallUsage:
    """One call's tokens: uncached input, cache reads, cache writes, output.

    Attributes:
        input_tokens: input neither read from nor written to the cache.
        cache_read_input_tokens: input read from the prompt cache (billed at a tenth).
        cache_creation_input_tokens: input written to the cache (billed at 1.25x, 2x for 1h).
        output_tokens: tokens the model produced.
    """

    input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_input(self) -> int:
        """The whole input: uncached, read and written."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    def __add__(self, other: CallUsage) -> CallUsage:
        return CallUsage(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (
            self.input_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
            self.output_tokens,
        )

    def to_json(self) -> dict[str, int]:
        """The fields by their API names (what ``metadata.extra["usage"]`` holds).

        >>> CallUsage(1, 2, 3, 4).to_json()["cache_read_input_tokens"]
        2
        """
        return dict(zip(USAGE_FIELDS, self.as_tuple(), strict=True))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CallUsage:
        """Read the fields back; missing, negative or non-integer values count as 0.

        >>> CallUsage.from_json({"input_tokens": 7, "output_tokens": "x"}).as_tuple()
        (7, 0, 0, 0)
        """
        return cls(*(_count(data.get(name)) for name in USAGE_FIELDS))

    @classmethod
    def total(cls, usages: Iterable[CallUsage]) -> CallUsage:
        """The sum of ``usages`` (zero when empty)."""
        out = cls()
        for usage in usages:
            out = out + usage
        return out


COMPACTION_ITERATION = "compaction"
"""The ``usage.iterations`` entry type that carries a compaction's cost (provider rule 23)."""


def usage_from(raw: Mapping[str, Any]) -> CallUsage:
    """A ``usage`` mapping's tokens: the top-level fields plus every ``compaction`` entry of
    ``iterations`` (the ``message`` entry repeats the top level, so it is not added again).

    >>> usage_from({"input_tokens": 0, "iterations": [
    ...     {"type": "compaction", "input_tokens": 90, "output_tokens": 9}]}).as_tuple()
    (90, 0, 0, 9)
    """
    total = CallUsage.from_json(raw)
    iterations = raw.get("iterations")
    for entry in iterations if isinstance(iterations, list | tuple) else ():
        if isinstance(entry, Mapping) and entry.get("type") == COMPACTION_ITERATION:
            total = total + CallUsage.from_json(entry)
    return total


def usage_of(message: object) -> CallUsage | None:
    """The usage of a reply: an SDK message, or a dict with a ``usage`` mapping; ``None`` when it
    reports none (blocks alone, a dict without usage)."""
    raw: Any = message.get(USAGE_KEY) if isinstance(message, Mapping) else None
    if raw is None and not isinstance(message, Mapping | list | tuple | str):
        raw = getattr(message, USAGE_KEY, None)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        dump = getattr(raw, "model_dump", None)
        raw = dump() if callable(dump) else None
    return usage_from(raw) if isinstance(raw, Mapping) else None


def reply_extra(message: object) -> dict[str, Any]:
    """The ``metadata.extra`` a recorded reply gets: its call's usage and its applied context
    edits (``_editing.EDITING_KEY``), when reported."""
    usage = usage_of(message)
    extra = {USAGE_KEY: usage.to_json()} if usage is not None else {}
    return {**extra, **editing_extra(message)}
