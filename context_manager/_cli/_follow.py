"""Printing a branch's messages as they are stored, each once (``demo`` and ``run``).

Stateful: remembers the newest sequence shown. Reads only what was stored since (O(new)).
"""

from __future__ import annotations

from typing import TextIO

from context_manager._manager import ContextManager
from context_manager._model._messages import StoredMessage

from ._format import DIM, format_message, style

FOLLOW_LINES = 8
"""Lines a followed message shows at most; ``transcript`` prints messages whole."""


class Follower:
    """Shows the current branch's new messages on ``out``.

    Args:
        cm: the agent's context manager (its current branch is followed, even after a switch).
        out: where to print.
        color: ANSI styling (``out`` is a terminal).
    """

    def __init__(self, cm: ContextManager, out: TextIO, *, color: bool) -> None:
        self._cm = cm
        self._out = out
        self._color = color
        _, self._last = cm.branch_head()

    def show_new(self, *, skip: frozenset[str] = frozenset()) -> list[StoredMessage]:
        """Print the messages stored since the last call (except ids in ``skip``); returns them."""
        messages = self._cm.messages(since=self._last)
        for message in messages:
            if message.id not in skip:
                for line in format_message(message, color=self._color, max_lines=FOLLOW_LINES):
                    print(line, file=self._out)
        if messages:
            self._last = messages[-1].sequence
        self._out.flush()
        return messages

    def catch_up(self) -> None:
        """Skip everything stored so far (e.g. after a switch to another branch)."""
        _, self._last = self._cm.branch_head()

    def note(self, who: str, text: str) -> None:
        """A line that is not a stored message: what the host or the provider did."""
        print(style(f"      ({who}) {text}", DIM, self._color), file=self._out)
        self._out.flush()
