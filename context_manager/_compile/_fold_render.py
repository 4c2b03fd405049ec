"""Rendering a fold that kept a tail mid-round: the open turn's rounds as text after the tail.

Such a summary names the rounds' stored range (``_fold.inflight_range``). A render opening with
it sends the summary's first block only, leaves the range's user and assistant messages out and
sends the text (the summary's last block) as a user message right after the kept tail, before
anything stored after the range; it merges with the open turn's user message (adjacent user
messages merge). System messages and notices inside the range render in place (held for their
place, provider rule 16). No call of the open turn goes out without its thinking (rule 6), so
the request never ends in an open tool loop over a stripped reply. Pure over the render: the
same stored state renders the same bytes, so a reopened store sends what was sent.
"""

from __future__ import annotations

import attrs

from context_manager._model._content import TextBlock, block_to_wire
from context_manager._model._messages import StoredMessage
from context_manager._model._results import Source

from ._fold import inflight_range
from ._render import RenderContext, RenderState, Span, _push


def summary_only(summary: StoredMessage) -> StoredMessage:
    """``summary`` as its opener renders it: without the rounds' text when that goes after
    the kept tail."""
    if inflight_range(summary) is None:
        return summary
    return attrs.evolve(summary, content=summary.content[:1])


@attrs.define
class RoundsText:
    """The open turn's rounds of one summary, rendered as text after the kept tail."""

    summary: StoredMessage
    first: int
    last: int
    placed: bool = False

    @classmethod
    def of(cls, summary: StoredMessage | None, start: int) -> RoundsText | None:
        """The rounds ``summary`` sends as text, when a render from ``start`` holds them."""
        found = inflight_range(summary) if summary is not None else None
        if summary is None or found is None or start > found[1]:
            return None
        return cls(summary, *found)

    def skips(self, state: RenderState, ctx: RenderContext, message: StoredMessage) -> bool:
        """Whether ``message`` is left out (its rounds go as the text); the text is placed
        before the first message past the range."""
        sequence = message.sequence
        if sequence > self.last:
            self.place(state, ctx)
            return False
        if sequence < self.first or message.role == "system" or message.metadata.system_notice:
            return False
        state.sequences[message.id] = sequence
        state.last_sequence = max(state.last_sequence, sequence)
        return True

    def place(self, state: RenderState, ctx: RenderContext) -> None:
        """Send the text now (once), as a user message after what is rendered so far."""
        if self.placed:
            return
        self.placed = True
        index = len(self.summary.content) - 1
        block = self.summary.content[index]
        if not isinstance(block, TextBlock) or not block.text.strip():
            return
        wire = block_to_wire(block)
        before = state.total_tokens
        _push(state, ctx, "user", [wire], "summary", Source(self.summary.id, {0: index}))
        state.spans.append(Span(self.last, state.total_tokens - before, False))
