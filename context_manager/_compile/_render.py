"""Rendering stored messages into API messages, one stored message at a time.

``RenderState`` is the incremental part of a compile: the rendered messages, their provenance,
token estimates, the running chain and the strips not yet reported. ``render_message`` extends
it by one stored message in O(size of that message); nothing earlier is re-hashed or re-rendered.
Invariants (``RenderState._check``): no empty message, no two adjacent messages of one role,
every ``tool_use`` is answered in the next message. The first message is the first one stored
in the render (an assistant message stays first: the API takes it as stored).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any, Literal

import attrs

from context_manager._binding._chain import (
    block_tag,
    feed_block,
    is_wire_thinking,
)
from context_manager._model._content import (
    Block,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_to_wire,
)
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._readability import Readability, documented_readability
from context_manager._model._results import ProvenanceEntry, ProvenanceKind, Source
from context_manager._model._stamps import AnyStamp
from context_manager._store._protocol import Release

log = library_logger("context_manager.render")

StripReason = Literal["head", "prefix", "gap", "unstamped", "released", "shed"]

EntryKind = Literal["left", "released", "release", "covered"]
"""``left``: left out while its reason holds (not released); ``released``: released earlier, not
yet reported; ``release``: a permanent fact found now (text that cannot be resolved, shedding),
released at commit; ``covered``: sent before a fold and now inside its summary."""

Piece = tuple[dict[str, Any], bytes, int]
"""A stored block as sent: its wire dict, its canonical bytes (``block_bytes``) and the
characters the default estimate counts in it (``wire_chars``)."""

Judged = tuple[MessageId, int, bytes | None]
"""A thinking block judged by a render: its reply, its index there, and the chain before it
(``None``: its text could not be had, ``RenderContext.resolve``)."""

Pieces = dict[MessageId, list[Piece | None]]
"""Per stored message, each block's ``Piece`` once rendered (``None``: not yet): kept between
renders so a re-render encodes and hashes only what it has not met (the wire dicts are shared
with the rendered messages, so keeping them costs only the bytes)."""


def message_pieces(pieces: Pieces | None, message: StoredMessage) -> list[Piece | None]:
    """``message``'s encoded blocks kept in ``pieces`` (a fresh list when none are kept, or
    when the kept list no longer matches its blocks)."""
    size = len(message.content)
    if pieces is None:
        return [None] * size  # kept for this render only
    memo = pieces.get(message.id)
    if memo is None or len(memo) != size:
        memo = pieces[message.id] = [None] * size
    return memo


_EXACT: frozenset[type[Any]] = frozenset(
    {
        TextBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ToolUseBlock,
        ToolResultBlock,
        ImageBlock,
        UnknownBlock,
    }
)
"""Block classes the render tells apart by ``type(block)`` (a subclass is mapped to one)."""

_TAGS = {role: block_tag(role) for role in ("user", "assistant", "system")}
"""Each role's ``block_tag``, made once."""

MISSING_RESULT_TEXT = "No result was recorded for this tool call."

EMPTY_REPLY_TEXT = "[empty reply]"
"""Stands for a reply that said nothing (one empty text block, which the API refuses) once a
user message follows it, so the turns around it stay apart (as chatlas and ellmer send)."""

SYSTEM_FIELDS = ("clear_at", "output_config")
"""Fields of a stored system message (kept in ``metadata.extra``) sent on its message."""

TOOL_CHANGES_BETA = "mid-conversation-tool-changes-2026-07-01"
INLINE_TOOLS_BETA = "inline-tools-2026-09-15"
CLEAR_AT_BETA = "mid-conversation-system-clear-at-2026-08-21"
OUTPUT_CONFIG_BETA = "mid-conversation-output-config-2026-07-01"
"""The error result given to a ``tool_use`` whose answer was never stored (e.g. after a crash)."""


@attrs.frozen
class StripEntry:
    """One thinking block left out, not yet reported."""

    message_id: MessageId
    block: int
    reason: StripReason
    changed: tuple[str, ...] = ()
    kind: EntryKind = "left"


@attrs.frozen
class Span:
    """One stored message in the render: its sequence, token estimate, and clean-start flag."""

    sequence: int
    tokens: int
    clean: bool


