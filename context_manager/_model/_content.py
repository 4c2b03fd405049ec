"""The content model: frozen blocks and their lossless conversion to and from wire dicts.

Invariant: ``blocks_from_wire(blocks_to_wire(x)) == x`` and ``blocks_to_wire(blocks_from_wire(d))
== d`` for any wire content ``d`` without ``None`` fields. Fields a block class does not name are
kept in ``extra`` and written back unchanged; block types this library does not know become
``UnknownBlock`` and round-trip as they came. A block field that is ``None`` is never emitted (the
API rejects it); ``None`` nested inside a field's value (a tool input, a citation's
``document_title``) is data and is kept as it came.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import attrs
import cattrs

from ._errors import InvalidType

JSON: TypeAlias = Any
"""A JSON-compatible value (the wire format)."""


def _frozen_mapping(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value) if value else {}  # always a new dict; an empty one is not copied


@attrs.frozen
class TextBlock:
    """``{"type": "text", "text": ...}``; citations and cache markers live in ``extra``."""

    text: str
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


@attrs.frozen
class ThinkingBlock:
    """Signed reasoning. ``thinking`` may be ``""`` (display omitted); the signature carries it."""

    thinking: str
    signature: str
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


@attrs.frozen
class RedactedThinkingBlock:
    """Encrypted reasoning; ``data`` is opaque and signed."""

    data: str
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


@attrs.frozen
class ToolUseBlock:
    """A client tool call."""

    id: str
    name: str
    input: dict[str, Any]
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


def _tool_result_content(value: object) -> str | tuple[Block, ...] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Iterable) and not isinstance(value, Mapping | bytes | bytearray):
        return tuple(_nested_block(item) for item in value)
    raise InvalidType(f"tool result content {value!r} is neither text nor a list of blocks")


def _nested_block(item: object) -> Block:
    return _structure_block(item) if isinstance(item, Mapping) else to_block(item)


@attrs.frozen
class ToolResultBlock:
    """The answer to a tool call; ``content`` is text, nested blocks, or ``None`` (absent)."""

    tool_use_id: str
    content: str | tuple[Block, ...] | None = attrs.field(
        default=None, converter=_tool_result_content
    )
    is_error: bool | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


@attrs.frozen
class ImageBlock:
    """An image; ``source`` is the wire source dict."""

    source: dict[str, Any]
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, kw_only=True)


@attrs.frozen
class UnknownBlock:
    """Any block type this library does not model; ``raw`` is its wire dict, kept as is."""

    raw: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.raw.get("type", ""))


Block: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ImageBlock
    | UnknownBlock
)
"""Every content block this library stores and sends."""

THINKING_TYPES = (ThinkingBlock, RedactedThinkingBlock)
"""Block classes that carry signed reasoning bound to their prefix."""

_WIRE_TYPE: dict[type[Any], str] = {
    TextBlock: "text",
    ThinkingBlock: "thinking",
    RedactedThinkingBlock: "redacted_thinking",
    ToolUseBlock: "tool_use",
    ToolResultBlock: "tool_result",
    ImageBlock: "image",
}
_CLASS_BY_WIRE_TYPE = {wire: cls for cls, wire in _WIRE_TYPE.items()}
_NAMED_FIELDS: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in attrs.fields(cls) if f.name != "extra") for cls in _WIRE_TYPE
}

converter = cattrs.Converter()
"""The cattrs converter that maps blocks to and from Messages API wire dicts."""


def _unstructure_block(block: Block) -> dict[str, Any]:
    if isinstance(block, UnknownBlock):
        return _without_none_fields(block.raw)
    cls = type(block)
    if cls is TextBlock and block.text is not None:  # type: ignore[union-attr]
        wire: dict[str, Any] = {"type": "text", "text": block.text}  # type: ignore[union-attr]
    else:
        wire = {"type": _WIRE_TYPE[cls]}
        for name in _NAMED_FIELDS[cls]:
            value = getattr(block, name)
            if value is None:
                continue
            if name == "content" and isinstance(value, tuple):
                value = [_unstructure_block(inner) for inner in value]
            wire[name] = value
    if block.extra:
        wire.update(_without_none_fields(block.extra))
    return wire


def _common_block(wire: dict[str, Any]) -> Block | None:
    """The commonest blocks, as stored (exactly their fields, of the plain types), or
    ``None`` for anything else (structured the general way)."""
    kind = wire.get("type")
    if kind == "text" and len(wire) == 2:
        text = wire.get("text")
        if type(text) is str:
            return TextBlock(text)
    elif kind == "thinking" and len(wire) == 3:
        thinking, signature = wire.get("thinking"), wire.get("signature")
        if type(thinking) is str and type(signature) is str:
            return ThinkingBlock(thinking, signature)
    elif kind == "tool_result" and len(wire) == 3:
        tool_use_id, content = wire.get("tool_use_id"), wire.get("content")
        if type(tool_use_id) is str and type(content) is str:
            return ToolResultBlock(tool_use_id, content)
    elif kind == "tool_use" and len(wire) == 4:
        call_id, name, arguments = wire.get("id"), wire.get("name"), wire.get("input")
        if type(call_id) is str and type(name) is str and type(arguments) is dict:
            return ToolUseBlock(call_id, name, arguments)
    return None


def _structure_block(wire: Any, _: Any = None) -> Block:
    if type(wire) is dict:  # the commonest blocks, as stored: nothing else to look at
        common = _common_block(wire)
        if common is not None:
            return common
    if type(wire) is not dict and not isinstance(wire, Mapping):  # dict: no ABC check
        raise InvalidType(f"content block must be a dict with a 'type', got {wire!r}")
    if None in wire.values():
        wire = _without_none_fields(wire)
    kind = wire.get("type")
    cls = _CLASS_BY_WIRE_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return UnknownBlock(raw=dict(wire))
    named = _NAMED_FIELDS[cls]
    try:
        kwargs: dict[str, Any] = {name: wire[name] for name in named if name in wire}
        if len(kwargs) + 1 == len(wire):  # the type and named fields only (most blocks)
            return cls(**kwargs)  # type: ignore[no-any-return]
        extra = {k: v for k, v in wire.items() if k != "type" and k not in named}
        return cls(**kwargs, extra=extra)  # type: ignore[no-any-return]
    except TypeError:
        # A known type missing a required field: keep it verbatim rather than lose it.
        return UnknownBlock(raw=wire)


for _cls in (*_WIRE_TYPE, UnknownBlock):
    converter.register_unstructure_hook(_cls, _unstructure_block)
    converter.register_structure_hook(_cls, _structure_block)
converter.register_structure_hook(Block, _structure_block)


def block_to_wire(block: Block) -> dict[str, Any]:
    """Return the Messages API wire dict of ``block`` (no ``None`` values)."""
    return _unstructure_block(block)


def block_from_wire(wire: Mapping[str, Any]) -> Block:
    """Return the block for a wire dict; unknown types become ``UnknownBlock``."""
    return _structure_block(wire)


_BLOCK_CLASSES = (*_WIRE_TYPE, UnknownBlock)


def to_block(item: object) -> Block:
    """Coerce one content item: a block, a wire dict, or an ``anthropic`` SDK block model.

    Raises:
        TypeError: ``item`` is none of those; the message names it.
    """
    if isinstance(item, _BLOCK_CLASSES):
        return item  # type: ignore[return-value]
    if isinstance(item, Mapping):
        if not isinstance(item.get("type"), str):
            raise InvalidType(f"content item {item!r} has no string 'type'")
        return _structure_block(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        # exclude_unset, not exclude_none: a null the API sent inside a field (a citation's
        # document_title) is required on the way back; null block fields are dropped below.
        wire = dump(mode="json", by_alias=True, exclude_unset=True)
        if isinstance(wire, Mapping) and isinstance(wire.get("type"), str):
            return _structure_block(wire)
    raise InvalidType(
        f"content item {item!r} is neither a block, a wire dict nor an anthropic SDK block"
    )


def to_blocks(content: object) -> tuple[Block, ...]:
    """Coerce message content: a string, one block, or an iterable of blocks / dicts / SDK blocks.

    A string becomes one ``TextBlock``. An SDK ``BetaMessage`` (anything with ``.content``
    and ``.role``) contributes its content.

    Raises:
        TypeError: an item is not content; the message names it.
    """
    if isinstance(content, str):
        return (TextBlock(content),)
    if isinstance(content, bytes | bytearray):
        raise InvalidType(f"content {content!r} is bytes; decode it to text or send an image block")
    if isinstance(content, (*_BLOCK_CLASSES, Mapping)):
        return (to_block(content),)
    inner = getattr(content, "content", None)
    if inner is not None and hasattr(content, "role") and not isinstance(content, Mapping):
        return to_blocks(inner)
    if isinstance(content, Iterable):
        return tuple(to_block(item) for item in content)
    raise InvalidType(f"content {content!r} is not a string, a block or an iterable of blocks")


def reply_blocks(reply: object) -> tuple[Block, ...]:
    """A reply's content blocks: an SDK message, a response body as a dict, or blocks.

    A dict is read as a response body when it has ``"type": "message"`` or a ``content`` list
    (what a host using ``httpx``, or a recorded response, has): its ``content`` blocks.

    Raises:
        TypeError: a dict that is not a response body (a single block is not a reply), or
            anything ``to_blocks`` refuses.
    """
    if isinstance(reply, Mapping):
        content = reply.get("content")
        if reply.get("type") == "message" or isinstance(content, list):
            if not isinstance(content, list):
                raise InvalidType(f"response body {reply!r:.120} has no content list")
            return to_blocks(content)
        raise InvalidType(
            f'reply {reply!r:.120} is not a response body (a dict with "type": "message" '
            "or a content list); pass the SDK message, the response body or its content blocks"
        )
    return to_blocks(reply)


def blocks_to_wire(blocks: Iterable[Block]) -> list[dict[str, Any]]:
    """Wire dicts for ``blocks``, in order."""
    return [_unstructure_block(b) for b in blocks]


def blocks_from_wire(wire: Iterable[Mapping[str, Any]]) -> tuple[Block, ...]:
    """Blocks for wire dicts, in order."""
    return tuple([_structure_block(w) for w in wire])


def _without_none_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A block's fields without the ``None`` ones (one level: nested values are data)."""
    return {k: v for k, v in fields.items() if v is not None}


def is_thinking(block: Block) -> bool:
    """True for signed reasoning blocks (``thinking`` and ``redacted_thinking``)."""
    return isinstance(block, THINKING_TYPES)


def signature_of(block: Block) -> str:
    """The opaque signature a thinking block carries (``data`` for redacted), else ``""``."""
    if isinstance(block, ThinkingBlock):
        return block.signature
    if isinstance(block, RedactedThinkingBlock):
        return block.data
    return ""


def first_text(blocks: Iterable[Block]) -> str | None:
    """The first non-empty text of ``blocks``, or ``None``."""
    for block in blocks:
        if isinstance(block, TextBlock) and block.text.strip():
            return block.text
    return None
