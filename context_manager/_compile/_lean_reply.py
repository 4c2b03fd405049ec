"""The common reply rendered without the general builder (``render_reply``).

Half the messages of a working history are replies: text, thinking and tool calls, after a user
message, with nothing open before them. ``render_reply`` renders such a reply straight into the
state, judging its thinking as the general path does (``_judge.judge_thinking``), and leaves
every other message (a notice, a kind, a merge, a round or system message to close first, blank
or empty text, another block type, a reasoning sidecar, observe mode, a render that still keeps
the version-1 chain) to ``_message.render_judged``, which it must match exactly: the same
messages, provenance, token counts, spans, chain, strips and encoded pieces
(``tests/compile/test_render_plain.py`` renders the same histories both ways). O(size of the
message).
"""

from __future__ import annotations

from hashlib import sha256 as _sha256
from typing import Any

from context_manager._binding._chain import THINKING_TYPES as WIRE_THINKING
from context_manager._binding._chain import block_bytes
from context_manager._model._canonical import signature_digest
from context_manager._model._content import (
    Block,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    block_to_wire,
    signature_of,
)
from context_manager._model._messages import StoredMessage
from context_manager._model._results import (
    NO_SIGNATURES,
    ProvenanceEntry,
    Source,
    shared_blocks,
)
from context_manager._reasoning._capture import resolve_without_sidecar

from ._judge import judge_thinking
from ._render import (
    _TAGS,
    Piece,
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    append_message,
    leave_out,
    message_pieces,
)
from ._strategies import estimate_from_chars, estimate_tokens, wire_chars

_TAG = _TAGS["assistant"]

_THINKING = (ThinkingBlock, RedactedThinkingBlock)

ENABLED = True
"""Off: every reply takes the general path (the tests compare the two)."""


def render_reply(state: RenderState, ctx: RenderContext, message: StoredMessage) -> int | None:
    """Render ``message`` when it is a common reply (see the module docstring) and return
    the canonical bytes it newly encoded into ``ctx.pieces`` (as ``render_message``);
    ``None``: not one, nothing done."""
    if not _lean(state, ctx, message):
        return None
    release = ctx.releases.get(message.id)
    memo = message_pieces(ctx.pieces, message)
    sent_at = len(state.messages)
    encoded, chars, chain, last_kept = 0, 0, state.chain, state.last_kept
    kept: list[dict[str, Any]] = []
    mapping: dict[int, int] = {}
    signatures: dict[int, str] = {}
    tool_uses: dict[str, str] = {}
    for index, block in enumerate(message.content):
        thinking = type(block) in _THINKING
        if thinking and release is not None and release.reported_at(index):
            continue  # released and reported: never sent, never judged again
        got: Piece | None = memo[index]
        if got is None:
            wire = block_to_wire(block)
            got = memo[index] = (wire, block_bytes(wire), wire_chars(wire))
            encoded += len(got[1])
        if thinking:
            if state.judged is not None:
                state.judged.append((message.id, index, chain))
            verdict, changed = judge_thinking(
                ctx, message, index, block, got[0], chain, last_kept, got[1]
            )
            if verdict != "keep" and verdict != "unread":
                leave_out(state, message.id, index, verdict, changed, release)
                continue
            spot = (message.id, index)
            last_kept = signatures[len(kept)] = signature_digest(signature_of(block))
            if verdict == "keep":
                state.kept_thinking.add(spot)
            else:  # sent, but the requested model cannot read it: lost for this request
                state.left_out[spot] = StripEntry(message.id, index, "head", changed)
                state.unread[spot] = f"messages.{sent_at}.content.{len(kept)}"
        else:
            if type(block) is ToolUseBlock:
                tool_uses[block.id] = block.name
            if got[0].get("type") not in WIRE_THINKING:  # an unknown field may say thinking
                chain = _sha256(chain + _TAG + got[1]).digest()  # ``feed_tagged``
        mapping[len(kept)] = index
        chars += got[2]
        kept.append(got[0])
    source = Source(message.id, shared_blocks(mapping), signatures or NO_SIGNATURES)
    _finish(state, ctx, message, kept, source, chars)
    state.chain, state.last_kept = chain, last_kept
    if tool_uses:
        state.open_tool_uses = tool_uses
    return encoded if ctx.pieces is not None else 0


def _lean(state: RenderState, ctx: RenderContext, message: StoredMessage) -> bool:
    """Whether the general path would render ``message`` as one new assistant message, with
    nothing closed before it, each block kept or judged and nothing logged."""
    metadata = message.metadata
    if not ENABLED or message.role != "assistant" or metadata.kind is not None:
        return False
    if metadata.system_notice or ctx.observe or state.legacy_chain is not None:
        return False
    if ctx.resolve is not None and ctx.resolve is not resolve_without_sidecar:
        return False  # a sidecar may turn a block into another (no extra: as it is, else)
    if state.open_tool_uses or state.pending_system or not message.content:
        return False
    if not state.messages or state.messages[-1]["role"] != "user":
        return False  # merged into the last message, or the first one
    return _lean_blocks(message.content)


def _lean_blocks(content: tuple[Block, ...]) -> bool:
    """Whether every block is text with something to say, thinking or a tool call, none with
    extra fields (which could change its wire type or text, ``block_to_wire``)."""
    for block in content:
        cls = type(block)
        if cls is TextBlock:
            if not block.text or block.text.isspace():  # type: ignore[union-attr]
                return False  # left out, or sent only beside more
        elif cls is not ToolUseBlock and cls not in _THINKING:
            return False
        elif cls in _THINKING and not signature_of(block):
            return False  # unsigned: left out, and logged
        if block.extra:  # type: ignore[union-attr]
            return False
    return True


def _finish(
    state: RenderState,
    ctx: RenderContext,
    message: StoredMessage,
    kept: list[dict[str, Any]],
    source: Source,
    chars: int,
) -> None:
    """Attach the kept blocks as a new message and record the reply's span."""
    sequence = message.sequence
    if sequence > state.last_sequence:
        state.last_sequence = sequence
    state.sequences[message.id] = sequence
    state.blank_reply = False
    tokens = 0
    if kept:
        tokens = (
            estimate_from_chars("assistant", chars)
            if ctx.estimator is estimate_tokens
            else ctx.estimator({"role": "assistant", "content": kept})
        )
        entry = ProvenanceEntry("message", (source,))
        append_message(state, {"role": "assistant", "content": kept}, entry, tokens)
    state.spans.append(Span(sequence, tokens, False))
