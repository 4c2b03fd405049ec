"""Observe mode's summary per turn (``ThinkingBinding(enforcement="observe")``), for operators.

Stateful per turn only: ``ObservedTurn`` sums, over a turn's calls, the thinking blocks the
compiler predicted enforcement would strip (sent anyway, ``CompileResult.predicted_mismatches``)
and the disagreements with the provider's ``thinking_mismatch_allowed`` entries (the manager's
``prediction_mismatches`` counter moved), and logs one ``binding_observed_turn`` event at the
turn's end. Under enforcement it counts nothing and logs nothing. Never raises.
"""

from __future__ import annotations

import attrs

from context_manager._manager import ContextManager
from context_manager._model._log import library_logger
from context_manager._model._results import CompileResult

log = library_logger("context_manager.runtime")

OBSERVED_TURN_EVENT = "binding_observed_turn"
"""The info event (warning when any prediction disagreed) summing one turn in observe mode."""


@attrs.define
class ObservedTurn:
    """One turn's predictions and mismatches (see the module)."""

    cm: ContextManager
    predicted: int = 0
    calls: int = 0
    _before: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self._before = self.cm.prediction_mismatches

    @property
    def observing(self) -> bool:
        return self.cm.binding.enforcement == "observe"

    @property
    def mismatches(self) -> int:
        """Disagreements recorded since the turn opened."""
        return self.cm.prediction_mismatches - self._before

    def call(self, result: CompileResult) -> None:
        """A call of the turn was compiled (and its reply recorded)."""
        self.calls += 1
        self.predicted += len(result.predicted_mismatches)

    def finish(self, agent: str) -> None:
        """Log the turn's summary (observe mode only)."""
        if not self.observing:
            return
        fields = {
            "agent": agent,
            "branch": self.cm.current_branch_key(),
            "calls": self.calls,
            "predicted_strips": self.predicted,
            "mismatches": self.mismatches,
        }
        if self.mismatches:
            log.warning(OBSERVED_TURN_EVENT, **fields)
        else:
            log.info(OBSERVED_TURN_EVENT, **fields)