@attrs.frozen
class RenderContext:
    """What stays fixed during one compile's render."""

    binds: bool
    system_notices: str
    digests: Mapping[str, str]
    bound: tuple[str, ...]
    releases: Mapping[MessageId, Release]
    stamps: Mapping[MessageId, AnyStamp]
    """Each stamped reply's stamp, as the store parsed it (``_model._stamps``); absent:
    unstamped."""
    estimator: Callable[[Any], int]
    resolve: Callable[[Block], Block | None] | None = None
    """Turns a stored thinking block back into the block as sent (reasoning sidecar); ``None``
    from it means the text cannot be had, and the block is treated as unstamped."""
    model: str = ""
    """The requested model (the reader in the model check)."""
    reads: Readability = documented_readability
    """The model check ``(reader, producer) -> bool`` (provider rules 8, 9)."""
    checks_prefix: bool = True
    """The requested model runs the prefix check (provider rule 10); ``False``: only the model
    check can stop a block (``judge_unchecked``)."""
    pieces: Pieces | None = None
    """Blocks already encoded, by stored message (filled as the render meets new ones)."""
    appends: bool = False
    """Changes are appended (SPEC 7b): ``head-change`` messages after ``anchor_sequence`` render."""
    anchor_sequence: int = -1
    """``head-change`` messages at or before it are part of the anchored head (not rendered)."""
    head_changed: bool = False
    """This compile rewrites the head (a change that cannot be appended): a system or tools
    difference is then a head cause even while changes are appended."""
    observe: bool = False
    """``ThinkingBinding(enforcement="observe")``: a block left out only for its prefix, its
    order or a head change, that the model reads and that is as it was made, is sent and
    recorded as predicted to fail (``_observe.predicted_only``)."""
    unedited_below: int = 0
    """Every stored message with a lower sequence was never edited (0: none is known to be).
    A reply below it is as it was stamped, so a model that runs no prefix check keeps its
    blocks even when its stamp predates per-block digests (``judge_unchecked``)."""


@attrs.define
class RenderState:
    """The incremental render of one branch (see the module docstring for invariants)."""

    messages: list[dict[str, Any]] = attrs.field(factory=list)
    provenance: list[ProvenanceEntry] = attrs.field(factory=list)
    message_tokens: list[int] = attrs.field(factory=list)
    total_tokens: int = 0
    chain: bytes = b""
    legacy_chain: bytes | None = None
    """The chain over every block sent so far, thinking included, kept only while the render
    holds replies with version-1 stamps (``judge_legacy``)."""
    open_tool_uses: dict[str, str] = attrs.field(factory=dict)
    last_sequence: int = 0
    spans: list[Span] = attrs.field(factory=list)
    unreported: list[StripEntry] = attrs.field(factory=list)
    start: int = 0
    summary_id: MessageId | None = None
    change_serial: int = 0
    sequences: dict[MessageId, int] = attrs.field(factory=dict)
    """Stored sequence of every message the render has met (orders strips by age)."""
    last_kept: str | None = None
    """Signature digest of the newest thinking block kept so far (the order rule)."""
    left_out: dict[tuple[MessageId, int], StripEntry] = attrs.field(factory=dict)
    """Every rendered thinking block left out without a release, and why."""
    kept_thinking: set[tuple[MessageId, int]] = attrs.field(factory=set)
    """Every rendered thinking block sent that the requested model reads."""
    unread: dict[tuple[MessageId, int], str] = attrs.field(factory=dict)
    """Every rendered thinking block sent that the requested model cannot read (also in
    ``left_out``: lost for this request), and its path as sent (provider rule 8)."""
    predicted: dict[tuple[MessageId, int], str] = attrs.field(factory=dict)
    """Observe mode: every rendered thinking block sent that enforcement would leave out (the
    compiler predicts the provider reports it as ``thinking_mismatch_allowed``), and its path."""
    pending_system: list[tuple[MessageId, dict[str, Any], dict[int, int]]] = attrs.field(
        factory=list
    )
    """System messages waiting for their place (after a user message, before the next assistant
    one or at the end: provider rule 16): ``(id, message, compiled index -> stored block)``."""
    betas: set[str] = attrs.field(factory=set)
    """Betas the rendered system messages need."""
    last_change: dict[str, Any] | None = None
    """What is sent after the newest ``head-change`` message rendered (SPEC 7b), if any."""
    kept_from: int | None = None
    """The render opens with a compaction block: the stored sequence its kept turns start at
    (a window starting later has left them out, so nothing binds the anchored head)."""
    blank_reply: bool = False
    """The newest message rendered is the user's and a reply that said nothing followed it:
    the next user message is preceded by ``EMPTY_REPLY_TEXT`` as the assistant's turn."""
    judged: list[Judged] | None = None
    """Every thinking block judged so far, in render order, with the chain before it: what a
    head change re-judges without rendering again (``_rejudge``); ``None``: not recorded (a
    render not made from the window's start, or restored from an older snapshot)."""
    signed_from: int = attrs.field(default=0, eq=False)
    """No provenance entry before this index has a source with signatures (sent thinking),
    and it is at most the last entry's index: where scans for sent thinking may start
    (``_shed``). Raised only by a shed patch, which takes signatures out; a head change
    re-judged (which may send thinking again) starts from 0. Not compared: a render made
    another way is equal whatever bound it knows."""

    def copy(self) -> RenderState:
        """A copy whose lists can grow without touching this one (O(window) references)."""
        return attrs.evolve(
            self,
            messages=list(self.messages),
            provenance=list(self.provenance),
            message_tokens=list(self.message_tokens),
            open_tool_uses=dict(self.open_tool_uses),
            spans=list(self.spans),
            unreported=list(self.unreported),
            sequences=dict(self.sequences),
            left_out=dict(self.left_out),
            kept_thinking=set(self.kept_thinking),
            unread=dict(self.unread),
            predicted=dict(self.predicted),
            pending_system=list(self.pending_system),
            betas=set(self.betas),
            judged=None if self.judged is None else list(self.judged),
        )

    def _check(self) -> None:
        assert len(self.messages) == len(self.provenance) == len(self.message_tokens)
        assert self.total_tokens == sum(self.message_tokens)
        for before, after in zip(self.messages, self.messages[1:], strict=False):
            assert before["role"] != after["role"], "adjacent messages share a role"
            if after["role"] == "system":
                assert before["role"] == "user", "a system message follows a user message"
        for message in self.messages:
            assert message["content"], "empty message rendered"
        assert 0 <= self.signed_from <= max(len(self.provenance) - 1, 0)
        for entry in self.provenance[: self.signed_from]:
            assert not any(source.signatures for source in entry.sources), "signed before bound"


