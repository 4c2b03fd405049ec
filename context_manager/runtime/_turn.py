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
    that produced ``replies[k]`` (zeros when the provider reported none); ``total_usage`` sums
    them.
    """

    replies: tuple[MessageId, ...]
    tool_calls: tuple[ToolCall, ...]
    notices: tuple[MessageId, ...]
    stop_reason: str | None
    usage: tuple[CallUsage, ...] = ()

    @property
    def total_usage(self) -> CallUsage:
        """The turn's tokens: uncached input, cache reads, cache writes and output, summed."""
        return CallUsage.total(self.usage)

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
