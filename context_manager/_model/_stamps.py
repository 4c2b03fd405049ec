"""Stamps as values: the frozen ``Stamp`` (version 2) and ``LegacyStamp`` (version 1), read
from and written to their stored JSON form.

A stamp is parsed once, at the store boundary (``parse_stamp``, called by every store's
``stamps``); the compiler and the judges (``_binding._validity``) take only these types. A row
that is not a stamp of a known version, or whose fields have the wrong shape, parses to
``None`` (read as unstamped: its thinking is never sent) and is logged once per row (the store
passes its own ``logged`` set). A legacy stamp is noted once per process. Block indexes are ints
here (the stored JSON keeps them as strings: ``stamp_to_wire``). Pure apart from those logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ._log import library_logger
from ._process import PROCESS

log = library_logger("context_manager.binding")

STAMP_VERSION = 2
"""Written into every stamp, so a later format can tell old stamps apart."""

LEGACY_STAMP_VERSION = 1
"""Stamps of this version are checked by ``_validity.judge_legacy``."""

UNREADABLE = "stamp_unreadable"
UNKNOWN_VERSION = "stamp_version_unreadable"


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
"""What a store returns for a stamped reply."""


@attrs.frozen
class Unreadable:
    """Why a stored stamp is not one: the log ``event`` and the ``version`` it claimed."""

    event: str
    version: object = None


def parse_stamp(
    raw: object,
    message_id: str | None = None,
    *,
    namespace: str | None = None,
    logged: set[tuple[object, ...]] | None = None,
) -> AnyStamp | None:
    """The stamp ``raw`` (a stored stamp: its JSON text or the decoded object) holds, or
    ``None``.

    ``None`` for no stamp, an unknown version and a malformed one; the last two are logged
    (``stamp_version_unreadable``, ``stamp_unreadable``, naming ``message_id``) once per row:
    once per ``(event, namespace, message_id)`` in ``logged`` (a store's own set; the
    process's by default). A version-1 stamp is noted once per process
    (``stamp_version_legacy``): it is sent only where everything sent before it is unchanged.

    >>> parse_stamp({"v": 2, "model": "m", "head": {}, "seals": {"1": "s"}, "pred": {"1": None}})
    Stamp(model='m', head={}, blocks={1: BlockStamp(seal='s', pred=None, own=None)}, owns=False, start=None)
    >>> parse_stamp('{"v": 2, "head": [], "seals": {}, "pred": {}}') is None
    True
    """  # noqa: E501  (a doctest's output is one line)
    if raw is None:
        return None
    found = decode_stamp(raw)
    if isinstance(found, Unreadable):
        seen = PROCESS.stamp_warnings if logged is None else logged
        if (found.event, namespace, message_id) not in seen:
            seen.add((found.event, namespace, message_id))
            fields = {} if namespace is None else {"namespace": namespace}
            log.warning(
                found.event,
                version=found.version,
                note="treated as unstamped",
                message_id=message_id,
                **fields,
            )
        return None
    if isinstance(found, LegacyStamp):
        _legacy_noted(message_id)
    return found


def decode_stamp(raw: object) -> AnyStamp | Unreadable:
    """The stamp ``raw`` holds (JSON text is decoded first), or why it holds none. Pure."""
    if isinstance(raw, str | bytes | bytearray):
        try:
            raw = json.loads(raw)
        except ValueError:
            return Unreadable(UNREADABLE)
    if not isinstance(raw, Mapping) or "v" not in raw:
        return Unreadable(UNREADABLE)
    version = raw["v"]
    try:
        if version == STAMP_VERSION:
            return _current(raw)
        if version == LEGACY_STAMP_VERSION:
            return LegacyStamp(_model(raw), _strings(raw["head"]), _indexed(raw["seals"]))
    except (KeyError, TypeError, ValueError):
        return Unreadable(UNREADABLE, version)
    return Unreadable(UNKNOWN_VERSION, version)


def stamp_to_wire(stamp: AnyStamp) -> dict[str, Any]:
    """The JSON object a store keeps for ``stamp`` (block indexes as strings); ``parse_stamp``
    reads it back equal.

    >>> s = Stamp("m", {"system": "d"}, {0: BlockStamp("a", None, "o")}, owns=True, start=3)
    >>> parse_stamp(stamp_to_wire(s)) == s
    True
    """
    if isinstance(stamp, LegacyStamp):
        return {
            "v": LEGACY_STAMP_VERSION,
            "model": stamp.model,
            "head": dict(stamp.head),
            "seals": {str(i): seal for i, seal in stamp.seals.items()},
        }
    seals: dict[str, str] = {}
    preds: dict[str, str | None] = {}
    owns: dict[str, str | None] = {}
    for index, block in stamp.blocks.items():  # one pass: a reply is stamped at every record
        key = str(index)
        seals[key], preds[key], owns[key] = block.seal, block.pred, block.own
    wire: dict[str, Any] = {
        "v": STAMP_VERSION,
        "model": stamp.model,
        "head": dict(stamp.head),
        "seals": seals,
        "pred": preds,
    }
    if stamp.owns:  # each block alone: judged so on a model that runs no prefix check
        wire["own"] = owns
    wire["start"] = stamp.start  # where its window started (a later branch's start)
    return wire


def stamp_to_json(stamp: AnyStamp) -> str:
    """``stamp_to_wire`` as the JSON text the SQL stores keep."""
    return json.dumps(stamp_to_wire(stamp))


def _current(raw: Mapping[str, Any]) -> Stamp:
    """A version-2 stamp; one pass over its blocks."""
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


def _indexed(value: object) -> dict[int, str]:
    """``{"0": x}`` as ``{0: x}``; each value a string."""
    if not isinstance(value, Mapping):
        raise TypeError("not a mapping")
    out: dict[int, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise TypeError("not a string")
        out[int(key)] = item
    return out


def _legacy_noted(message_id: str | None) -> None:
    key = ("stamp_version_legacy", LEGACY_STAMP_VERSION)
    if key not in PROCESS.stamp_warnings:
        PROCESS.stamp_warnings.add(key)
        log.warning(
            "stamp_version_legacy",
            version=LEGACY_STAMP_VERSION,
            note="sent only where everything sent before it, thinking included, is unchanged",
            message_id=message_id,
        )
