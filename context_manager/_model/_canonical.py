"""Canonical JSON and digests: what "the same bytes" means for binding.

Canonical form: keys sorted, no whitespace, ``cache_control`` removed at every depth, ensure_ascii
off. Two values with the same canonical form bind the same; key order and cache markers never
matter. Pure functions only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CACHE_CONTROL_KEY = "cache_control"
"""Prompt-cache markers do not bind (vendor rule), so they never enter a digest."""

_CACHE_CONTROL_TOKEN = f'"{CACHE_CONTROL_KEY}"'
"""A key named ``cache_control`` always shows in the JSON text as this token; text without it
has no marker to strip (a string value holding it only costs the slower, stripping pass)."""


def strip_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed, at any depth."""
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != CACHE_CONTROL_KEY}
    if isinstance(value, list | tuple):
        return [strip_cache_control(v) for v in value]
    return value


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps`` with the canonical options builds per call, built once (a block is
encoded per call, tens of thousands per render from nothing)."""


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``.

    Raises:
        ValueError: ``value`` is not JSON-serialisable.
    """
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError):
        text = _CACHE_CONTROL_TOKEN  # perhaps only inside a marker: strip, then judge
    if _CACHE_CONTROL_TOKEN not in text:
        return text  # no marker at any depth: nothing to strip (the common case, one pass)
    try:
        return _ENCODER.encode(strip_cache_control(value))
    except (TypeError, ValueError) as err:
        raise ValueError(f"not JSON-serialisable: {err}") from err


def digest(value: Any) -> str:
    """SHA-256 hex digest of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def signature_digest(signature: str) -> str:
    """The key the store indexes a thinking block's signature by (SHA-256 hex)."""
    return hashlib.sha256(signature.encode()).hexdigest()
