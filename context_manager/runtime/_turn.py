"""What a turn is and what it stored: ``Turn`` (where a live turn opened) and ``TurnResult``.

Frozen records only; ``Agent.run_turn`` makes them.
"""

from __future__ import annotations

import attrs

from context_manager._model._editing import CallEdits
from context_manager._model._messages import MessageId
from context_manager._model._usage import CallUsage

from ._tools import ToolCall


@attrs.frozen
class Turn:
    """A live turn: where it opened."""

    branch_key: str
    head_sequence: int


@attrs.frozen
class TurnResult:
    """What a turn stored: replies, tool calls, notices, why it stopped, and each call's usage.

    ``replies`` and ``notices`` are stored message ids (read a notice's text with
    ``agent.context.get_message(id).content[0].text``). ``usage[k]`` is the usage of the call
    that produced ``replies[k]`` (zeros when the provider reported none); ``compaction_usage``
    is the cost of a server compaction the turn stored (``compaction``: its block's id; the
    ``compaction`` entry of the call's ``usage.iterations``, provider rule 23); ``total_usage``
    sums them all.
    """

    replies: tuple[MessageId, ...]
    tool_calls: tuple[ToolCall, ...]
    notices: tuple[MessageId, ...]
    stop_reason: str | None
    usage: tuple[CallUsage, ...] = ()

    @property
    def total_usage(self) -> CallUsage:
        """The turn's tokens: uncached input, cache reads, cache writes and output, summed over
        its calls and the compaction it stored."""
        return CallUsage.total((*self.usage, self.compaction_usage or CallUsage()))

    head_changes: tuple[MessageId, ...] = ()
    """The ``head-change`` system messages the turn's compiles appended (SPEC 7b)."""
    edits: tuple[CallEdits, ...] = ()
    """``edits[k]``: what the server's context editing cleared on the call that produced
    ``replies[k]`` (``ContextEditing``; zeros when it cleared nothing)."""
    predicted_strips: int = 0
    """Observe mode (``ThinkingBinding(enforcement="observe")``): thinking blocks the turn's
    calls sent that enforcement would have stripped (0 under enforcement)."""
    prediction_mismatches: int = 0
    """Observe mode: how many of those predictions the provider's reports contradicted
    (``binding_prediction_mismatch`` events); the turn's summary is ``binding_observed_turn``."""
    compaction: MessageId | None = None
    """The compaction block the turn stored: at its end (foreground ``Compact``), or swapped in
    before one of its calls (``Compact(background=True)``); ``None`` when none."""
    compaction_usage: CallUsage | None = None
    """The usage of the compaction call whose block the turn stored (``None``: none)."""
