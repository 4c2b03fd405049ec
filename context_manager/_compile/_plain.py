"""The plain user message rendered without the general builder (``render_plain``).

Half the messages of a working history are the user's: text, or the results answering the
open tool round exactly. Nothing in them is judged, so their render is fixed by what they hold;
``render_plain`` renders such a message straight into the state and leaves every other message
(a notice, a kind, a merge, whitespace, a stray or missing result, a render that still keeps
the version-1 chain) to the general path (``_message.render_judged``), which it must match exactly:
the same messages, provenance, token counts, spans, chain and encoded pieces
(``tests/test_render_plain.py`` renders the same histories both ways). O(size of the message).
"""

from __future__ import annotations

from typing import Any

from context_manager._binding._chain import block_bytes, feed_tagged
from context_manager._model._content import TextBlock, ToolResultBlock, block_to_wire
from context_manager._model._messages import StoredMessage
from context_manager._model._results import Source

from ._render import _TAGS, RenderContext, RenderState, Span, _attach, message_pieces
from ._strategies import estimate_from_chars, estimate_tokens, wire_chars

_USER_TAG = _TAGS["user"]


def render_plain(state: RenderState, ctx: RenderContext, message: StoredMessage) -> int | None:
    """Render ``message`` when it is a plain user message (see the module docstring) and
    return the canonical bytes it newly encoded into ``ctx.pieces`` (as ``render_message``);
    ``None``: not plain, nothing done."""
    if not _plain(state, message):
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
        chain = feed_tagged(chain, _USER_TAG, got[1])  # text or a result: never thinking
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
    source = Source(message.id, {j: j for j in range(len(kept))}, {})
    _attach(state, ctx, "user", kept, "message", source, False, tokens)
    state.spans.append(Span(sequence, tokens, _no_results(content)))
    return encoded if ctx.pieces is not None else 0


def _plain(state: RenderState, message: StoredMessage) -> bool:
    """Whether the general path would send every block of ``message`` as it is, in a new user
    message, with nothing closed before it and nothing logged."""
    metadata = message.metadata
    if message.role != "user" or metadata.system_notice or metadata.kind is not None:
        return False
    if state.blank_reply or state.legacy_chain is not None or not message.content:
        return False
    if state.messages and state.messages[-1]["role"] == "user":
        return False  # merged into the last message
    answered: set[str] = set()
    for block in message.content:
        if type(block) is TextBlock:
            if block.extra or not block.text.strip():
                return False  # its fields may say otherwise; left out, or sent only beside more
        elif type(block) is ToolResultBlock:
            tool_use_id = block.tool_use_id
            if block.extra or tool_use_id in answered or tool_use_id not in state.open_tool_uses:
                return False  # a stray or repeated result is left out
            answered.add(tool_use_id)
        else:
            return False
    return len(answered) == len(state.open_tool_uses)  # none missing: no synthetic result


def _no_results(content: tuple[Any, ...]) -> bool:
    """True when no block of ``content`` is a tool result (a render may start there)."""
    return not any(type(block) is ToolResultBlock for block in content)
