"""A head change without a re-render: the kept render with its thinking judged again.

Thinking never enters the chain, and what a render sends besides thinking depends only on the
stored messages, the window's start and the render's options, never on the head's digests or
the model check. So a render of the same window under another head (a changed system prompt or
tool list, another model) differs from the render at hand only in its thinking: which blocks
are sent, which are left out and why. Every thinking block a render judges is recorded with the
chain before it (``RenderState.judged``); ``rejudged`` judges each again, in order, under the
new context (``_judge.judge_thinking``, the order rule run anew) and rebuilds only the replies
whose sent thinking changed. O(window references + judged blocks), where a re-render re-chains
and re-attaches every message.

Invariant: ``rejudged`` returns a render equal to ``full_render`` of the same window under the
new context (the same messages, provenance, tokens, spans, strips, chain and judged blocks), or
``None`` wherever that is not certain: a render opened by a summary or compaction block, a
version-1 chain, observe mode, a reasoning sidecar, a release in the window not yet reported, a
reply that shares its message with another, or one whose message would appear, empty or go
blank. The caller then re-renders. ``tests/compile/test_rejudge.py`` compiles the same sessions both
ways. Pure: the render at hand is never modified (a new state is returned).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from typing import Any

from context_manager._binding._chain import block_bytes
from context_manager._model._canonical import signature_digest
from context_manager._model._content import block_to_wire, signature_of
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ProvenanceEntry, Source
from context_manager._reasoning._capture import resolve_without_sidecar

from ._judge import judge_thinking
from ._render import (
    Judged,
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    _blank_wire,
    leave_out,
    message_pieces,
    releases_reported,
    reported,
)
from ._resident import paused_collector
from ._shed_patch import maybe_marked
from ._strategies import wire_chars

ENABLED = True
"""Re-judge the kept render in place of a re-render (tests turn it off to compare the two)."""

Sent = dict[MessageId, dict[int, str]]
"""Per reply, each thinking block sent now: its index in the reply, its signature digest."""


@paused_collector
def rejudged(
    kept: RenderState,
    ctx: RenderContext,
    stored: Callable[[MessageId], StoredMessage | None],
    encoded: list[int],
) -> RenderState | None:
    """``kept`` (a render of the window from its start) with its thinking judged under ``ctx``,
    or ``None`` when a re-render is needed (see the module docstring). ``stored``: a rendered
    stored message by id (``None``: not at hand); ``encoded[0]`` grows by the bytes of the
    blocks encoded into ``ctx.pieces`` (the window's kept encoded blocks)."""
    if not _possible(kept, ctx):
        return None
    assert kept.judged is not None  # ``_possible``
    again = kept.copy()
    again.signed_from = 0  # thinking judged again may be sent again, anywhere
    for message_id, index, _ in kept.judged:
        spot = (message_id, index)
        again.kept_thinking.discard(spot)
        again.left_out.pop(spot, None)
        again.unread.pop(spot, None)
    again.unreported, again.judged = [], []
    sent = _judge_all(again, kept.judged, ctx, stored, encoded)
    if sent is None:
        return None
    where = _rendered_at(kept, {message_id for message_id, _, _ in kept.judged})
    if where is None:
        return None
    changed = [mid for mid in where if _sent_before(kept, where[mid]) != sent.get(mid, {})]
    if any(mid not in where for mid in sent):
        return None  # a reply that sent nothing would now send thinking: it appears
    marked = False
    for message_id in changed:
        i = where[message_id]
        if not _rebuild(again, ctx, i, message_id, sent.get(message_id, {})):
            return None
        marked = marked or maybe_marked(kept.messages[i]) or maybe_marked(again.messages[i])
    _place_unread(again, where)
    if marked:  # ``_caching`` reuses its scan of a list whose first message is the same object
        again.messages[0] = dict(again.messages[0])
    return again


def _possible(kept: RenderState, ctx: RenderContext) -> bool:
    """What re-judging needs: a render of the window from its start with its judged blocks
    recorded, no opener, no version-1 chain, no sidecar or observe mode, and every release in
    it reported (a re-render reports a pending one again)."""
    if not ENABLED or kept.judged is None or ctx.pieces is None or ctx.observe:
        return False
    if kept.legacy_chain is not None or kept.summary_id is not None or kept.kept_from is not None:
        return False
    if ctx.resolve is not None and ctx.resolve is not resolve_without_sidecar:
        return False
    return releases_reported(kept, ctx.releases)


def _judge_all(
    again: RenderState,
    judged: list[Judged],
    ctx: RenderContext,
    stored: Callable[[MessageId], StoredMessage | None],
    encoded: list[int],
) -> Sent | None:
    """Judge every recorded block again, in render order (``_message._Message.thinking``):
    the strips, kept and left-out sets are filled in ``again``; the blocks sent now, by reply.
    A block not encoded yet is encoded into ``ctx.pieces`` (its bytes added to
    ``encoded[0]``). ``None``: a reply is not at hand."""
    pieces = ctx.pieces
    assert pieces is not None  # ``_possible``
    sent: Sent = {}
    last_kept: str | None = None
    for message_id, index, chain in judged:
        if reported(ctx.releases, message_id, index):
            continue  # released and reported since: never judged again (nor recorded)
        message = stored(message_id)
        if message is None:
            return None
        memo = message_pieces(pieces, message)
        got = memo[index]
        if got is None and chain is not None:  # not kept (a render restored compact)
            wire = block_to_wire(message.content[index])
            got = memo[index] = (wire, block_bytes(wire), wire_chars(wire))
            encoded[0] += len(got[1])
        assert again.judged is not None
        again.judged.append((message_id, index, chain))
        if chain is None:  # its text is gone for good (``_message._Message.thinking``)
            again.unreported.append(StripEntry(message_id, index, "unstamped", kind="release"))
            continue
        assert got is not None
        block = message.content[index]
        verdict, changed = judge_thinking(
            ctx, message, index, block, got[0], chain, last_kept, got[1]
        )
        spot = (message_id, index)
        if verdict == "keep" or verdict == "unread":
            last_kept = sent.setdefault(message_id, {})[index] = signature_digest(
                signature_of(block)
            )
            if verdict == "keep":
                again.kept_thinking.add(spot)
            else:  # its path is placed once the reply's message is rebuilt
                again.left_out[spot] = StripEntry(message_id, index, "head", changed)
                again.unread[spot] = ""
        else:  # released ones were skipped above (``_possible``: every release reported)
            leave_out(again, message_id, index, verdict, changed, None)
    again.last_kept = last_kept
    return sent


def _rendered_at(kept: RenderState, replies: set[MessageId]) -> dict[MessageId, int] | None:
    """Each of ``replies`` that a rendered message holds: that message's index. ``None``: one
    shares its message with another stored message, or is not a plain ``message`` source."""
    where: dict[MessageId, int] = {}
    for i, entry in enumerate(kept.provenance):
        for source in entry.sources:
            if source.message_id in replies:
                if len(entry.sources) != 1 or entry.kind != "message":
                    return None
                where[source.message_id] = i
    return where


def _sent_before(kept: RenderState, i: int) -> dict[int, str]:
    """The thinking rendered message ``i`` sends: each block's index in its reply, and its
    signature digest."""
    source = kept.provenance[i].sources[0]
    return {source.blocks[j]: digest for j, digest in source.signatures.items()}


def _rebuild(
    state: RenderState, ctx: RenderContext, i: int, message_id: MessageId, sent: Mapping[int, str]
) -> bool:
    """Rendered message ``i`` (reply ``message_id`` alone) sending the thinking ``sent`` now,
    its other blocks as they were; ``False``: it would empty, go blank or is not a plain
    reply."""
    old = state.messages[i]
    if old.keys() != {"role", "content"} or old["role"] != "assistant":
        return False
    source = state.provenance[i].sources[0]
    pieces = ctx.pieces
    assert pieces is not None  # ``_possible``
    memo = pieces[message_id]
    items: list[tuple[int, dict[str, Any], str | None]] = [
        (b, old["content"][j], None) for j, b in source.blocks.items() if j not in source.signatures
    ]
    for b, digest in sent.items():
        got = memo[b]
        assert got is not None  # ``_judge_all``
        items.append((b, got[0], digest))
    items.sort(key=lambda item: item[0])
    content = [wire for _, wire, _ in items]
    if not content or _blank_wire(content):
        return False  # the reply's message would go or change: re-render
    blocks = {j: b for j, (b, _, _) in enumerate(items)}
    signatures = {j: digest for j, (_, _, digest) in enumerate(items) if digest is not None}
    message = {"role": "assistant", "content": content}
    tokens = ctx.estimator(message)
    sequence = state.sequences[message_id]
    k = bisect.bisect_left(state.spans, sequence, key=lambda span: span.sequence)
    if k == len(state.spans) or state.spans[k].sequence != sequence:
        return False
    state.spans[k] = Span(sequence, tokens, state.spans[k].clean)
    state.total_tokens += tokens - state.message_tokens[i]
    state.message_tokens[i] = tokens
    state.messages[i] = message
    state.provenance[i] = ProvenanceEntry("message", (Source(message_id, blocks, signatures),))
    return True


def _place_unread(state: RenderState, where: Mapping[MessageId, int]) -> None:
    """The path each block sent that the model cannot read is sent at (provider rule 8)."""
    for message_id, index in list(state.unread):
        i = where[message_id]
        source = state.provenance[i].sources[0]
        j = next(j for j, b in source.blocks.items() if b == index)
        state.unread[(message_id, index)] = f"messages.{i}.content.{j}"
