"""Reading a stored stamp: the frozen ``Stamp`` (version 2) and ``LegacyStamp`` (version 1).

A stamp is parsed once, where the compiler reads it from the store (``parse_stamp``); the
judges (``_validity``) take only these types. A row that is not a stamp of a known version, or
whose fields have the wrong shape, parses to ``None`` (read as unstamped: its thinking is never
sent) and is logged once per kind. Block indexes are ints here (the stored JSON keeps them as
strings). Pure apart from that one-time log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from context_manager._model._log import library_logger
from context_manager._model._process import PROCESS

log = library_logger("context_manager.binding")

STAMP_VERSION = 2
"""Written into every stamp, so a later format can tell old stamps apart."""

LEGACY_STAMP_VERSION = 1
"""Stamps of this version are checked by ``_validity.judge_legacy``."""


@attrs.frozen
class BlockStamp:
    """One thinking block's entry in a stamp.

    Attributes:
        seal: the seal over the non-thinking content before the block, and the block.
        pred: the signature digest of the thinking block before it in its request, or ``None``.
        own: the block's own digest (``None`` in stamps written before per-block digests).
    """

    seal: str
    pred: str | None = None
    own: str | None = None


@attrs.frozen
class Stamp:
    """A version-2 stamp: the producing model, the head's digests, and each signed thinking
    block's entry by its index in the stored reply.

    ``owns``: the stamp records each block's own digest (stamps written before that do not;
    then a model without the prefix check cannot tell an edited block, ``judge_unchecked``).
    ``start``: the stored sequence the reply's window started at, when recorded.
    """

    model: str | None
    head: Mapping[str, str]
    blocks: Mapping[int, BlockStamp]
    owns: bool = False
    start: int | None = None


@attrs.frozen
class LegacyStamp:
    """A version-1 stamp: the head's digests and each thinking block's seal by index (a seal
    that bound every block sent before it, earlier thinking included)."""

    model: str | None
    head: Mapping[str, str]
    seals: Mapping[int, str]


AnyStamp = Stamp | LegacyStamp
"""What the compiler holds for a stamped reply."""


def parse_stamp(raw: object, message_id: str | None = None) -> AnyStamp | None:
    """The stamp ``raw`` (a stored stamp's JSON object) holds, or ``None``.

    ``None`` for no stamp, an unknown version and a malformed one; the last two are logged
    once per version (``stamp_version_unreadable``, ``stamp_unreadable``, naming the first
    ``message_id``: the reply it was read for). A version-1 stamp is
    logged once too (``stamp_version_legacy``): it is sent only where everything sent before
    it is unchanged.

    >>> parse_stamp({"v": 2, "model": "m", "head": {}, "seals": {"1": "s"}, "pred": {"1": None}})
    Stamp(model='m', head={}, blocks={1: BlockStamp(seal='s', pred=None, own=None)}, owns=False, start=None)
    >>> parse_stamp({"v": 2, "head": [], "seals": {}, "pred": {}}) is None
    True
    """  # noqa: E501  (a doctest's output is one line)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        _unreadable("stamp_unreadable", None, message_id)
        return None
    version = raw.get("v")
    try:
        if version == STAMP_VERSION:
            return _current(raw)
        if version == LEGACY_STAMP_VERSION:
            _warn_once(
                "stamp_version_legacy",
                version,
                "sent only where everything sent before it, thinking included, is unchanged",
                message_id,
            )
            return LegacyStamp(_model(raw), _strings(raw["head"]), _indexed(raw["seals"]))
    except (KeyError, TypeError, ValueError):
        _unreadable("stamp_unreadable", version, message_id)
        return None
    _unreadable("stamp_version_unreadable", version, message_id)
    return None


def _current(raw: Mapping[str, Any]) -> Stamp:
    """A version-2 stamp; one pass over its blocks (a compile parses every stamp it reads)."""
    seals, preds, found = raw["seals"], raw["pred"], raw.get("own")
    if not isinstance(seals, Mapping) or not isinstance(preds, Mapping):
        raise TypeError("not a mapping")
    own: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    owns = own is found
    blocks: dict[int, BlockStamp] = {}
    for key, seal in seals.items():
        pred = preds.get(key)
        mine = own.get(key)
        if (
            type(seal) is not str
            or (pred is not None and type(pred) is not str)
            or (mine is not None and type(mine) is not str)
        ):
            raise TypeError("not a string")
        blocks[int(key)] = BlockStamp(seal, pred, mine)
    start = raw.get("start")
    return Stamp(
        model=_model(raw),
        head=_strings(raw["head"]),
        blocks=blocks,
        owns=owns,
        start=start if type(start) is int else None,
    )


def _model(raw: Mapping[str, Any]) -> str | None:
    model = raw.get("model")
    return model if isinstance(model, str) else None


def _strings(value: object) -> Mapping[str, str]:
    """A mapping of strings to strings, as it is (shared, not copied)."""
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("not a mapping of strings")
    return value


def _indexed(value: object, *, optional: bool = False) -> dict[int, Any]:
    """``{"0": x}`` as ``{0: x}``; each value a string (``None`` too when ``optional``)."""
    if not isinstance(value, Mapping):
        raise TypeError("not a mapping")
    out: dict[int, Any] = {}
    for key, item in value.items():
        if not (isinstance(item, str) or (optional and item is None)):
            raise TypeError("not a string")
        out[int(key)] = item
    return out


def _unreadable(event: str, version: object, message_id: str | None) -> None:
    _warn_once(event, version, "treated as unstamped", message_id)


def _warn_once(event: str, version: object, note: str, message_id: str | None) -> None:
    if (event, version) not in PROCESS.stamp_warnings:
        PROCESS.stamp_warnings.add((event, version))
        log.warning(event, version=version, note=note, message_id=message_id)
