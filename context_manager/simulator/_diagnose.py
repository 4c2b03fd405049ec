"""Cache diagnostics: a fingerprint per response id, and the first divergence from it.

As the provider documents cache diagnostics: a request that carries ``diagnostics`` (the opt-in;
``{"previous_message_id": null}`` on a first turn) has its fingerprint kept under the id of its
response; a request naming an earlier response there gets back where its prefix first diverged
from that request's, as ``diagnostics.cache_miss_reason``, or ``diagnostics: null`` when it only
appended. A fingerprint holds digests and token counts, never content. The verdicts, checked in
the order the provider lists them: ``model_changed``, ``system_changed``, ``tools_changed``,
``messages_changed`` (an earlier entry differs instead of entries only being appended; each
with ``cache_missed_input_tokens``, the previous request's tokens after the common prefix),
``unavailable`` (model, system, tools and messages agree but another prompt-affecting setting,
``thinking`` or ``tool_choice``, differs), ``previous_message_not_found`` (no fingerprint under
that id for this organization: never opted in, forgotten, or another organization's).
UNCONFIRMED, conservative reading: which of ``system_changed`` and ``tools_changed`` wins when
both changed (the listed order is taken); the fingerprint is of the request as sent less the
blocks the provider dropped (what the prompt is built from).

``DiagnosticsLedger`` is stateful and bounded (the simulator's lock guards it); the rest is pure.
Invariants (``_check``): at most ``capacity`` fingerprints, each with as many totals as digests.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from context_manager import InvalidValue

from ._canon import canonical_json, digest, normalize_block, normalize_content, normalize_system
from ._count import MESSAGE_FRAME_TOKENS, item_tokens, message_settings

CACHE_MISS_REASONS = (
    "model_changed",
    "system_changed",
    "tools_changed",
    "messages_changed",
    "previous_message_not_found",
    "unavailable",
)
"""Every ``cache_miss_reason.type`` (the SDK's ``BetaCacheMissReason``)."""

DEFAULT_CAPACITY = 10_000
"""Fingerprints kept before the oldest is forgotten (the API keeps them for a limited time)."""

DIGEST_BYTES = 16
"""Bytes kept of each position's digest (a fingerprint holds one per block)."""


@attrs.frozen
class Fingerprint:
    """One request's shape: digests and token counts only.

    ``positions[n]`` is the digest of the message prefix ending at the ``n``-th message block
    (role and block, in order); ``totals[n]`` the request's tokens up to and including it.
    ``head_tokens`` is what tools and ``system`` take; ``total`` the whole request.
    """

    model: str
    system: str
    tools: str
    settings: str
    positions: tuple[bytes, ...]
    totals: tuple[int, ...]
    head_tokens: int
    total: int


def _step(chain: bytes, item: Any) -> bytes:
    return hashlib.sha256(chain + canonical_json(item).encode()).digest()[:DIGEST_BYTES]


def fingerprint(body: Mapping[str, Any], dropped: Collection[tuple[int, int]] = ()) -> Fingerprint:
    """The fingerprint of ``body`` as sent, less the blocks at ``dropped`` (``(i, j)``)."""
    tools = body.get("tools")
    tools = tools if isinstance(tools, list) else []
    system = normalize_system(body.get("system"))
    head_tokens = sum(item_tokens(t) for t in tools) + sum(item_tokens(b) for b in system)
    chain, total = b"", head_tokens
    positions: list[bytes] = []
    totals: list[int] = []
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, Mapping):
            continue
        role, frame = message.get("role"), MESSAGE_FRAME_TOKENS
        for j, block in enumerate(normalize_content(message.get("content"))):
            if (i, j) in dropped:
                continue
            block = normalize_block(block)
            total += item_tokens(block) + frame
            frame = 0
            chain = _step(chain, [role, block])
            positions.append(chain)
            totals.append(total)
    return Fingerprint(
        model=str(body.get("model", "")),
        system=digest(system),
        tools=digest(tools),
        settings=digest(message_settings(body)),
        positions=tuple(positions),
        totals=tuple(totals),
        head_tokens=head_tokens,
        total=total,
    )


def _common(previous: Sequence[bytes], current: Sequence[bytes]) -> int:
    """How many leading positions the two share."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return n


def _changed(kind: str, missed: int) -> dict[str, Any]:
    return {"type": kind, "cache_missed_input_tokens": max(0, missed)}


def divergence(previous: Fingerprint | None, current: Fingerprint) -> dict[str, Any] | None:
    """The ``cache_miss_reason`` of ``current`` against ``previous`` (``previous`` is ``None``
    when no fingerprint was found), or ``None`` when ``current`` only appended to it.

    >>> a = Fingerprint("m", "s", "t", "x", (b"1",), (10,), 4, 10)
    >>> divergence(a, attrs.evolve(a, model="n"))
    {'type': 'model_changed', 'cache_missed_input_tokens': 10}
    >>> divergence(a, attrs.evolve(a, positions=(b"1", b"2"), totals=(10, 12), total=12))
    """
    if previous is None:
        return {"type": "previous_message_not_found"}
    if previous.model != current.model:
        return _changed("model_changed", previous.total)
    if previous.system != current.system:
        return _changed("system_changed", previous.total)
    if previous.tools != current.tools:
        return _changed("tools_changed", previous.total)
    common = _common(previous.positions, current.positions)
    if common < len(previous.positions):
        kept = previous.totals[common - 1] if common else previous.head_tokens
        return _changed("messages_changed", previous.total - kept)
    if previous.settings != current.settings:
        return {"type": "unavailable"}
    return None


def diagnostics_field(reason: dict[str, Any] | None) -> dict[str, Any] | None:
    """The response's ``diagnostics`` value: ``null`` when the prefix only grew."""
    return None if reason is None else {"cache_miss_reason": reason}


class DiagnosticsLedger:
    """Fingerprints kept per ``(organization, response id)``, oldest forgotten first.

    Not thread-safe on its own: the simulator calls it under its lock.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise InvalidValue("capacity must be >= 1")
        self.capacity = capacity
        self._kept: OrderedDict[tuple[str, str], Fingerprint] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def answer(
        self, organization: str, previous_id: str | None, response_id: str, current: Fingerprint
    ) -> dict[str, Any] | None:
        """Keep ``current`` under ``response_id``; return the response's ``diagnostics`` value
        (``None`` on a first turn, which names no earlier response, and when nothing diverged).
        """
        field = None
        if previous_id is not None:
            field = diagnostics_field(
                divergence(self._kept.get((organization, previous_id)), current)
            )
        self._kept[(organization, response_id)] = current
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
        return field

    def _check(self) -> None:
        assert len(self._kept) <= self.capacity
        for kept in self._kept.values():
            assert len(kept.positions) == len(kept.totals)
