"""Which replies are this turn's: a frozen record the runtime builds when a turn opens.

Pure. A reply is this turn's only while a turn is live, on the branch the turn opened on, and
stored after the head the turn opened at; a dropped round of the current call always is.
"""

from __future__ import annotations

import attrs

from context_manager import StoredMessage


@attrs.frozen
class TurnState:
    """The agent's turn as the teller judges it.

    Attributes:
        live: a turn is running now (between turns, nothing is this turn's).
        branch_key: the key of the branch the turn opened on (``None``: unknown, so nothing
            is this turn's).
        head_sequence: that branch's head sequence when the turn opened.
    """

    live: bool
    branch_key: str | None
    head_sequence: int

    @classmethod
    def idle(cls) -> TurnState:
        """No live turn: nothing is this turn's."""
        return cls(live=False, branch_key=None, head_sequence=0)

    @classmethod
    def opened(cls, branch_head: tuple[str, int]) -> TurnState:
        """A live turn opened at ``ContextManager.branch_head()``'s ``(key, head sequence)``."""
        key, head = branch_head
        return cls(live=True, branch_key=key, head_sequence=head)

    def owns(self, message: StoredMessage) -> bool:
        """Whether ``message`` is one of this turn's steps."""
        return (
            self.live
            and self.branch_key is not None
            and message.branch == self.branch_key
            and message.sequence > self.head_sequence
        )
