"""Telling the reasoning the server's thinking clearing removes (``ClearThinking``, issue #30).

Stateful (one ``ClearedThinking`` per agent, not thread-safe: the agent's turn lock guards it).
With ``clear_thinking_20251015`` the API removes old turns' thinking from its own copy of each
request and reports ``cleared_thinking_turns``, the turns cleared on that call. The count only
grows while the conversation does, so the loss is told once per growth: the at-least form for the
turns newly cleared on a branch (each turn holds at least one reply). Nothing is told without
``ClearThinking`` (the count is then 0). The counts told live in memory: after a restart the
next clear is told again in full (told twice rather than never).
"""

from __future__ import annotations

import attrs

from context_manager._model._editing import CallEdits
from notices import reasoning_loss_line


@attrs.define
class ClearedThinking:
    """How many cleared thinking turns were told, per branch."""

    told: dict[str, int] = attrs.field(factory=dict)

    def line(self, agent: str, branch: str, edits: CallEdits) -> str | None:
        """The line for the turns a call's edits newly cleared on ``branch``, or ``None``."""
        cleared = edits.cleared_thinking_turns
        before = self.told.get(branch, 0)
        if cleared <= before:
            return None
        self.told[branch] = cleared
        return reasoning_loss_line(agent, "at_least", count=cleared - before)
