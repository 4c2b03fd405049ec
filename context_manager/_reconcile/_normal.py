"""How a framework's copy of a message is compared with the stored one.

Pure functions. Frameworks re-serialize what they send: a string for one text block, no
``cache_control`` or a moved one, ``citations: null`` or none, no ``caller``, ``is_error: false``
written out or left out, a null inside a server tool's result (``page_age``) kept or dropped,
their own reply copies with thinking dropped or turned into tagged text. None of that is a
change: ``user_key`` and ``reply_key`` map a message to a value that two copies of the same
message share, and that an edit (other words, another tool input, another tool result) changes.
``user_key`` is exact up to those markers; ``reply_key`` is the skeleton of a reply (its words,
its tool calls, any other block as it is) and ignores thinking, which the recorded copy carries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from context_manager._model._canonical import canonical_json
from context_manager._model._content import Block, block_to_wire, to_blocks

IGNORED_FIELDS = frozenset({"cache_control", "citations", "caller"})
"""Block fields a framework's copy may drop, add or move without changing the message."""

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})

_THINKING_TAG = re.compile(r"^\s*<(thinking|think|reasoning)>.*</\1>\s*$", re.DOTALL)
"""A text block that is reasoning re-serialized as tagged text (pydantic-ai does this for
thinking it cannot replay as a signed block)."""


def wire_content(content: object) -> list[dict[str, Any]]:
    """A message's content as wire dicts (a string is one text block); wire dicts are taken as
    they are (copied), anything else (blocks, SDK objects) is converted."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list | tuple) and all(type(item) is dict for item in content):
        return [dict(item) for item in content]
    return [block_to_wire(block) for block in to_blocks(content)]


def _clean(value: Any) -> Any:
    """``value`` without the ignored fields and the ``null`` ones (at any depth: a framework's
    copy writes a null out or leaves it out, ``exclude_none``) and with defaults made explicit."""
    if isinstance(value, Mapping):
        out = {k: _clean(v) for k, v in value.items() if k not in IGNORED_FIELDS and v is not None}
        if out.get("type") == "tool_result":
            out.setdefault("is_error", False)
            inner = out.get("content")
            if isinstance(inner, str):
                out["content"] = [{"type": "text", "text": inner}] if inner else []
            elif inner is None:
                out["content"] = []
        return out
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _visible(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks without empty text (frameworks drop it, the API refuses it)."""
    return [b for b in blocks if not (b.get("type") == "text" and not str(b.get("text", "")))]


def user_key(role: str, content: object) -> str:
    """The comparison key of a message that is not a reply: its role and cleaned blocks."""
    return canonical_json([role, _clean(_visible(wire_content(content)))])


def reply_key(content: object) -> str:
    """The comparison key of a reply: its text (whitespace left out) and its calls, in order.

    A framework may join a reply's text blocks (a cited answer comes as several) with or
    without a space between them, or keep them apart: each reads the same.

    Thinking and reasoning re-serialized as tagged text are left out: the recorded reply's
    thinking is what goes out, whatever the framework kept of it.
    """
    skeleton: list[list[Any]] = []
    for block in wire_content(content):
        kind = block.get("type")
        if kind in THINKING_TYPES:
            continue
        if kind == "text":
            words = str(block.get("text", "")).split()
            if not words or (words[0].startswith("<") and _THINKING_TAG.match(" ".join(words))):
                continue
            skeleton.append(["text", "".join(words)])
        elif kind == "tool_use" or kind == "server_tool_use":
            skeleton.append([kind, block.get("id"), block.get("name"), block.get("input")])
        else:  # a server tool's result, a compaction block, anything newer: as it is
            skeleton.append(["block", _clean(block)])
    return canonical_json(_merge_text(skeleton))


def _merge_text(skeleton: list[list[Any]]) -> list[list[Any]]:
    """Adjacent text entries as one (a framework may split or join a reply's text blocks).
    Each entry is a list whose first item names its kind."""
    merged: list[list[Any]] = []
    for entry in skeleton:
        if entry[0] == "text" and merged and merged[-1][0] == "text":
            merged[-1] = ["text", f"{merged[-1][1]}{entry[1]}"]
        else:
            merged.append(entry)
    return merged


def message_key(role: str, content: object) -> str:
    """``reply_key`` for an assistant message, ``user_key`` for any other."""
    return reply_key(content) if role == "assistant" else user_key(role, content)


def stored_key(role: str, blocks: Iterable[Block]) -> str:
    """``message_key`` of a stored message."""
    return message_key(role, tuple(blocks))


def edited_reply(recorded: Iterable[Block], content: object) -> tuple[list[dict[str, Any]], int]:
    """What an edit of a reply stores: the framework's copy with only the thinking blocks it sent
    back exactly as recorded (a change invalidates only the thinking after it, provider rule 5;
    the compile judges them as any other), and how many recorded thinking blocks it leaves out.

    >>> said = {"type": "thinking", "thinking": "t", "signature": "s"}
    >>> edited_reply(to_blocks([said, {"type": "text", "text": "a"}]),
    ...              [said, {"type": "text", "text": "b"}])
    ([{'type': 'thinking', 'thinking': 't', 'signature': 's'}, {'type': 'text', 'text': 'b'}], 0)
    >>> edited_reply(to_blocks([said]), [{"type": "text", "text": "b"}])
    ([{'type': 'text', 'text': 'b'}], 1)
    """
    unmatched = [
        _clean(block) for block in wire_content(tuple(recorded)) if block["type"] in THINKING_TYPES
    ]
    kept: list[dict[str, Any]] = []
    for block in wire_content(content):
        if block.get("type") in THINKING_TYPES:
            mine = _clean(block)
            if mine not in unmatched:
                continue  # not this reply's recorded thinking: never sent
            unmatched.remove(mine)
        kept.append(block)
    return kept, len(unmatched)