def _text_only(blocks: tuple[Block, ...]) -> list[tuple[int, Block]]:
    return [(b, block) for b, block in enumerate(blocks) if isinstance(block, TextBlock)]


def _blank_only(blocks: tuple[Block, ...]) -> bool:
    """True when every block is text with nothing but whitespace (or nothing)."""
    # a loop, not ``all()`` over a generator (SIM110): asked of every message rendered
    for b in blocks:  # noqa: SIM110
        if not isinstance(b, TextBlock) or b.text.strip():
            return False
    return True


def _blank_wire(blocks: list[dict[str, Any]]) -> bool:
    """True when every wire block is text with nothing but whitespace (the API refuses it)."""
    for w in blocks:  # noqa: SIM110  (as ``_blank_only``)
        if w.get("type") != "text" or str(w.get("text", "")).strip():
            return False
    return True


def leave_out(
    state: RenderState,
    message_id: MessageId,
    index: int,
    verdict: str,
    changed: tuple[str, ...],
    release: Release | None,
) -> None:
    """Record a judged thinking block that is not sent, by ``verdict``: nothing when hidden,
    a ``released`` strip from its release on, else left out while its reason holds."""
    if verdict == "hidden":
        return
    reason: StripReason = verdict  # type: ignore[assignment]  # what is not sent is a reason
    if release is not None and index >= release.from_block:
        state.unreported.append(StripEntry(message_id, index, reason, changed, kind="released"))
    else:
        state.left_out[(message_id, index)] = StripEntry(message_id, index, reason, changed)


def reported(releases: Mapping[MessageId, Release], message_id: MessageId, index: int) -> bool:
    """Whether block ``index`` of ``message_id`` is released and reported (never judged)."""
    release = releases.get(message_id)
    return release is not None and release.reported_at(index)


