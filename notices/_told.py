"""Told sets: per agent and branch key, the replies (and stream rounds) a drop line told.

Bounded: each branch holds at most ``cap`` entries, oldest told first out; an emptied branch
or agent leaves no entry behind. Nothing crosses agents. Not thread-safe: one teller per loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import TypeAlias

from context_manager import InvalidValue, MessageId

DEFAULT_CAP = 10_000
"""Entries per branch: far more replies than one incident of drops names, so a live loss is
never forgotten early, while a resident agent's memory stays bounded for its whole life."""

Entry: TypeAlias = MessageId | int
"""A stored reply's id (``str``), or the index of a stream round told before it was stored."""


class ToldSets:
    """What was told, per agent and branch key, in told order.

    Args:
        cap: most entries per branch (at least 1).

    Raises:
        ValueError: ``cap`` is not a positive int.
    """

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise InvalidValue(f"cap must be a positive int, got {cap!r}")
        self.cap = cap
        self._agents: dict[str, dict[str, OrderedDict[Entry, None]]] = {}

    def untold(self, agent: str, branch: str, replies: Iterable[MessageId]) -> list[MessageId]:
        """``replies`` not told on ``branch``, order kept. O(len(replies))."""
        told = self._agents.get(agent, {}).get(branch)
        if not told:
            return list(replies)
        return [r for r in replies if r not in told]

    def add(self, agent: str, branch: str, entries: Iterable[Entry]) -> None:
        """Mark ``entries`` told on ``branch`` (a re-told entry becomes the newest).

        Past the cap, the oldest entries go first.
        """
        branches = self._agents.setdefault(agent, {})
        told = branches.setdefault(branch, OrderedDict())
        for entry in entries:
            told[entry] = None
            told.move_to_end(entry)
            if len(told) > self.cap:
                told.popitem(last=False)
        if not told:
            self._drop(agent, branch)

    def discard(self, agent: str, branch: str, entries: Iterable[Entry]) -> None:
        """Forget ``entries`` on ``branch``; unknown ones are ignored."""
        told = self._agents.get(agent, {}).get(branch)
        if told is None:
            return
        for entry in entries:
            told.pop(entry, None)
        if not told:
            self._drop(agent, branch)

    def take_round(self, agent: str, branch: str, round_index: int) -> bool:
        """Forget a told round and say whether it was told."""
        told = self._agents.get(agent, {}).get(branch)
        if told is None or round_index not in told:
            return False
        self.discard(agent, branch, (round_index,))
        return True

    def forget(self, agent: str, branch: str | None = None) -> None:
        """Drop an agent's told state, or one branch's."""
        if branch is None:
            self._agents.pop(agent, None)
        else:
            self._drop(agent, branch)

    def count(self, agent: str | None = None, branch: str | None = None) -> int:
        """Entries held: in total, for one agent, or for one agent's branch."""
        agents = self._agents.values() if agent is None else [self._agents.get(agent, {})]
        return sum(
            len(told)
            for branches in agents
            for key, told in branches.items()
            if branch is None or key == branch
        )

    def _drop(self, agent: str, branch: str) -> None:
        branches = self._agents.get(agent)
        if branches is None:
            return
        branches.pop(branch, None)
        if not branches:
            del self._agents[agent]

    def _check(self) -> None:
        """Assert the structural invariants (tests call it after each mutation)."""
        for agent, branches in self._agents.items():
            assert isinstance(agent, str)
            assert branches, f"agent {agent!r} kept with no branch"
            for branch, told in branches.items():
                assert isinstance(branch, str)
                assert 0 < len(told) <= self.cap, (agent, branch, len(told))
                for entry in told:
                    assert isinstance(entry, str) or (
                        isinstance(entry, int) and not isinstance(entry, bool) and entry >= 0
                    ), entry
