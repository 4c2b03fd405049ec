"""Fold planning: what a summary covers, which shape the fold takes, what it newly leaves out.

Pure functions over stored messages and render states. A fold never cuts inside a tool round.
Between rounds it keeps a tail (whose thinking then strips); mid-round while thinking is carried
it takes the simple shape: the summary plus the in-flight round's results as text.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_manager._model._content import TextBlock, ToolResultBlock, ToolUseBlock
from context_manager._model._messages import MessageId, MessageMeta, StoredMessage

from ._render import RenderState, Span, StripEntry, is_clean_start
from ._selection import fold_cut

SUMMARY_KIND = "summary"
"""``metadata.kind`` of a stored fold summary."""

SUMMARY_HEADING = "[summary of earlier conversation]"
"""Opens a summary's text so the model can tell it from the user's own words."""


@attrs.frozen
class FoldRequest:
    """A fold the compiler needs a summary for: ``covered`` goes to the summarizer."""

    covered: tuple[StoredMessage, ...]
    covers_upto: int
    inflight_text: str | None


def plan_fold(
    window: Sequence[StoredMessage],
    previous: StoredMessage | None,
    spans: Sequence[Span],
    keep_tokens: int,
    carries_thinking: bool,
) -> FoldRequest | None:
    """The fold of ``window`` (the rendered messages, summaries left out), or ``None``.

    ``None`` when there is nothing new to fold. ``previous`` is the summary the window starts
    from, handed to the summarizer first.
    """
    if not window:
        return None  # nothing stored since the last fold: there is nothing to fold
    cut = fold_cut(spans, keep_tokens)
    # The round is judged by the newest message other than a system one: a notice stored at
    # the tool round's boundary stays after the fold, unfolded, so the agent sees it.
    rounds = list(window)
    while len(rounds) > 1 and rounds[-1].role == "system":
        rounds.pop()
    mid_round = answers_tools(rounds[-1])
    # Mid-round, a kept tail would replay the in-flight call without its thinking, which
    # cannot stay valid across a new prefix: the simple shape replays nothing older.
    simple = cut is None or (mid_round and carries_thinking)
    inflight: str | None = None
    newest = rounds[-1]  # system messages after it (a notice, a head change) stay unfolded
    if simple:
        if mid_round:
            inflight = inflight_text(rounds)
            upto = newest.sequence
        elif is_clean_start(newest):
            upto = newest.sequence - 1  # the user's newest words are sent as they are
        else:
            upto = newest.sequence
    else:
        assert cut is not None
        upto = cut - 1
    covered = tuple(msg for msg in window if msg.sequence <= upto)
    if not covered:
        return None  # nothing new to fold: the window is already as small as it gets
    if previous is not None:
        covered = (previous, *covered)
    return FoldRequest(covered=covered, covers_upto=upto, inflight_text=inflight)


def summary_parts(request: FoldRequest, text: str) -> tuple[list[TextBlock], MessageMeta]:
    """The stored summary's content and metadata."""
    content = [TextBlock(f"{SUMMARY_HEADING}\n{text}")]
    if request.inflight_text:
        content.append(TextBlock(request.inflight_text))
    return content, MessageMeta(kind=SUMMARY_KIND, extra={"covers_upto": request.covers_upto})


def covers_upto(summary: StoredMessage) -> int:
    """The newest sequence a stored summary covers."""
    value = summary.metadata.extra.get("covers_upto")
    return int(value) if isinstance(value, int) else summary.sequence - 1


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
    last = window[-1]
    names: dict[str, str] = {}
    for msg in reversed(window[:-1]):
        if msg.role == "assistant":
            names = {b.id: b.name for b in msg.content if isinstance(b, ToolUseBlock)}
            break
    lines = []
    for block in last.content:
        if not isinstance(block, ToolResultBlock):
            continue
        if block.content is None or isinstance(block.content, str):
            body = block.content or ""
        else:
            body = " ".join(b.text for b in block.content if isinstance(b, TextBlock))
        name = names.get(block.tool_use_id, "tool")
        status = " (error)" if block.is_error else ""
        lines.append(f"Result of your {name} call{status}: {body}")
    return "\n".join(lines)