def releases_reported(
    state: RenderState, releases: Mapping[MessageId, Release], skip: Container[MessageId] = ()
) -> bool:
    """Whether every release of a message ``state`` rendered (``skip`` aside) is reported: a
    re-render reports a pending one again, which a render patched in place would not."""
    for message_id, release in releases.items():
        if message_id in skip or message_id not in state.sequences:
            continue
        if not (release.reported or (release.reported_from or 1 << 62) <= release.from_block):
            return False
    return True


def rendered_role(message: StoredMessage, state: RenderState, ctx: RenderContext) -> str:
    """The role ``message`` is sent with: system notices follow ``system_notices``."""
    if message.role == "system" or message.metadata.system_notice:
        return "system" if ctx.system_notices == "system" else "user"
    return message.role


def system_betas(message: Mapping[str, Any]) -> set[str]:
    """The betas a rendered ``role: "system"`` message needs (provider rules 17-19)."""
    betas: set[str] = set()
    for block in message.get("content", ()):
        tool = block.get("tool") if isinstance(block, Mapping) else None
        if isinstance(tool, Mapping):
            if tool.get("type") == "tool_definition":
                betas.add(INLINE_TOOLS_BETA)
            else:
                betas.add(TOOL_CHANGES_BETA)
    if "clear_at" in message:
        betas.add(CLEAR_AT_BETA)
    if "output_config" in message:
        betas.add(OUTPUT_CONFIG_BETA)
    return betas


def _hold_system(state: RenderState, ctx: RenderContext, message: StoredMessage) -> None:
    """Keep a stored system message, with every block and field, until its place comes."""
    blocks: list[dict[str, Any]] = []
    mapping: dict[int, int] = {}
    for index, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            if not block.text.strip():
                continue
        elif not isinstance(block, UnknownBlock):
            log.info("block_outside_its_role_left_out", message_id=message.id, block=index)
            continue
        mapping[len(blocks)] = index
        blocks.append(block_to_wire(block))
    wire: dict[str, Any] = {"role": "system", "content": blocks}
    for name in SYSTEM_FIELDS:
        if name in message.metadata.extra:
            wire[name] = message.metadata.extra[name]
    if not blocks and not wire.get("output_config"):
        state.spans.append(Span(message.sequence, 0, False))
        return
    tokens = ctx.estimator(wire)
    state.pending_system.append((message.id, wire, mapping))
    state.spans.append(Span(message.sequence, tokens, False))


def merged_system(state: RenderState) -> tuple[dict[str, Any], tuple[Source, ...]] | None:
    """The pending system messages as one message (adjacent ones merge), or ``None``."""
    if not state.pending_system:
        return None
    merged: dict[str, Any] = {"role": "system", "content": []}
    sources: list[Source] = []
    for message_id, wire, mapping in state.pending_system:
        offset = len(merged["content"])
        merged["content"].extend(wire["content"])
        for name in SYSTEM_FIELDS:
            if name in wire:
                merged[name] = wire[name]
        sources.append(Source(message_id, {j + offset: b for j, b in mapping.items()}))
    return merged, tuple(sources)


def _place_system(state: RenderState, ctx: RenderContext) -> None:
    """Render the pending system messages now: the last message is the user's."""
    found = merged_system(state)
    state.pending_system = []
    if found is None:
        return
    message, sources = found
    for wire in message["content"]:
        state.chain = feed_block(state.chain, "system", wire)
        if state.legacy_chain is not None:
            state.legacy_chain = feed_block(state.legacy_chain, "system", wire)
    state.betas |= system_betas(message)
    state.messages.append(message)
    state.provenance.append(ProvenanceEntry(kind="notice", sources=sources))
    tokens = ctx.estimator(message)
    state.message_tokens.append(tokens)
    state.total_tokens += tokens


def is_clean_start(message: StoredMessage) -> bool:
    """True when a render may start at ``message``: a user message answering no tool call."""
    return message.role == "user" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )


def _empty_reply() -> dict[str, Any]:
    return {"type": "text", "text": EMPTY_REPLY_TEXT}


def _synthetic_results(open_ids: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_result",
            "tool_use_id": tid,
            "content": MISSING_RESULT_TEXT,
            "is_error": True,
        }
        for tid in open_ids
    ]


