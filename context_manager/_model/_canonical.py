"""Canonical JSON and digests: what "the same bytes" means for binding.

Canonical form: keys sorted, no whitespace, ``cache_control`` removed at every depth, ensure_ascii
off. Two values with the same canonical form bind the same; key order and cache markers never
matter. Pure functions only.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

from ._errors import InvalidValue

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

_C_ENCODE: Any = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, True
    )
)
"""The C encoder ``_ENCODER.encode`` builds on every call, built once (same options: keys
sorted, compact, ``ensure_ascii`` off, NaN allowed). Without circular checks: a cyclic value
fails with ``RecursionError`` here and takes the checked path, which fails as before."""


def _encode(value: Any) -> str:
    if _C_ENCODE is None or isinstance(value, str):
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODE(value, 0))
    except RecursionError:
        return _ENCODER.encode(value)


def json_string(text: str) -> str:
    """``text`` as canonical JSON: ``canonical_json(text)``, at about twice its speed on ASCII.

    >>> [json_string(t) == canonical_json(t) for t in ('say "hi"', "café", "a\\tb\\x7f")]
    [True, True, True]
    """
    if text.isascii() and "\x7f" not in text:
        # the ASCII escaper writes what ``ensure_ascii`` off writes for ASCII, DEL aside
        return encode_basestring_ascii(text)
    return encode_basestring(text)


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``.

    Raises:
        ValueError: ``value`` is not JSON-serialisable.
    """
    try:
        text = _encode(value)
    except (TypeError, ValueError):
        text = _CACHE_CONTROL_TOKEN  # perhaps only inside a marker: strip, then judge
    if _CACHE_CONTROL_TOKEN not in text:
        return text  # no marker at any depth: nothing to strip (the common case, one pass)
    try:
        return _ENCODER.encode(strip_cache_control(value))
    except (TypeError, ValueError) as err:
        raise InvalidValue(f"not JSON-serialisable: {err}") from err


def digest(value: Any) -> str:
    """SHA-256 hex digest of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def signature_digest(signature: str) -> str:
    """The key the store indexes a thinking block's signature by (SHA-256 hex)."""
    return hashlib.sha256(signature.encode()).hexdigest()
