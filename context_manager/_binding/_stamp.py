"""Stamping a reply: the seal of each thinking block against the request that produced it.

Pure. The chain runs over the request as the model saw it: the compiled messages, then any
messages the host appended, with the blocks the provider reported dropped left out; then the
reply's own earlier blocks. A stamp binds the head's digests too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from context_manager._model._canonical import signature_digest
from context_manager._model._content import Block, block_to_wire, is_thinking, signature_of
from context_manager._model._messages import StoredMessage
from context_manager._model._results import CompileResult

from ._chain import chain_of_messages, feed_block, seal, wire_content
from ._drops import parse_input_transformations

STAMP_VERSION = 1
"""Written into every stamp, so a later format can tell old stamps apart."""


@attrs.frozen
class ReplyStamp:
    """A reply's stamp, its signature digests, and the thinking blocks with no signature."""

    stamp: dict[str, Any]
    signatures: tuple[str, ...]
    unsigned: tuple[int, ...]


def stamp_reply(
    blocks: Sequence[Block],
    result: CompileResult,
    appended: Sequence[object],
    response: object,
) -> ReplyStamp:
    """Stamp ``blocks`` (a reply to ``result``'s request plus ``appended``) as the model saw it.

    ``response`` is what the provider answered; its ``input_transformations`` name the drops.

    Raises:
        TypeError: an appended message is neither a ``StoredMessage`` nor a wire dict.
    """
    extra_messages = [wire_message(item) for item in appended]
    sent = [*result.request["messages"], *extra_messages]
    dropped = dropped_paths(response, sent)
    if dropped:
        chain = chain_of_messages(sent, skip=dropped)
    else:
        chain = chain_of_messages(extra_messages, start=result.end_chain)
    seals: dict[str, str] = {}
    signatures: list[str] = []
    unsigned: list[int] = []
    for index, block in enumerate(blocks):
        wire = block_to_wire(block)
        if is_thinking(block):
            signature = signature_of(block)
            if signature:
                seals[str(index)] = seal(chain, wire)
                signatures.append(signature_digest(signature))
            else:
                unsigned.append(index)
        chain = feed_block(chain, "assistant", wire)
    stamp = {"v": STAMP_VERSION, "head": dict(result.head_digests), "seals": seals}
    return ReplyStamp(stamp, tuple(signatures), tuple(unsigned))


def wire_message(item: object) -> dict[str, Any]:
    """An appended message as sent: a ``StoredMessage`` or a wire dict with a ``role``."""
    if isinstance(item, StoredMessage):
        return {"role": item.role, "content": [block_to_wire(b) for b in item.content]}
    if isinstance(item, dict) and "role" in item:
        return {"role": str(item["role"]), "content": wire_content(item.get("content", []))}
    raise TypeError(
        f"appended message {item!r} must be a StoredMessage or a wire dict with a 'role'"
    )


def dropped_paths(message: object, sent: Sequence[dict[str, Any]]) -> frozenset[tuple[int, int]]:
    """The reported drops that name a thinking block of ``sent``: a provider path naming any
    other block (or none) is ignored, so it can never bend the reply's stamp."""
    reported = (
        message.get("input_transformations")
        if isinstance(message, dict)
        else getattr(message, "input_transformations", None)
    )
    if not reported:
        return frozenset()
    drops = parse_input_transformations(message, quiet=True)  # placement logs them once
    paths = {(d.i, d.j) for d in drops if d.i is not None and d.j is not None}
    return frozenset(
        (i, j)
        for i, j in paths
        if i < len(sent)
        and j < len(content := wire_content(sent[i].get("content", [])))
        and content[j].get("type") in ("thinking", "redacted_thinking")
    )
