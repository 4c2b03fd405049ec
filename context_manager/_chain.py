"""The chain: a running digest of a request's messages, as sent, block by block.

Pure functions. ``chain`` after a sequence of items depends only on that sequence: two renders
agree on a block's chain exactly when everything before it (message boundaries with their roles,
and every earlier block in canonical form) is the same. A thinking block's seal binds its chain
and its own canonical form, so editing the block itself breaks its seal too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from ._canonical import canonical_json

CHAIN_SEED = hashlib.sha256(b"context-manager chain v1").digest()
"""The chain of an empty request."""

_BOUNDARY_TAG = b"\x01"
_BLOCK_TAG = b"\x02"
_SEAL_TAG = b"\x03"


def feed_boundary(chain: bytes, role: str) -> bytes:
    """The chain after a new message of ``role`` starts."""
    return hashlib.sha256(chain + _BOUNDARY_TAG + role.encode()).digest()


def block_bytes(wire_block: Mapping[str, Any]) -> bytes:
    """The canonical bytes a block contributes (``cache_control`` and key order ignored)."""
    return canonical_json(wire_block).encode()


def feed_block(chain: bytes, wire_block: Mapping[str, Any]) -> bytes:
    """The chain after ``wire_block``."""
    return hashlib.sha256(chain + _BLOCK_TAG + block_bytes(wire_block)).digest()


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
) -> tuple[bytes, str | None]:
    """Chain over wire ``messages`` exactly as sent, leaving out the ``(i, j)`` in ``skip``.

    Every message contributes its boundary, even one left empty by ``skip``. Returns the final
    chain and the role of the last message (``None`` for no message).
    """
    chain = start
    last_role: str | None = None
    for i, message in enumerate(messages):
        role = str(message.get("role"))
        chain = feed_boundary(chain, role)
        last_role = role
        for j, block in enumerate(wire_content(message.get("content", []))):
            if (i, j) not in skip:
                chain = feed_block(chain, block)
    return chain, last_role
