"""Stamping a reply: the seal and predecessor of each thinking block, from the request that
produced it.

Pure. The chain runs over the request's non-thinking content as the model saw it: the compiled
messages, then any messages the host appended; then the reply's own earlier blocks. A block's
predecessor is the nearest thinking block before it in that request as sent: a block the
provider dropped (an unreadable model, another organization) is still in the request, so it
still counts (provider rules 4, 8). A stamp (version 2) names the producing model and binds the
head's digests too. Version-1 stamps sealed every block sent before a thinking block, earlier
thinking included: they verify only where all of that is sent as it was
(``_validity.judge_legacy``). Reading a stored stamp is ``_model._stamps``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from context_manager._model._canonical import signature_digest
from context_manager._model._content import Block, block_to_wire, is_thinking, signature_of
from context_manager._model._errors import InvalidType
from context_manager._model._messages import StoredMessage
from context_manager._model._results import CompileResult
from context_manager._model._stamps import BlockStamp, Stamp

from ._chain import (
    block_bytes,
    chain_of_messages,
    feed_block,
    last_signature,
    own_digest,
    seal_bytes,
    wire_content,
)


@attrs.frozen
class ReplyStamp:
    """A reply's stamp, its signature digests, and the thinking blocks with no signature."""

    stamp: Stamp
    signatures: tuple[str, ...]
    unsigned: tuple[int, ...]


def stamp_reply(
    blocks: Sequence[Block],
    result: CompileResult,
    appended: Sequence[object],
) -> ReplyStamp:
    """Stamp ``blocks`` (a reply to ``result``'s request plus ``appended``) as it was sent.

    What the provider dropped does not change the stamp: a dropped block was still sent, and
    the order is recorded over the request as sent.

    Raises:
        TypeError: an appended message is neither a ``StoredMessage`` nor a wire dict.
    """
    extra_messages = [wire_message(item) for item in appended]
    token = result._token
    chain = chain_of_messages(extra_messages, start=token.end_chain)
    predecessor = last_signature(extra_messages) or token.end_predecessor
    blocks_stamped: dict[int, BlockStamp] = {}
    signatures: list[str] = []
    unsigned: list[int] = []
    for index, block in enumerate(blocks):
        wire = block_to_wire(block)
        if is_thinking(block):
            signature = signature_of(block)
            if signature:
                canonical = block_bytes(wire)
                blocks_stamped[index] = BlockStamp(
                    seal_bytes(chain, canonical), predecessor, own_digest(canonical)
                )
                predecessor = signature_digest(signature)
                signatures.append(predecessor)
            else:
                unsigned.append(index)
        else:
            chain = feed_block(chain, "assistant", wire)
    stamp = Stamp(
        model=str(result.request.get("model", "")),
        head=dict(token.head_digests),
        blocks=blocks_stamped,
        owns=True,  # each block alone: judged so on a model that runs no prefix check
        start=token.start_sequence,  # where its window started (a later branch's start)
    )
    return ReplyStamp(stamp, tuple(signatures), tuple(unsigned))


def wire_message(item: object) -> dict[str, Any]:
    """An appended message as sent: a ``StoredMessage`` or a wire dict with a ``role``."""
    if isinstance(item, StoredMessage):
        return {"role": item.role, "content": [block_to_wire(b) for b in item.content]}
    if isinstance(item, dict) and "role" in item:
        return {"role": str(item["role"]), "content": wire_content(item.get("content", []))}
    raise InvalidType(
        f"appended message {item!r} must be a StoredMessage or a wire dict with a 'role'"
    )