def _push(
    state: RenderState,
    ctx: RenderContext,
    role: str,
    blocks: list[dict[str, Any]],
    kind: ProvenanceKind,
    source: Source | None,
) -> None:
    """Append (or merge) already-judged ``blocks`` (a new list) as a message of ``role`` and
    chain them."""
    if not blocks:
        return
    merging = bool(state.messages) and state.messages[-1]["role"] == role
    for wire in blocks:
        if not is_wire_thinking(wire):
            state.chain = feed_block(state.chain, role, wire)
        if state.legacy_chain is not None:
            state.legacy_chain = feed_block(state.legacy_chain, role, wire)
    _attach(state, ctx, role, blocks, kind, source, merging)


def _attach(
    state: RenderState,
    ctx: RenderContext,
    role: str,
    blocks: list[dict[str, Any]],
    kind: ProvenanceKind,
    source: Source | None,
    merging: bool,
    tokens: int | None = None,
) -> None:
    """Add ``blocks`` (a new list: the message keeps it) as a new message, or merge them into
    the last; ``tokens``: the new message's estimate when the caller already has it (estimated
    once per message)."""
    if merging:
        old = state.messages[-1]
        offset = len(old["content"])
        merged = {"role": role, "content": [*old["content"], *blocks]}
        entry = state.provenance[-1]
        shifted = (
            ()
            if source is None
            else (
                Source(
                    source.message_id,
                    {j + offset: b for j, b in source.blocks.items()},
                    {j + offset: s for j, s in source.signatures.items()},
                ),
            )
        )
        state.messages[-1] = merged
        state.provenance[-1] = ProvenanceEntry(
            kind="message" if kind == "message" or entry.kind == "message" else entry.kind,
            sources=(*entry.sources, *shifted),
        )
        tokens = ctx.estimator(merged)
        state.total_tokens += tokens - state.message_tokens[-1]
        state.message_tokens[-1] = tokens
        return
    message = {"role": role, "content": blocks}
    append_message(
        state,
        message,
        ProvenanceEntry(kind, () if source is None else (source,)),
        ctx.estimator(message) if tokens is None else tokens,
    )


def append_message(
    state: RenderState, message: dict[str, Any], entry: ProvenanceEntry, tokens: int
) -> None:
    """Add ``message`` as a new rendered message, with its provenance and estimate (the
    renders' hot paths call it directly: never a merge there)."""
    state.messages.append(message)
    state.provenance.append(entry)
    state.message_tokens.append(tokens)
    state.total_tokens += tokens


def push_message(
    state: RenderState, ctx: RenderContext, role: str, blocks: list[dict[str, Any]], source: Source
) -> None:
    """Append ``blocks`` (an opener the compiler places itself) as a ``summary`` message."""
    _push(state, ctx, role, blocks, "summary", source)


def render_text_prefix(
    state: RenderState, ctx: RenderContext, message: StoredMessage, kind: ProvenanceKind
) -> None:
    """Render a summary (or other whole-text opener) as a user message."""
    pairs = [(b, block_to_wire(block)) for b, block in _text_only(message.content)]
    pairs = [(b, w) for b, w in pairs if str(w.get("text", "")).strip()]
    source = Source(message.id, {j: b for j, (b, _) in enumerate(pairs)})
    _push(state, ctx, "user", [w for _, w in pairs], kind, source)
    state.last_sequence = max(state.last_sequence, message.sequence)


def closing_messages(state: RenderState) -> list[tuple[dict[str, Any], ProvenanceEntry]]:
    """What ends the request beyond the cached render (not cached), each message with its
    provenance: the synthetic user message answering calls still open, then the pending system
    messages when a user message precedes them (provider rule 16: a system message may end the
    list), sourced as ``_place_system`` sources them (a head change the request ends with is
    found by its stored id, as one placed earlier is)."""
    tail: list[tuple[dict[str, Any], ProvenanceEntry]] = []
    if state.open_tool_uses:
        results = {"role": "user", "content": _synthetic_results(state.open_tool_uses)}
        tail.append((results, ProvenanceEntry(kind="synthetic")))
    last = tail[-1][0] if tail else (state.messages[-1] if state.messages else None)
    found = merged_system(state)
    if found is not None and last is not None and last["role"] == "user":
        message, sources = found
        tail.append((message, ProvenanceEntry(kind="notice", sources=sources)))
    return tail


def close_tool_round(state: RenderState) -> list[dict[str, Any]]:
    """The messages of ``closing_messages``."""
    return [message for message, _ in closing_messages(state)]
