"""The plain user message rendered without the general builder (``render_plain``).

Half the messages of a working history are the user's: text, or the results answering the
open tool round exactly. Nothing in them is judged, so their render is fixed by what they hold;
``render_plain`` renders such a message straight into the state and leaves every other message
(a notice, a kind, a merge, whitespace, a stray or missing result, a render that still keeps
the version-1 chain) to the general path (``_message.render_judged``), which it must match exactly:
the same messages, provenance, token counts, spans, chain and encoded pieces
(``tests/compile/test_render_plain.py`` renders the same histories both ways). O(size of the
message).
"""

from __future__ import annotations

from hashlib import sha256 as _sha256
from typing import Any

from context_manager._binding._chain import block_bytes
from context_manager._model._content import TextBlock, ToolResultBlock, block_to_wire
from context_manager._model._messages import StoredMessage
from context_manager._model._results import NO_SIGNATURES, ProvenanceEntry, Source, whole_blocks

from ._render import _TAGS, RenderContext, RenderState, Span, append_message, message_pieces
from ._strategies import estimate_from_chars, estimate_tokens, wire_chars

_USER_TAG = _TAGS["user"]


def render_plain(state: RenderState, ctx: RenderContext, message: StoredMessage) -> int | None:
    """Render ``message`` when it is a plain user message (see the module docstring) and
    return the canonical bytes it newly encoded into ``ctx.pieces`` (as ``render_message``);
    ``None``: not plain, nothing done."""
    clean = _plain(state, message)
    if clean is None:
        return None
    content = message.content
    memo = message_pieces(ctx.pieces, message)
    encoded, chars, chain = 0, 0, state.chain
    kept: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        got = memo[index]
        if got is None:
            wire = block_to_wire(block)
            got = memo[index] = (wire, block_bytes(wire), wire_chars(wire))
            encoded += len(got[1])
        chain = _sha256(chain + _USER_TAG + got[1]).digest()  # ``feed_tagged``: never thinking
        chars += got[2]
        kept.append(got[0])
    sequence = message.sequence
    if sequence > state.last_sequence:
        state.last_sequence = sequence
    state.sequences[message.id] = sequence
    state.blank_reply = False
    if state.open_tool_uses:  # answered, every call
        state.open_tool_uses = {}
    tokens = (
        estimate_from_chars("user", chars)
        if ctx.estimator is estimate_tokens
        else ctx.estimator({"role": "user", "content": kept})
    )
    state.chain = chain
    entry = ProvenanceEntry(
        "message", (Source(message.id, whole_blocks(len(kept)), NO_SIGNATURES),)
    )
    append_message(state, {"role": "user", "content": kept}, entry, tokens)  # never a merge
    state.spans.append(Span(sequence, tokens, clean))
    return encoded if ctx.pieces is not None else 0


def _plain(state: RenderState, message: StoredMessage) -> bool | None:
    """Whether a render may start at ``message`` (it holds no tool result) when the general
    path would send every block of it as it is, in a new user message, with nothing closed
    before it and nothing logged; ``None`` when it would not."""
    metadata = message.metadata
    if message.role != "user" or metadata.system_notice or metadata.kind is not None:
        return None
    if state.blank_reply or state.legacy_chain is not None or not message.content:
        return None
    if state.messages and state.messages[-1]["role"] == "user":
        return None  # merged into the last message
    answered: set[str] = set()
    for block in message.content:
        if type(block) is TextBlock:
            if block.extra or not block.text.strip():
                return None  # its fields may say otherwise; left out, or sent only beside more
        elif type(block) is ToolResultBlock:
            tool_use_id = block.tool_use_id
            if block.extra or tool_use_id in answered or tool_use_id not in state.open_tool_uses:
                return None  # a stray or repeated result is left out
            answered.add(tool_use_id)
        else:
            return None
    if len(answered) != len(state.open_tool_uses):
        return None  # one is missing: a synthetic result is added
    return not answered
