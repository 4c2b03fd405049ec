"""Fold planning: what a summary covers, which shape the fold takes, what it newly leaves out.

Pure functions over stored messages and render states. A fold never cuts inside a tool round and
keeps a tail of whole turns (at most ``keep_tokens``, its thinking then strips: provider rule 20).
Mid-round while thinking is carried, no call of the open turn is replayed without its thinking
(rule 6): the turn's rounds after its user message (the in-flight round among them) are sent as
text after the kept tail, their stored range named in the summary (``INFLIGHT_KEY``, rendered by
``_fold_render``). When no whole turn before the open one fits, the fold takes the simple shape:
the summary plus the in-flight round's results as text, nothing older replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from context_manager._model._content import (
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_to_wire,
    is_thinking,
)
from context_manager._model._messages import MessageId, MessageMeta, StoredMessage

from ._render import RenderState, Span, StripEntry, is_clean_start
from ._selection import fold_cut

SUMMARY_KIND = "summary"
"""``metadata.kind`` of a stored fold summary."""

SUMMARY_HEADING = "[summary of earlier conversation]"
"""Opens a summary's text so the model can tell it from the user's own words."""

INFLIGHT_KEY = "inflight"
"""``metadata.extra`` key of a summary whose fold kept a tail mid-round: ``[first, last]``, the
stored sequences of the open turn's rounds sent as text (the summary's last block) after it."""


@attrs.frozen
class FoldRequest:
    """A fold the compiler needs a summary for: ``covered`` goes to the summarizer."""

    covered: tuple[StoredMessage, ...]
    covers_upto: int
    inflight_text: str | None
    inflight: tuple[int, int] | None = None
    """The stored range sent as ``inflight_text`` after the kept tail (``None``: the text, if
    any, goes with the summary: the simple shape)."""


def plan_fold(
    window: Sequence[StoredMessage],
    previous: StoredMessage | None,
    spans: Sequence[Span],
    keep_tokens: int,
    carries_thinking: bool,
    estimator: Callable[[Any], int] | None = None,
) -> FoldRequest | None:
    """The fold of ``window`` (the rendered messages, summaries left out), or ``None``.

    ``None`` when there is nothing new to fold. ``previous`` is the summary the window starts
    from, handed to the summarizer first. With ``estimator`` (the binding strips the kept
    tail's thinking) the tail is measured as it is sent: each reply without its thinking.
    """
    if not window:
        return None  # nothing stored since the last fold: there is nothing to fold
    sent = _SentTokens(window, estimator) if estimator is not None else None
    cut = fold_cut(spans, keep_tokens, sent)
    # The round is judged by the newest message other than a system one: a notice stored at
    # the tool round's boundary stays after the fold, unfolded, so the agent sees it.
    rounds = list(window)
    while len(rounds) > 1 and rounds[-1].role == "system":
        rounds.pop()
    newest = rounds[-1]  # system messages after it (a notice, a head change) stay unfolded
    if answers_tools(newest) and carries_thinking:
        # Mid-round a kept tail must not replay a call of the open turn without its thinking,
        # which cannot stay valid across a new prefix (provider rule 6): the turn's rounds go
        # as text after the tail, or with the summary when no whole turn before fits.
        return _mid_round(window, rounds, previous, cut)
    inflight: str | None = None
    if cut is not None:
        upto = cut - 1
    elif answers_tools(newest):
        inflight = inflight_text(rounds)
        upto = newest.sequence
    elif is_clean_start(newest):
        upto = newest.sequence - 1  # the user's newest words are sent as they are
    else:
        upto = newest.sequence
    return _request(window, previous, upto, inflight)


def _mid_round(
    window: Sequence[StoredMessage],
    rounds: Sequence[StoredMessage],
    previous: StoredMessage | None,
    cut: int | None,
) -> FoldRequest | None:
    """A fold while the newest message answers tool calls and thinking is carried."""
    opening = next((i for i in range(len(rounds) - 1, -1, -1) if is_clean_start(rounds[i])), None)
    if cut is None or opening is None or cut >= rounds[opening].sequence:
        # no whole turn before the open one fits: the simple shape
        return _request(window, previous, rounds[-1].sequence, inflight_text(rounds))
    steps = rounds[opening + 1 :]
    span = (steps[0].sequence, steps[-1].sequence)
    return _request(window, previous, cut - 1, rounds_text(steps), span)


class _SentTokens:
    """What a span weighs once folded: a reply's tokens without its thinking (which strips:
    its prefix changed, provider rule 20), every other span as rendered. O(the message) per
    span with thinking, O(1) for any other."""

    def __init__(self, window: Sequence[StoredMessage], estimator: Callable[[Any], int]) -> None:
        self.by_sequence = {m.sequence: m for m in window}
        self.estimator = estimator

    def __call__(self, span: Span) -> int:
        message = self.by_sequence.get(span.sequence)
        if message is None or not any(is_thinking(b) for b in message.content):
            return span.tokens
        kept = [block_to_wire(b) for b in message.content if not is_thinking(b)]
        return min(span.tokens, self.estimator({"role": message.role, "content": kept}))


def _request(
    window: Sequence[StoredMessage],
    previous: StoredMessage | None,
    upto: int,
    inflight: str | None,
    span: tuple[int, int] | None = None,
) -> FoldRequest | None:
    covered = tuple(msg for msg in window if msg.sequence <= upto)
    if not covered:
        return None  # nothing new to fold: the window is already as small as it gets
    if previous is not None:
        covered = (previous, *covered)
    return FoldRequest(covered=covered, covers_upto=upto, inflight_text=inflight, inflight=span)


def summary_parts(request: FoldRequest, text: str) -> tuple[list[TextBlock], MessageMeta]:
    """The stored summary's content and metadata."""
    content = [TextBlock(f"{SUMMARY_HEADING}\n{text}")]
    if request.inflight_text:
        content.append(TextBlock(request.inflight_text))
    extra: dict[str, object] = {"covers_upto": request.covers_upto}
    if request.inflight is not None and request.inflight_text:
        extra[INFLIGHT_KEY] = list(request.inflight)
    return content, MessageMeta(kind=SUMMARY_KIND, extra=extra)


