"""The chain: a running digest of a request's messages, as sent, block by block.

Pure functions. Each block enters the chain with the role of the message it stands in, so the
chain before a block depends only on the ``(role, block)`` sequence before it: merging or
splitting consecutive same-role messages, JSON key order and ``cache_control`` never change it.
A thinking block's seal binds its chain and its own canonical form, so editing the block itself
breaks its seal too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from context_manager._model._canonical import canonical_json

CHAIN_SEED = hashlib.sha256(b"context-manager chain v2").digest()
"""The chain of an empty request."""

_BLOCK_TAG = b"\x02"
_SEAL_TAG = b"\x03"


def block_bytes(wire_block: Mapping[str, Any]) -> bytes:
    """The canonical bytes a block contributes (``cache_control`` and key order ignored)."""
    return canonical_json(wire_block).encode()


def feed_block(chain: bytes, role: str, wire_block: Mapping[str, Any]) -> bytes:
    """The chain after ``wire_block``, sent in a message of ``role``."""
    return hashlib.sha256(
        chain + _BLOCK_TAG + role.encode() + b"\x00" + block_bytes(wire_block)
    ).digest()


def seal(chain: bytes, wire_block: Mapping[str, Any]) -> str:
    """The stamp of a thinking block that stands after ``chain``."""
    return hashlib.sha256(chain + _SEAL_TAG + block_bytes(wire_block)).hexdigest()


def wire_content(content: Any) -> list[dict[str, Any]]:
    """A wire message's content as a block list (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in content]


def chain_of_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    skip: frozenset[tuple[int, int]] = frozenset(),
    start: bytes = CHAIN_SEED,
) -> bytes:
    """Chain over wire ``messages`` exactly as sent, leaving out the ``(i, j)`` in ``skip``."""
    chain = start
    for i, message in enumerate(messages):
        role = str(message.get("role"))
        for j, block in enumerate(wire_content(message.get("content", []))):
            if (i, j) not in skip:
                chain = feed_block(chain, role, block)
    return chain
