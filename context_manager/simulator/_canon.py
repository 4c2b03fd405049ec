"""Canonical forms for binding: what the model saw, compared by meaning, never by bytes.

Pure functions. JSON key order, whitespace and ``cache_control`` never matter (``canonical_json``);
string content equals the one text block it stands for; consecutive same-role messages bind as one
(the API merges them), so the chain runs over ``(role, block)`` pairs, not over message objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from context_manager._model._canonical import canonical_json, digest

CHAIN_START = bytes(32)
"""The chain value before any block: 32 zero bytes (the SHA-256 width)."""


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


def bound_tools(tools: Any) -> list[Any]:
    """The tools a block binds to: every tool except deferred ones (``defer_loading: true``)."""
    if not isinstance(tools, list | tuple):
        return []
    return [tool for tool in tools if not (isinstance(tool, Mapping) and tool.get("defer_loading"))]


def head_digest(system: Any, tools: Any) -> str:
    """Digest of the bound head: the canonical ``system`` and the non-deferred ``tools``."""
    return digest({"system": normalize_system(system), "tools": bound_tools(tools)})


def chain_step(chain: bytes, role: str, block: Any) -> bytes:
    """The chain value after ``block`` (sent under ``role``) joins the prefix. O(size of block)."""
    item = canonical_json([role, normalize_block(block)])
    return hashlib.sha256(chain + item.encode()).digest()


def chain_over(messages: Sequence[tuple[str, Sequence[Any]]], start: bytes = CHAIN_START) -> bytes:
    """The chain value after every block of ``messages`` (``(role, blocks)`` pairs), in order."""
    chain = start
    for role, blocks in messages:
        for block in blocks:
            chain = chain_step(chain, role, block)
    return chain


def model_family(model: str, families: Mapping[str, str]) -> str:
    """The family ``model`` binds under: ``families[model]``, else the model id itself."""
    return families.get(model, model)
