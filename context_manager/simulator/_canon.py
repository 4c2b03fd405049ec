"""Canonical forms for binding: what the model saw, compared by meaning, never by bytes.

Pure functions, owned by the simulator alone (it shares no code with the library it checks).
Canonical JSON sorts keys, uses compact separators and drops ``cache_control`` at any depth
(provider rule 2). String content equals the one text block it stands for; consecutive same-role
messages bind as one (the API merges them), so the prefix chain runs over ``(role, block)`` pairs,
never over message objects. Thinking blocks never enter the chain (provider rule 1).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from context_manager import InvalidValue

CACHE_CONTROL_KEY = "cache_control"
"""Prompt-cache markers do not bind (provider rule 2), so they never enter a digest."""

CHAIN_START = bytes(32)
"""The chain value before any block: 32 zero bytes (the SHA-256 width)."""


def strip_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed, at any depth.

    >>> strip_cache_control({"a": [{"cache_control": {"type": "ephemeral"}, "b": 1}]})
    {'a': [{'b': 1}]}
    """
    if isinstance(value, Mapping):
        return {k: strip_cache_control(v) for k, v in value.items() if k != CACHE_CONTROL_KEY}
    if isinstance(value, list | tuple):
        return [strip_cache_control(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value``: sorted keys, compact, ``cache_control`` removed.

    >>> canonical_json({"b": 1, "a": {"cache_control": {}, "x": "é"}})
    '{"a":{"x":"é"},"b":1}'

    Raises:
        ValueError: ``value`` is not JSON-serialisable.
    """
    try:
        return json.dumps(
            strip_cache_control(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (TypeError, ValueError) as err:
        raise InvalidValue(f"not JSON-serialisable: {err}") from err


def digest(value: Any) -> str:
    """Hex SHA-256 of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def normalize_content(content: Any) -> list[Any]:
    """Message (or tool result) content as a list of blocks.

    A string is the one text block it stands for; ``""`` is no block at all (an empty text block
    is never valid, so ``""`` can only mean "nothing"). A list is kept, each block normalized.
    """
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list | tuple):
        return [normalize_block(block) for block in content]
    return []


def normalize_block(block: Any) -> Any:
    """A block in the form two equal-meaning blocks share.

    Only ``tool_result`` needs work: its ``content`` may be a string or absent, and
    ``is_error: false`` is the default spelled out.
    """
    if not isinstance(block, Mapping) or block.get("type") != "tool_result":
        return block
    out = {k: v for k, v in block.items() if not (k == "is_error" and v is False)}
    out["content"] = normalize_content(block.get("content", []))
    return out


def normalize_system(system: Any) -> list[Any]:
    """The top-level ``system`` as a list of text blocks (absent and ``""`` are both empty)."""
    if system is None:
        return []
    return normalize_content(system)


def tool_name(tool: Any) -> str | None:
    """The name a ``tools`` entry is referenced by, or ``None`` (a nameless server toolset)."""
    name = tool.get("name") if isinstance(tool, Mapping) else None
    return name if isinstance(name, str) else None


def is_deferred(tool: Any) -> bool:
    """True for a ``tools`` entry declared with ``defer_loading: true``."""
    return isinstance(tool, Mapping) and tool.get("defer_loading") is True


def bound_tools(tools: Any, added: Collection[str] = ()) -> list[Any]:
    """The tools a block binds to (provider rule 3).

    Every non-deferred tool, plus each deferred one whose name is in ``added`` (a ``tool_addition``
    in an earlier system message referenced it). Order is kept: the tool list as sent.
    """
    if not isinstance(tools, list | tuple):
        return []
    return [tool for tool in tools if not is_deferred(tool) or tool_name(tool) in added]


def head_digest(system: Any, tools: Any, added: Collection[str] = ()) -> str:
    """Digest of the bound head: the canonical ``system`` and the bound ``tools``."""
    return digest({"system": normalize_system(system), "tools": bound_tools(tools, added)})


def chain_item(role: str, block: Any) -> Any:
    """What one non-thinking block contributes to the prefix chain."""
    return [role, normalize_block(block)]


def chain_step(chain: bytes, role: str, block: Any) -> bytes:
    """The chain value after ``block`` (sent under ``role``) joins the prefix. O(size of block)."""
    item = canonical_json(chain_item(role, block))
    return hashlib.sha256(chain + item.encode()).digest()


def chain_over(messages: Sequence[tuple[str, Sequence[Any]]], start: bytes = CHAIN_START) -> bytes:
    """The chain value after every block of ``messages`` (``(role, blocks)`` pairs), in order.

    The caller leaves thinking blocks out (they are never part of a prefix).
    """
    chain = start
    for role, blocks in messages:
        for block in blocks:
            chain = chain_step(chain, role, block)
    return chain