def covers_upto(summary: StoredMessage) -> int:
    """The newest sequence a stored summary covers."""
    value = summary.metadata.extra.get("covers_upto")
    return int(value) if isinstance(value, int) else summary.sequence - 1


def inflight_range(summary: StoredMessage) -> tuple[int, int] | None:
    """The stored range a summary's fold sends as text after its kept tail, or ``None``."""
    value = summary.metadata.extra.get(INFLIGHT_KEY)
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        and len(summary.content) > 1
    ):
        return int(value[0]), int(value[1])
    return None


def answers_tools(message: StoredMessage) -> bool:
    """True for a user message that answers tool calls (an in-flight round's results)."""
    return message.role == "user" and any(isinstance(b, ToolResultBlock) for b in message.content)


def kept_thinking(state: RenderState) -> list[tuple[MessageId, int]]:
    """``(reply id, stored block index)`` of every thinking block ``state`` sends, in order."""
    kept: list[tuple[MessageId, int]] = []
    for entry in state.provenance:
        for source in entry.sources:
            kept.extend((source.message_id, source.blocks[j]) for j in sorted(source.signatures))
    return kept


def fold_entries(before: RenderState, after: RenderState) -> list[StripEntry]:
    """What a fold newly leaves out: thinking sent before it and not after, then the rest."""
    still_sent = set(kept_thinking(after))
    seen: set[tuple[MessageId, int]] = set()
    entries: list[StripEntry] = []
    candidates = [
        *before.unreported,
        *(
            # a block the model could not read was lost to it first: that stays the cause
            attrs.evolve(before.left_out[(mid, block)], kind="covered")
            if (mid, block) in before.unread
            else StripEntry(mid, block, "prefix", kind="covered")
            for mid, block in kept_thinking(before)
            if (mid, block) not in after.left_out
        ),
        *after.unreported,
    ]
    for entry in candidates:
        spot = (entry.message_id, entry.block)
        if spot in still_sent or spot in seen:
            continue
        seen.add(spot)
        entries.append(entry)
    age = {**before.sequences, **after.sequences}
    return sorted(entries, key=lambda e: (age.get(e.message_id, -1), e.block))


def inflight_text(window: Sequence[StoredMessage]) -> str:
    """The last message's tool results as text, each labelled with its call."""
    names: dict[str, str] = {}
    for msg in reversed(window[:-1]):
        if msg.role == "assistant":
            names = _calls(msg)
            break
    return "\n".join(_result_lines(window[-1], names))


def rounds_text(steps: Sequence[StoredMessage]) -> str:
    """The open turn's rounds as text: each reply's words, then its calls' results, each
    labelled with its call, and any words stored with them (system messages and notices left
    out: they are sent in place)."""
    lines: list[str] = []
    names: dict[str, str] = {}
    for msg in steps:
        if msg.role == "system" or msg.metadata.system_notice:
            continue
        if msg.role == "assistant":
            names = _calls(msg)
            words = " ".join(b.text for b in msg.content if isinstance(b, TextBlock)).strip()
            if words:
                lines.append(f"You wrote: {words}")
        else:  # the results, then any words stored with them
            lines.extend(_result_lines(msg, names))
            lines.extend(b.text for b in msg.content if isinstance(b, TextBlock) and b.text.strip())
    return "\n".join(lines)


def _calls(reply: StoredMessage) -> dict[str, str]:
    return {b.id: b.name for b in reply.content if isinstance(b, ToolUseBlock)}


def _result_lines(message: StoredMessage, names: dict[str, str]) -> list[str]:
    lines = []
    for block in message.content:
        if not isinstance(block, ToolResultBlock):
            continue
        if block.content is None or isinstance(block.content, str):
            body = block.content or ""
        else:
            body = " ".join(b.text for b in block.content if isinstance(b, TextBlock))
        name = names.get(block.tool_use_id, "tool")
        status = " (error)" if block.is_error else ""
        lines.append(f"Result of your {name} call{status}: {body}")
    return lines
