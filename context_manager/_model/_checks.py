"""Checks at the boundary: what a caller hands in is refused before anything is written.

Pure functions. Each raises a ``ContextManagerError`` subclass (which also is the builtin it
semantically is) naming the value and what to give instead, and returns nothing or the checked
value. Stored content is never checked again on the way out: what the store holds is read as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._content import (
    Block,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_to_wire,
)
from ._errors import InvalidBranchName, InvalidContent, InvalidType, InvalidValue

_REQUIRED: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id",),
    "image": ("source",),
    "thinking": ("thinking",),
    "redacted_thinking": ("data",),
}
"""Fields the API requires on the block types this library models."""


def _string_field(value: object, name: str, *, empty: bool = True) -> str | None:
    if not isinstance(value, str):
        return f"{name!r} must be a string, got {value!r:.80}"
    if not empty and not value:
        return f"{name!r} must not be empty"
    return None


def _text_problem(block: TextBlock) -> str | None:
    return _string_field(block.text, "text")


def _thinking_problem(block: ThinkingBlock) -> str | None:
    return _string_field(block.thinking, "thinking") or _string_field(block.signature, "signature")


def _redacted_problem(block: RedactedThinkingBlock) -> str | None:
    return _string_field(block.data, "data")


def _tool_use_problem(block: ToolUseBlock) -> str | None:
    problem = _string_field(block.id, "id", empty=False) or _string_field(block.name, "name")
    if problem is None and not isinstance(block.input, Mapping):
        problem = f"'input' must be an object (a dict), got {block.input!r:.80}"
    return problem


def _tool_result_problem(block: ToolResultBlock) -> str | None:
    problem = _string_field(block.tool_use_id, "tool_use_id", empty=False)
    if problem is None and isinstance(block.content, tuple):
        inner = (_block_problem(b) for b in block.content)
        problem = next((f"its content: {p}" for p in inner if p), None)
    return problem


def _image_problem(block: ImageBlock) -> str | None:
    if isinstance(block.source, Mapping):
        return None
    return f"'source' must be an object, got {block.source!r:.80}"


def _unknown_problem(block: UnknownBlock) -> str | None:
    missing = [f for f in _REQUIRED.get(block.type, ()) if block.raw.get(f) is None]
    if not missing:
        return None
    return f"a {block.type!r} block needs {', '.join(repr(f) for f in missing)}"


_PROBLEMS: dict[type[Any], Callable[[Any], str | None]] = {
    TextBlock: _text_problem,
    ThinkingBlock: _thinking_problem,
    RedactedThinkingBlock: _redacted_problem,
    ToolUseBlock: _tool_use_problem,
    ToolResultBlock: _tool_result_problem,
    ImageBlock: _image_problem,
    UnknownBlock: _unknown_problem,
}
"""Per block class: why the API would refuse the block (a wrong type, a missing field)."""


def _block_problem(block: Block) -> str | None:
    """Why the API would refuse ``block``, or ``None``. An unknown type with a known type's
    name (a ``text`` block without its text) is checked for that type's required fields."""
    return _PROBLEMS[type(block)](block)


def check_blocks(blocks: Sequence[Block], where: str) -> None:
    """Refuse a block the API would refuse (``{"type": "text", "text": 5}``, a ``tool_use``
    with no ``id`` or a list ``input``, a text block with no text, a lone surrogate anywhere).

    Raises:
        InvalidContent: naming ``where`` (the message) and the block index.
    """
    for index, block in enumerate(blocks):
        problem = _block_problem(block) or _surrogate_problem(block)
        if problem is not None:
            raise InvalidContent(where, index, f"{problem} ({_short(block)})")


def _surrogate_problem(block: Block) -> str | None:
    """A lone surrogate anywhere in ``block`` (half of a character, such as an emoji a tool's
    output cut in two): no UTF-8 encodes it, and the API refuses the body ("not valid JSON: no
    low surrogate in string"). O(size of the block)."""
    text = json.dumps(block_to_wire(block), ensure_ascii=False, default=repr)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        found = text[err.start : err.end]
        return (
            f"holds a lone surrogate {found!r} (half of a character); the API refuses it as "
            "invalid JSON: replace it, e.g. with U+FFFD"
        )
    return None


def check_not_empty(blocks: Sequence[Block], where: str, *, allowed: bool = False) -> None:
    """Refuse a message with nothing the API would take (no block, or only blank text).

    ``allowed``: the message carries something beside its content (a system message's
    ``output_config``), so an empty content list is valid.

    Raises:
        InvalidContent: naming ``where``.
    """
    if allowed:
        return
    if all(isinstance(b, TextBlock) and not b.text.strip() for b in blocks):
        raise InvalidContent(
            where,
            None,
            f"has no content the API accepts ({[_short(b) for b in blocks]!r:.120}); "
            "give some text or a content block",
        )


def _short(block: Block) -> str:
    return repr(block)[:120]


def check_branch_name(name: object) -> str:
    """``name`` when it is a non-empty string (``fork``, ``branch_at``, every store).

    Raises:
        InvalidBranchName: ``None``, a number, ``""``.
    """
    if not isinstance(name, str) or not name:
        raise InvalidBranchName(name)
    return name


def check_positive_int(value: object, what: str, *, unit: str = "int") -> int:
    """``value`` when it is an int above 0 (not a bool).

    Raises:
        InvalidType: not an int (``"10"``, ``1.5``, ``True``).
        InvalidValue: 0 or less.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be a positive {unit} (an int), got {value!r:.80}")
    if value <= 0:
        raise InvalidValue(f"{what} must be a positive {unit}, got {value!r}")
    return value


def check_optional_sequence(value: object, what: str) -> int | None:
    """``value`` when it is ``None`` or an int of at least 0 (a sequence number).

    Raises:
        InvalidType: not an int (``"a"``).
        InvalidValue: below 0.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be None or a sequence number (an int), got {value!r:.80}")
    if value < 0:
        raise InvalidValue(f"{what} must be None or at least 0, got {value!r}")
    return value


def attrs_positive_int(_instance: Any, attribute: Any, value: Any) -> None:
    """An ``attrs`` validator: ``check_positive_int`` naming the field."""
    check_positive_int(value, attribute.name)


def attrs_count(_instance: Any, attribute: Any, value: Any) -> None:
    """An ``attrs`` validator: an int of at least 0 (not a bool), naming the field."""
    check_optional_sequence(value, attribute.name)
    if value is None:
        raise InvalidType(f"{attribute.name} must be an int of at least 0, got None")


def attrs_fraction(_instance: Any, attribute: Any, value: Any) -> None:
    """An ``attrs`` validator: a number in (0, 1], naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidType(f"{attribute.name} must be a number in (0, 1], got {value!r:.80}")
    if not 0 < value <= 1:
        raise InvalidValue(f"{attribute.name} must be in (0, 1], got {value!r}")
