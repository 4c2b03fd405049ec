"""Rendering one stored message into the incremental render (``render_message``).

O(size of the message): nothing earlier is re-hashed or re-rendered. The message is routed
first (a summary, a ``head-change``, a system message held for its place, the turns closed
around it), then its blocks are kept or judged one by one by a ``_Message`` builder, then
attached (merged into the last message when the role repeats). The invariants are
``RenderState._check``'s (see ``_render``).
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import sha256 as _sha256
from typing import Any

from context_manager._binding._chain import (
    THINKING_TYPES as WIRE_THINKING,
)
from context_manager._binding._chain import (
    block_bytes,
    block_tag,
    feed_block,
    feed_tagged,
    is_wire_thinking,
)
from context_manager._model._canonical import signature_digest
from context_manager._model._content import (
    THINKING_TYPES,
    Block,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_to_wire,
    signature_of,
)
from context_manager._model._log import library_logger
from context_manager._model._messages import HEAD_CHANGE_KIND, StoredMessage
from context_manager._model._results import (
    NO_SIGNATURES,
    ProvenanceEntry,
    ProvenanceKind,
    Source,
    shared_blocks,
)

from ._judge import judge_thinking
from ._lean_reply import render_reply
from ._observe import predicted_only
from ._plain import render_plain
from ._render import (
    _EXACT,
    _TAGS,
    Piece,
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    _attach,
    _blank_only,
    _blank_wire,
    _empty_reply,
    _hold_system,
    _place_system,
    _push,
    _synthetic_results,
    append_message,
    leave_out,
    message_pieces,
    rendered_role,
)
from ._strategies import estimate_from_chars, estimate_tokens, wire_chars

log = library_logger("context_manager.render")


def render_message(state: RenderState, ctx: RenderContext, message: StoredMessage) -> int:
    """Extend ``state`` by one stored message, judging its thinking in place.

    Returns:
        The canonical bytes of the blocks it newly encoded into ``ctx.pieces`` (0 without them):
        what keeping the window's encoded blocks costs grows by that much.
    """
    if message.role == "user":  # a plain one has nothing to judge (``_plain``)
        plain = render_plain(state, ctx, message)
        if plain is not None:
            return plain
    elif message.role == "assistant":  # a common reply (``_lean_reply``)
        lean = render_reply(state, ctx, message)
        if lean is not None:
            return lean
    return render_judged(state, ctx, message)


def render_judged(state: RenderState, ctx: RenderContext, message: StoredMessage) -> int:
    """``render_message`` by the general path, for any message: routed, then built block by
    block and judged (``_plain.render_plain`` matches it on the messages it takes)."""
    role = _route(state, ctx, message)
    if role is None:
        return 0
    built = _Message(state, ctx, message, role)
    for index, block in enumerate(message.content):
        built.block(index, block)
    return built.finish()


def _route(state: RenderState, ctx: RenderContext, message: StoredMessage) -> str | None:
    """The role ``message`` renders with, after closing what precedes it (a blank reply, an
    open tool round, system messages waiting for an assistant turn); ``None``: nothing more to
    render (a summary, a change already in the head, a system message held for its place)."""
    sequence = message.sequence
    if sequence > state.last_sequence:
        state.last_sequence = sequence
    state.sequences[message.id] = sequence
    metadata = message.metadata
    if metadata.kind in ("summary", "compaction"):
        return None
    if metadata.kind == HEAD_CHANGE_KIND:
        if not ctx.appends or sequence <= ctx.anchor_sequence:
            state.spans.append(Span(sequence, 0, False))
            return None  # part of the anchored head, or changes are not appended: the head says it
        sent = metadata.extra.get("sent")
        state.last_change = dict(sent) if isinstance(sent, Mapping) else state.last_change
    notice = message.role == "system" or metadata.system_notice
    role = rendered_role(message, state, ctx) if notice else message.role
    if role == "system":
        _hold_system(state, ctx, message)
        return None
    _close_before(state, ctx, role)
    return role


def _close_before(state: RenderState, ctx: RenderContext, role: str) -> None:
    """Close what a message of ``role`` cannot follow as it is."""
    last_role = state.messages[-1]["role"] if state.messages else None
    if role == "user" and state.blank_reply and last_role == "user":
        _push(state, ctx, "assistant", [_empty_reply()], "synthetic", None)
    state.blank_reply = False
    follows_reply = role == "assistant" and last_role == "assistant"
    if state.open_tool_uses and role != "user" and not follows_reply:
        # a reply stored right after a reply merges with it; the round stays open for both
        _push(state, ctx, "user", _synthetic_results(state.open_tool_uses), "synthetic", None)
        state.open_tool_uses = {}
    after_user = bool(state.messages) and state.messages[-1]["role"] == "user"
    if role == "assistant" and state.pending_system and after_user:
        _place_system(state, ctx)


class _Message:
    """One stored message being rendered: the blocks it keeps, its chains and its counts."""

    __slots__ = (
        "answered",
        "blank",
        "chain",
        "chars",
        "clean",
        "counting",
        "ctx",
        "encoded",
        "kept",
        "last_kept",
        "legacy",
        "mapping",
        "memo",
        "merging",
        "message",
        "new_tool_uses",
        "notice",
        "offset",
        "role",
        "signatures",
        "state",
        "tag",
    )

    def __init__(
        self, state: RenderState, ctx: RenderContext, message: StoredMessage, role: str
    ) -> None:
        self.state, self.ctx, self.message, self.role = state, ctx, message, role
        self.notice = message.role == "system" or message.metadata.system_notice
        last = state.messages[-1] if state.messages else None
        self.merging = last is not None and last["role"] == role
        self.offset = len(last["content"]) if last is not None and self.merging else 0
        self.chain = state.chain
        self.legacy = state.legacy_chain  # kept only while the render holds version-1 stamps
        self.last_kept = state.last_kept
        self.kept: list[dict[str, Any]] = []
        self.mapping: dict[int, int] = {}
        self.signatures: dict[int, str] = {}
        self.answered: set[str] = set()
        self.new_tool_uses: dict[str, str] = {}
        self.memo = message_pieces(self.ctx.pieces, self.message)
        self.encoded = 0  # the bytes of the pieces put in ``memo``
        self.counting = ctx.estimator is estimate_tokens  # the default: counted per block, kept
        self.chars = 0
        self.tag = _TAGS.get(role) or block_tag(role)
        self.clean = message.role == "user"  # and no tool result: a render may start here
        self.blank = _blank_only(message.content)  # whitespace is sent only beside other content
        if role == "user" and state.open_tool_uses:
            self._answer_missing()

    def _answer_missing(self) -> None:
        """Synthetic results for the open calls this user message leaves unanswered: a call
        answered with text alone is sent as stored (a forced structured-output call: the API
        took it); a round answered in part, or by a notice, is closed."""
        results = {b.tool_use_id for b in self.message.content if isinstance(b, ToolResultBlock)}
        missing = {t: n for t, n in self.state.open_tool_uses.items() if t not in results}
        if not missing or not (results or self.notice):
            return
        for wire in _synthetic_results(missing):  # no ``Piece``: encoded here
            if self.legacy is not None:  # every block sent, thinking included (version 1)
                self.legacy = feed_block(self.legacy, self.role, wire)
            if not is_wire_thinking(wire):
                self.chain = feed_block(self.chain, self.role, wire)
            if self.counting:
                self.chars += wire_chars(wire)
            self.kept.append(wire)

    def block(self, index: int, block: Block) -> None:
        """Keep, judge or leave out block ``index``."""
        cls = type(block)
        if cls not in _EXACT:  # a subclass: judged as its block class
            cls = next((c for c in _EXACT if isinstance(block, c)), cls)
        if cls is TextBlock:
            text = block.text  # type: ignore[union-attr]
            if not text or (self.blank and text.isspace()):
                return  # the API refuses "" and a message of whitespace only
        elif self.notice:
            self.clean = self.clean and cls is not ToolResultBlock
            return  # a notice sends its text only
        elif cls in THINKING_TYPES:
            self.thinking(index, block)
            return
        elif cls is ToolResultBlock:
            self.clean = False
            if not self._answers(index, block.tool_use_id):  # type: ignore[union-attr]
                return
        elif cls is ToolUseBlock:
            self.new_tool_uses[block.id] = block.name  # type: ignore[union-attr]
        got = self.memo[index]
        if got is None:
            wire = block_to_wire(block)
            got = self.memo[index] = (wire, block_bytes(wire), wire_chars(wire))
            self.encoded += len(got[1])
        wire, canonical, size = got
        if cls is UnknownBlock and wire.get("type") in WIRE_THINKING:
            # thinking without its signature (or text): the API refuses it (provider rule 12)
            log.info("malformed_thinking_left_out", message_id=self.message.id, block=index)
            return
        if wire.get("type") not in WIRE_THINKING:  # an unknown block may still say thinking
            self.chain = _sha256(self.chain + self.tag + canonical).digest()  # ``feed_tagged``
        if self.legacy is not None:
            self.legacy = feed_tagged(self.legacy, self.tag, canonical)
        self.mapping[self.offset + len(self.kept)] = index
        self.chars += size
        self.kept.append(wire)

    def _answers(self, index: int, tool_use_id: str) -> bool:
        """Whether a tool result is sent: it answers a call still open, once."""
        if self.role != "user" or tool_use_id not in self.state.open_tool_uses:
            log.info("stray_tool_result_left_out", message_id=self.message.id, block=index)
            return False
        if tool_use_id in self.answered:
            return False
        self.answered.add(tool_use_id)
        return True

    def thinking(self, index: int, block: Block) -> None:
        """Judge a thinking block and keep it, or record why it is left out."""
        message, state, ctx = self.message, self.state, self.ctx
        if message.role != "assistant":
            log.info("thinking_outside_reply_left_out", message_id=message.id, block=index)
            return
        release = ctx.releases.get(message.id)
        if release is not None and release.reported_at(index):
            return  # released and reported: never sent, never asked of the sidecar again
        resolved = ctx.resolve(block) if ctx.resolve is not None else block
        if resolved is not None and not signature_of(resolved):  # the API refuses it (rule 12)
            log.info("unsigned_thinking_left_out", message_id=message.id, block=index)
        if resolved is None:  # its text is gone for good: released at commit
            if state.judged is not None:
                state.judged.append((message.id, index, None))
            state.unreported.append(StripEntry(message.id, index, "unstamped", kind="release"))
            return
        same = resolved is block or resolved == block
        got = self.memo[index] if same else None
        if got is None:
            wire = block_to_wire(resolved)
            got = (wire, block_bytes(wire), wire_chars(wire))
            if same:  # the sidecar's text is never kept (it can be erased)
                self.memo[index] = got
                self.encoded += len(got[1])
        wire, canonical, _ = got
        if state.judged is not None:
            state.judged.append((message.id, index, self.chain))
        verdict, changed = judge_thinking(
            ctx, message, index, resolved, wire, self.chain, self.last_kept, canonical, self.legacy
        )
        if predicted_only(ctx, message, verdict, canonical):  # observe mode: sent anyway
            state.predicted[(message.id, index)] = self._path()
            self._send_thinking(index, resolved, got, True, changed)
        elif verdict == "keep" or verdict == "unread":
            self._send_thinking(index, resolved, got, verdict == "keep", changed)
        else:
            leave_out(state, message.id, index, verdict, changed, release)

    def _path(self) -> str:
        """The path (``messages.i.content.j``) the next block kept is sent at."""
        sent_at = len(self.state.messages) - 1 if self.merging else len(self.state.messages)
        return f"messages.{sent_at}.content.{self.offset + len(self.kept)}"

    def _send_thinking(
        self, index: int, block: Block, got: Piece, readable: bool, changed: tuple[str, ...]
    ) -> None:
        """Send a judged thinking block (``readable``: the model reads it, else the provider
        drops it: lost for this request only)."""
        state, message = self.state, self.message
        wire, canonical, size = got
        at = self.offset + len(self.kept)
        self.last_kept = signature_digest(signature_of(block))
        self.signatures[at] = self.last_kept
        spot = (message.id, index)
        if readable:
            state.kept_thinking.add(spot)
        else:
            state.left_out[spot] = StripEntry(message.id, index, "head", changed)
            state.unread[spot] = self._path()
        self.mapping[at] = index
        self.chars += size
        self.kept.append(wire)
        if self.legacy is not None:
            self.legacy = feed_tagged(self.legacy, self.tag, canonical)

    def _source(self) -> Source:
        """The message's source with its indexes relative to its own first block (``_attach``
        shifts them past the blocks of a message it merges into)."""
        shift = self.offset
        if not shift:
            signatures = self.signatures or NO_SIGNATURES
            return Source(self.message.id, shared_blocks(self.mapping), signatures)
        blocks = {j - shift: b for j, b in self.mapping.items()}
        return Source(self.message.id, blocks, {j - shift: s for j, s in self.signatures.items()})

    def finish(self) -> int:
        """Attach what was kept and record the message's span; the bytes newly encoded."""
        state, ctx, role, kept = self.state, self.ctx, self.role, self.kept
        if kept and _blank_wire(kept):  # its other blocks were left out: nothing to send
            kept, self.mapping = [], {}
        if role == "assistant" and not kept and not self.merging and self.blank:
            # a reply that said nothing: the turn is kept (EMPTY_REPLY_TEXT)
            state.blank_reply = bool(self.message.content)
        if role == "user":
            if state.open_tool_uses:
                state.open_tool_uses = {}
        elif self.new_tool_uses:
            state.open_tool_uses = {**state.open_tool_uses, **self.new_tool_uses}
        tokens = 0
        if kept:
            tokens = (
                estimate_from_chars(role, self.chars)
                if self.counting
                else ctx.estimator({"role": role, "content": kept})
            )
            state.chain = self.chain
            state.legacy_chain = self.legacy
            state.last_kept = self.last_kept
            kind: ProvenanceKind = "notice" if self.notice else "message"
            source = self._source()
            if self.merging:
                _attach(state, ctx, role, kept, kind, source, True, tokens)
            else:  # estimated above
                message = {"role": role, "content": kept}
                append_message(state, message, ProvenanceEntry(kind, (source,)), tokens)
        state.spans.append(Span(self.message.sequence, tokens, self.clean))
        return self.encoded if ctx.pieces is not None else 0
