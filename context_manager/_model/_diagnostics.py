"""Cache diagnostics records: what a compile expects, what the provider said, where it is kept.

Pure data and functions. A request carrying ``diagnostics.previous_message_id`` gets back the
first point where its prefix diverged from that earlier request (``cache_miss_reason``), or
``diagnostics: null`` when it only appended. ``CacheCheck`` is what the compiler knew changed
since that request; ``CacheVerdict`` the provider's answer judged against it. A recorded reply
keeps its provider response id, the shape of the request that produced it (``cache_basis``) and
its verdict in ``metadata.extra`` (``RESPONSE_ID_KEY``, ``BASIS_KEY``, ``DIAGNOSTICS_KEY``), so
no store schema carries them. Invariant: a verdict is ``unexpected`` only for a divergence the
compiler did not predict; ``None`` (nothing diverged), ``pending`` and
``previous_message_not_found`` never are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._messages import MessageId

RESPONSE_ID_KEY = "response_id"
"""The ``metadata.extra`` key of a recorded reply's provider response id (``msg_...``)."""

BASIS_KEY = "cache_basis"
"""The ``metadata.extra`` key of the shape of the request that produced a reply."""

DIAGNOSTICS_KEY = "cache_diagnostics"
"""The ``metadata.extra`` key of a reply's verdict (``CacheVerdict.to_json``)."""

PENDING = "pending"
"""The verdict when the response came back before the provider's comparison finished."""

NOT_FOUND = "previous_message_not_found"

CHANGE_REASONS = {
    "model": "model_changed",
    "system": "system_changed",
    "tools": "tools_changed",
    "messages": "messages_changed",
    "settings": "unavailable",
}
"""The ``cache_miss_reason`` each kind of known change produces, in the provider's order: the
first change in this order is the divergence the provider reports."""


@attrs.frozen
class CacheCheck:
    """What a compile that carries ``diagnostics`` knows.

    Attributes:
        previous: the stored reply compared with (``None``: a first request, which opts in).
        previous_response: its provider response id, as sent in ``previous_message_id``.
        basis: this request's shape (recorded on the reply it produces).
        changes: ``(kind, why)`` of every change since the previous request the compiler made or
            knows of, ``kind`` a key of ``CHANGE_REASONS`` (``why``: ``"window jump"``,
            ``"fold"``, ``"compaction"``, ``"head change"``, ``"model switch"``, ...).
    """

    previous: MessageId | None
    previous_response: str | None
    basis: dict[str, Any]
    changes: tuple[tuple[str, str], ...] = ()

    @property
    def expected(self) -> str | None:
        """The ``cache_miss_reason`` the provider should report (``None``: no divergence)."""
        kinds = {kind for kind, _ in self.changes}
        for kind, reason in CHANGE_REASONS.items():
            if kind in kinds:
                return reason
        return None


@attrs.frozen
class CacheVerdict:
    """The provider's answer for one reply, judged against its compile's ``CacheCheck``.

    ``reason`` is the ``cache_miss_reason`` type, ``None`` when nothing diverged, or
    ``"pending"``; ``missed_tokens`` its ``cache_missed_input_tokens`` (0 when not given).
    """

    previous: MessageId | None
    reason: str | None
    missed_tokens: int
    expected: str | None
    why: tuple[str, ...] = ()

    @property
    def diverged(self) -> bool:
        """A ``*_changed`` or ``unavailable`` report (not ``pending`` or not found)."""
        return self.reason is not None and self.reason not in (PENDING, NOT_FOUND)

    @property
    def unexpected(self) -> bool:
        """A divergence other than the one the compiler knew of."""
        return self.diverged and self.reason != self.expected

    def to_json(self) -> dict[str, Any]:
        """What the reply's ``metadata.extra["cache_diagnostics"]`` holds.

        >>> CacheVerdict("m1", "tools_changed", 40, "tools_changed", ("head change",)).to_json()
        ... # doctest: +NORMALIZE_WHITESPACE
        {'previous': 'm1', 'reason': 'tools_changed', 'missed_tokens': 40,
         'expected': 'tools_changed', 'why': ['head change'], 'unexpected': False}
        """
        return {
            "previous": self.previous,
            "reason": self.reason,
            "missed_tokens": self.missed_tokens,
            "expected": self.expected,
            "why": list(self.why),
            "unexpected": self.unexpected,
        }


def _field(value: object, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    if isinstance(value, list | tuple | str | bytes):
        return None
    return getattr(value, name, None)


def response_id(message: object) -> str | None:
    """The provider's id of a response (an SDK message or a wire dict), if it has one."""
    found = _field(message, "id")
    return found if isinstance(found, str) and found else None


def reported(message: object) -> tuple[str | None, int]:
    """``(reason, missed tokens)`` of a response's ``diagnostics``: ``(None, 0)`` when it
    reports no divergence, ``("pending", 0)`` when its comparison had not finished."""
    diagnostics = _field(message, "diagnostics")
    if diagnostics is None:
        return None, 0
    reason = _field(diagnostics, "cache_miss_reason")
    if reason is None:
        return PENDING, 0
    kind = _field(reason, "type")
    tokens = _field(reason, "cache_missed_input_tokens")
    count = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0
    return (str(kind) if kind else PENDING), max(0, count)


def judge(check: CacheCheck, message: object) -> CacheVerdict:
    """The provider's answer in ``message`` against what ``check`` expected."""
    reason, missed = reported(message)
    why = tuple(dict.fromkeys(w for _, w in check.changes))
    return CacheVerdict(check.previous, reason, missed, check.expected, why)


def verdict_counts(extras: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Replies' verdicts summed (``transcript --usage``): compared, expected and unexpected
    divergences, pending and not-found answers, and the unexpected ones by reason."""
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for extra in extras:
        verdict = extra.get(DIAGNOSTICS_KEY)
        if not isinstance(verdict, Mapping):
            continue
        counts["compared"] += 1
        reason = verdict.get("reason")
        if reason in (PENDING, NOT_FOUND):
            counts[str(reason)] += 1
        elif reason is not None and verdict.get("unexpected"):
            counts["unexpected"] += 1
            reasons[str(reason)] += 1
        elif reason is not None:
            counts["expected"] += 1
    keys = ("compared", "expected", "unexpected", PENDING, NOT_FOUND)
    return {**{k: counts[k] for k in keys}, "unexpected_reasons": dict(sorted(reasons.items()))}
