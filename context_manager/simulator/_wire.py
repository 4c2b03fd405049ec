"""Content items to wire dicts, by the public wire format alone.

Pure functions. The simulator shares no code with the library it checks, so it converts by shape:
a string is a text block; a mapping is a block as given (``None`` fields left out); an
``anthropic`` SDK model is dumped as JSON (``model_dump``); any other ``attrs`` object named
``<Kind>Block`` is the block of type ``<kind>`` (``ThinkingBlock`` is ``"thinking"``,
``ToolUseBlock`` is ``"tool_use"``) with its fields as wire fields, an ``extra`` mapping merged
in, and an object whose one field is ``raw`` is that mapping verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs
from anthropic.types.beta import BetaRedactedThinkingBlock, BetaThinkingBlock

from context_manager import InvalidType

SignedBlock: TypeAlias = (
    Mapping[str, object] | BetaThinkingBlock | BetaRedactedThinkingBlock | attrs.AttrsInstance
)
"""A thinking or redacted thinking block in any shape ``to_wire`` reads: a wire dict, an SDK
block, or an ``attrs`` block (``context_manager.ThinkingBlock``)."""

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
_BLOCK_SUFFIX = "Block"


def _without_none(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _from_attrs(item: Any) -> dict[str, Any] | None:
    cls = type(item)
    if not attrs.has(cls):
        return None
    names = [f.name for f in attrs.fields(cls)]
    if names == ["raw"] and isinstance(item.raw, Mapping):
        return _without_none(item.raw)
    if not cls.__name__.endswith(_BLOCK_SUFFIX):
        return None
    kind = _CAMEL.sub("_", cls.__name__[: -len(_BLOCK_SUFFIX)]).lower()
    wire: dict[str, Any] = {"type": kind}
    for name in names:
        if name == "extra":
            continue
        value = getattr(item, name)
        if isinstance(value, tuple):
            value = [to_wire(inner) for inner in value]
        if value is not None:
            wire[name] = value
    extra = getattr(item, "extra", None)
    if isinstance(extra, Mapping):
        wire.update(_without_none(extra))
    return wire


def to_wire(item: Any) -> dict[str, Any]:
    """One content item as a wire dict.

    >>> to_wire("hi")
    {'type': 'text', 'text': 'hi'}

    Raises:
        TypeError: ``item`` is none of the shapes above, or has no string ``type``.
    """
    if isinstance(item, str):
        return {"type": "text", "text": item}
    wire: Any = None
    if isinstance(item, Mapping):
        wire = _without_none(item)
    elif callable(getattr(item, "model_dump", None)):
        wire = _without_none(item.model_dump(mode="json", by_alias=True, exclude_unset=True))
    else:
        wire = _from_attrs(item)
    if not isinstance(wire, dict) or not isinstance(wire.get("type"), str):
        raise InvalidType(f"content item {item!r} is not a content block (no string 'type')")
    return wire
