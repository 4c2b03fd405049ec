"""The chain: a running digest of a request's non-thinking content, as sent, block by block.

Pure functions. Each block enters the chain with the role of the message it stands in, so the
chain before a block depends only on the ``(role, block)`` sequence before it: merging or
splitting consecutive same-role messages, JSON key order and ``cache_control`` never change it.
Thinking blocks never enter it: earlier thinking is not part of a block's prefix (provider rule 1);
their order is checked apart (``_validity.in_order``). A thinking block's seal binds its chain and
its own canonical form, so editing the block itself breaks its seal too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from context_manager._model._canonical import canonical_json, json_string, signature_digest

CHAIN_SEED = hashlib.sha256(b"context-manager chain v3").digest()
"""The chain of an empty request."""

LEGACY_CHAIN_SEED = hashlib.sha256(b"context-manager chain v2").digest()
"""The chain of an empty request for version-1 stamps, whose chain ran over every block sent
before a thinking block, earlier thinking included (``_validity.judge_legacy``)."""

_BLOCK_TAG = b"\x02"
_SEAL_TAG = b"\x03"
_OWN_TAG = b"\x04"


_TEXT_PAIRS: dict[str, tuple[str, str]] = {
    "thinking": ("signature", "thinking"),
    "tool_result": ("content", "tool_use_id"),
}
"""Common blocks with two fields beside ``type``, in key order (``type`` sorts last)."""


def block_bytes(wire_block: Mapping[str, Any]) -> bytes:
    """The canonical bytes a block contributes (``cache_control`` and key order ignored)."""
    if type(wire_block) is dict:
        # the commonest blocks, all their fields text: the canonical form written out directly
        kind, size = wire_block.get("type"), len(wire_block)
        if kind == "text" and size == 2:
            text = wire_block.get("text")
            if type(text) is str:
                return ('{"text":' + json_string(text) + ',"type":"text"}').encode()
        elif size == 3 and type(kind) is str and kind in _TEXT_PAIRS:
            first, second = _TEXT_PAIRS[kind]
            one, two = wire_block.get(first), wire_block.get(second)
            if type(one) is str and type(two) is str:
                return (
                    f'{{"{first}":{json_string(one)},"{second}":{json_string(two)}'
                    f',"type":"{kind}"}}'
                ).encode()
    return canonical_json(wire_block).encode()


def feed_block(chain: bytes, role: str, wire_block: Mapping[str, Any]) -> bytes:
    """The chain after ``wire_block``, sent in a message of ``role``."""
    return feed_tagged(chain, block_tag(role), block_bytes(wire_block))


def block_tag(role: str) -> bytes:
    """What stands between the chain and a block's canonical bytes in a message of ``role``."""
    return _BLOCK_TAG + role.encode() + b"\x00"


def feed_tagged(chain: bytes, tag: bytes, canonical: bytes) -> bytes:
    """``feed_block`` for a block whose ``block_bytes`` are at hand (kept from an earlier
    render: nothing is encoded again), with its role's ``block_tag`` (made once per message)."""
    return hashlib.sha256(chain + tag + canonical).digest()


def seal(chain: bytes, wire_block: Mapping[str, Any]) -> str:
    """The stamp of a thinking block that stands after ``chain``."""
    return seal_bytes(chain, block_bytes(wire_block))


def own_digest(canonical: bytes) -> str:
    """A digest of a thinking block alone (its ``block_bytes``): whether the block is as it was
    made, whatever came before it (a model that runs no prefix check reads only this)."""
    return hashlib.sha256(_OWN_TAG + canonical).hexdigest()[:32]


def seal_bytes(chain: bytes, canonical: bytes) -> str:
    """``seal`` for a block whose ``block_bytes`` are at hand."""
    return hashlib.sha256(chain + _SEAL_TAG + canonical).hexdigest()


THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
"""Wire block types that are thinking: never part of the chain."""


def is_wire_thinking(wire_block: Mapping[str, Any]) -> bool:
    """True for a wire ``thinking`` or ``redacted_thinking`` block."""
    return wire_block.get("type") in THINKING_TYPES


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
    """Chain over wire ``messages`` exactly as sent, thinking and the ``(i, j)`` in ``skip``
    left out."""
    chain = start
    for i, message in enumerate(messages):
        role = str(message.get("role"))
        for j, block in enumerate(wire_content(message.get("content", []))):
            if (i, j) not in skip and not is_wire_thinking(block):
                chain = feed_block(chain, role, block)
    return chain


def last_signature(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The signature digest of the newest signed thinking block in ``messages``, or ``None``.
    O(messages after it)."""
    for i in range(len(messages) - 1, -1, -1):
        content = wire_content(messages[i].get("content", []))
        for j in range(len(content) - 1, -1, -1):
            block = content[j]
            if not is_wire_thinking(block):
                continue
            signature = block.get("signature") or block.get("data")
            if signature:
                return signature_digest(str(signature))
    return None
