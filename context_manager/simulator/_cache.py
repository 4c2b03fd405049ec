"""The prompt cache: prefixes remembered at breakpoints, per TTL, read back by prefix match.

Stateful (``PromptCache``; the simulator's lock guards it) plus the marker checks the API makes.
The model, as the provider documents prompt caching:

- A ``cache_control`` marker (a breakpoint) asks for the prefix ending at its block to be cached:
  tools, then ``system``, then messages, in that order. At most ``MAX_BREAKPOINTS`` per request
  (a top-level ``cache_control``, automatic caching, marks the last block and counts as one);
  ``ttl`` is ``"5m"`` (default) or ``"1h"``, and a ``"1h"`` marker may not follow a ``"5m"``
  one. Thinking blocks cannot carry a marker. Markers never bind (provider rule 2).
- Reading: from each breakpoint the cache looks back over at most ``LOOKBACK_BLOCKS`` positions
  (the breakpoint's own included) for a live entry whose prefix equals this request's prefix
  there; the longest such prefix is read (``cache_read_input_tokens``) and its entry refreshed.
- Writing: each breakpoint past the read point whose prefix holds at least ``min_tokens`` tokens
  is written, and the tokens from the read point to the last one written are
  ``cache_creation_input_tokens`` (split per TTL); the rest is ``input_tokens``. A breakpoint at
  or before the read point is stored (refreshed) at no cost.
- An entry lives ``TTL_SECONDS[ttl]`` after its last write or read.

Invariants (``_check``): at most ``capacity`` entries; every entry's TTL is one the API offers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from context_manager import InvalidValue

from ._errors import InvalidRequest

CACHE_CONTROL = "cache_control"

MAX_BREAKPOINTS = 4
"""Markers the API accepts in one request."""

LOOKBACK_BLOCKS = 20
"""Positions a breakpoint looks back over for an earlier entry, its own included."""

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
"""How long an entry lives after its last write or read."""

DEFAULT_MIN_TOKENS = 1024
"""The shortest prefix the cache stores (the documented minimum of most models; shorter
prefixes are processed, not cached, without an error)."""

DEFAULT_CAPACITY = 100_000
"""Entries kept before expired, then least recently used, ones are evicted."""

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


class Position(Protocol):
    """One position of a request as ``_count.items`` gives it."""

    @property
    def total(self) -> int: ...

    @property
    def key(self) -> str: ...

    @property
    def marker(self) -> Mapping[str, Any] | None: ...


@attrs.frozen
class CacheUsage:
    """How one request's input tokens were processed.

    ``read + written_5m + written_1h + uncached`` is the request's whole input count.
    """

    read: int
    written_5m: int
    written_1h: int
    uncached: int

    @property
    def written(self) -> int:
        return self.written_5m + self.written_1h

    def usage_fields(self) -> dict[str, Any]:
        """The ``usage`` fields of a reply, as the API names them."""
        return {
            "input_tokens": self.uncached,
            "cache_creation_input_tokens": self.written,
            "cache_read_input_tokens": self.read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.written_5m,
                "ephemeral_1h_input_tokens": self.written_1h,
            },
        }


def _ttl(marker: Mapping[str, Any]) -> str:
    return str(marker.get("ttl", "5m"))


def check_markers(body: Mapping[str, Any]) -> None:
    """Refuse ``cache_control`` markers as the API does.

    Raises:
        InvalidRequest: a malformed marker (not ``{"type": "ephemeral"}`` with an optional
            ``ttl`` of ``"5m"`` or ``"1h"``), a marker on a thinking block, more than
            ``MAX_BREAKPOINTS`` markers, or a ``"1h"`` marker after a ``"5m"`` one.
    """
    found: list[tuple[str, Mapping[str, Any]]] = []

    def take(path: str, holder: Any) -> None:
        if not isinstance(holder, Mapping) or holder.get(CACHE_CONTROL) is None:
            return
        marker = holder[CACHE_CONTROL]
        if (
            not isinstance(marker, Mapping)
            or marker.get("type") != "ephemeral"
            or set(marker) - {"type", "ttl"}
            or _ttl(marker) not in TTL_SECONDS
        ):
            raise InvalidRequest(
                f"{path}.cache_control: Input should be {{'type': 'ephemeral'}} with an optional "
                "'ttl' of '5m' or '1h'"
            )
        if holder.get("type") in THINKING_TYPES:
            raise InvalidRequest(
                f"{path}.cache_control: thinking blocks cannot be marked for caching directly; "
                "mark a later block"
            )
        found.append((path, marker))

    tools = body.get("tools")
    for k, tool in enumerate(tools if isinstance(tools, list) else []):
        take(f"tools.{k}", tool)
    system = body.get("system")
    for j, block in enumerate(system if isinstance(system, list) else []):
        take(f"system.{j}", block)
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            take(f"messages.{i}.content.{j}", block)
            inner = block.get("content") if isinstance(block, Mapping) else None
            for k, item in enumerate(inner if isinstance(inner, list) else []):
                take(f"messages.{i}.content.{j}.content.{k}", item)
    take("body", {CACHE_CONTROL: body[CACHE_CONTROL]} if CACHE_CONTROL in body else None)
    if len(found) > MAX_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(found)}."
        )
    short = None
    for path, marker in found:
        if _ttl(marker) == "5m":
            short = short or path
        elif short is not None:
            raise InvalidRequest(
                f"{path}.cache_control: a ttl='1h' cache_control block must not come after a "
                f"ttl='5m' cache_control block ({short})"
            )


@attrs.define
class _Entry:
    tokens: int
    ttl: str
    expires: float


class PromptCache:
    """Prefixes written at breakpoints, keyed by the digest of the prefix (see the module).

    Not thread-safe on its own: the simulator calls it under its lock.

    Args:
        clock: seconds, monotonic (``time.monotonic`` by default in the simulator); tests and
            benchmarks pass their own to move time.
        min_tokens: the shortest prefix stored.
        capacity: entries kept at most.
    """

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        min_tokens: int = DEFAULT_MIN_TOKENS,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        if min_tokens < 0 or capacity < 1:
            raise InvalidValue("min_tokens must be >= 0 and capacity >= 1")
        self.clock = clock
        self.min_tokens = min_tokens
        self.capacity = capacity
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= now:
            del self._entries[key]
            return None
        return entry

    def process(self, positions: Sequence[Position]) -> CacheUsage:
        """Read and write one request's prefixes; returns how its input was processed.

        Cost: O(breakpoints x ``LOOKBACK_BLOCKS``) lookups.
        """
        total = positions[-1].total if positions else 0
        now = self.clock()
        marks = [n for n, item in enumerate(positions) if item.marker is not None]
        read_at = -1
        for mark in marks:
            for n in range(mark, max(-1, mark - LOOKBACK_BLOCKS), -1):
                if n <= read_at:
                    break
                if self._live(positions[n].key, now) is not None:
                    read_at = n
                    break
        if read_at >= 0:
            hit = self._entries[positions[read_at].key]
            hit.expires = now + TTL_SECONDS[hit.ttl]
        read = positions[read_at].total if read_at >= 0 else 0
        written = {"5m": 0, "1h": 0}
        done = read
        for mark in marks:
            item = positions[mark]
            assert item.marker is not None
            ttl = _ttl(item.marker)
            if item.total < self.min_tokens:
                continue
            entry = self._live(item.key, now)
            if entry is None:
                self._entries[item.key] = _Entry(item.total, ttl, now + TTL_SECONDS[ttl])
            else:
                entry.expires = max(entry.expires, now + TTL_SECONDS[ttl])
            if mark > read_at:
                written[ttl] += item.total - done
                done = item.total
        self._evict(now)
        return CacheUsage(read, written["5m"], written["1h"], total - done)

    def _evict(self, now: float) -> None:
        if len(self._entries) <= self.capacity:
            return
        for key in [k for k, e in self._entries.items() if e.expires <= now]:
            del self._entries[key]
        while len(self._entries) > self.capacity:
            oldest = min(self._entries, key=lambda k: self._entries[k].expires)
            del self._entries[oldest]

    def _check(self) -> None:
        assert len(self._entries) <= self.capacity
        for entry in self._entries.values():
            assert entry.ttl in TTL_SECONDS
            assert entry.tokens >= 0
