"""Stored messages and their metadata: immutable records handed out by every store.

A ``StoredMessage`` is a snapshot; stores never mutate one they returned. ``sequence`` is
monotonic per store and orders messages on any branch; ``branch`` is the key of the branch the
message was written on (a fork sees it through its lineage).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

import attrs

from ._content import Block, block_to_wire, blocks_from_wire
from ._errors import InvalidType, InvalidValue

MessageId: TypeAlias = str
"""Unique in a store."""

Role: TypeAlias = Literal["user", "assistant", "system"]
ROLES: tuple[Role, ...] = ("user", "assistant", "system")

REASONING_LOSS_KIND = "reasoning-loss"

HEAD_CHANGE_KIND = "head-change"
"""``metadata.kind`` of a system message the compiler appended for a ``system`` / ``tools`` change
(SPEC 7b)."""
"""``metadata.kind`` of every ``[reasoning]`` notice."""

LineForm: TypeAlias = Literal["head", "count", "at_least"]
"""The SPEC 9 forms of a ``[reasoning]`` line."""

_LINE_MARKER = "[reasoning] "


def line_form(text: str) -> LineForm | None:
    """Which SPEC 9 form a ``[reasoning]`` line is in, or ``None`` for any other text.

    >>> line_form("[reasoning] ada: Some of your earlier reasoning is no longer in your context:")
    'count'
    >>> line_form("hello") is None
    True
    """
    if not text.startswith(_LINE_MARKER):
        return None
    if "the reasoning behind at least " in text:
        return "at_least"
    if "Some of your earlier reasoning is no longer in your context:" in text:
        return "count"
    return "head"


ASKER_KEY = "asker"
"""The ``metadata.extra`` key naming who asked the turn a message belongs to (the runtime's
``run_turn(..., asker=...)``): the trigger, its tool results and its replies carry it. The live
view shows a reply's reasoning only to its asker and the owner."""

STRIP_KEY = "strip"
"""The ``metadata.extra`` key of a reply recorded by the runtime holding the strip of the compile
that produced it, when it had one: ``{"cause", "changed", "replies", "blocks"}``."""

DROPPED_KEY = "dropped"
"""The ``metadata.extra`` key of a reply recorded by the runtime listing the thinking blocks the
provider dropped from the request that produced it: ``[reply id, block, reason]`` each."""


def _dict(value: dict[str, Any] | None) -> dict[str, Any]:
    return dict(value) if value else {}  # always a new dict; an empty one is not copied


@attrs.frozen
class MessageMeta:
    """What a message is beside its content; notices set ``system_notice``, ``kind``, ``target``."""

    system_notice: bool = False
    kind: str | None = None
    target: str | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"system_notice": self.system_notice}
        if self.kind is not None:
            out["kind"] = self.kind
        if self.target is not None:
            out["target"] = self.target
        if self.extra:
            out["extra"] = self.extra
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MessageMeta:
        return cls(
            system_notice=bool(data.get("system_notice", False)),
            kind=data.get("kind"),
            target=data.get("target"),
            extra=data.get("extra") or {},
        )


def coerce_meta(metadata: MessageMeta | dict[str, Any] | None) -> MessageMeta:
    """Accept a ``MessageMeta``, a plain dict of its fields, or ``None``."""
    if metadata is None:
        return MessageMeta()
    if isinstance(metadata, MessageMeta):
        return metadata
    if isinstance(metadata, dict):
        known = {"system_notice", "kind", "target", "extra"}
        unknown = set(metadata) - known
        extra = dict(metadata.get("extra") or {})
        extra.update({k: metadata[k] for k in unknown})
        return MessageMeta(
            system_notice=bool(metadata.get("system_notice", False)),
            kind=metadata.get("kind"),
            target=metadata.get("target"),
            extra=extra,
        )
    raise InvalidType(f"metadata must be a MessageMeta or a dict, got {metadata!r}")


@attrs.frozen
class StoredMessage:
    """One message as stored."""

    id: MessageId
    sequence: int
    branch: str
    role: Role
    content: tuple[Block, ...]
    metadata: MessageMeta
    created_at: dt.datetime


def check_role(role: object) -> Role:
    """Return ``role`` if it is one the store accepts.

    Raises:
        ValueError: naming the unknown role.
    """
    if role not in ROLES:
        raise InvalidValue(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    return role


def encode_message(content: Sequence[Block], metadata: MessageMeta) -> tuple[str, str]:
    """The JSON text every store keeps for ``content`` and ``metadata``.

    Both stores go through this (and ``decode_message``), so what a store hands back is what
    SQLite would read from disk, whichever store it is.

    Raises:
        TypeError: a block or the metadata holds a value JSON cannot carry; the message names it.
    """
    wire = [block_to_wire(block) for block in content]
    try:
        text = json.dumps(wire, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        for index, (block, item) in enumerate(zip(content, wire, strict=True)):
            try:
                json.dumps(item, allow_nan=False)
            except (TypeError, ValueError) as inner:
                raise InvalidType(
                    f"content block {index} ({block!r}) is not JSON-serialisable: {inner}"
                ) from inner
        raise InvalidType(f"content is not JSON-serialisable: {err}") from err
    try:
        meta = json.dumps(metadata.to_json(), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise InvalidType(f"metadata {metadata!r} is not JSON-serialisable: {err}") from err
    return text, meta


def decode_message(content: str, metadata: str) -> tuple[tuple[Block, ...], MessageMeta]:
    """The blocks and metadata ``encode_message`` wrote."""
    return blocks_from_wire(json.loads(content)), MessageMeta.from_json(json.loads(metadata))
