"""Drop incidents per agent, scoped by branch, and the operators' ``thinking_binding_loss`` alert.

At most one open incident per agent; a call on another branch closes it and opens another. Only
a call that opens or grows an incident is told or alerted. In memory: a restart forgets it.
"""

from __future__ import annotations

import attrs

from context_manager import PlacedDrops, library_logger

log = library_logger("notices")

ALERT_EVENT = "thinking_binding_loss"
"""The operators' alert: one warning per incident that opens or grows."""

MAX_ALERT_PATHS = 32
"""Paths listed in one alert: enough to find the blocks, few enough that a pathological
response cannot flood the log (``paths_total`` still says how many there were)."""

MAX_PATH_CHARS = 120
"""A path is the provider's text; one cut this long still shows which block it names."""


@attrs.frozen
class IncidentStep:
    """What one call did to its agent's incident.

    Attributes:
        tell: the resident's incident (placed blocks) opened or grew: tell the agent.
        alerted: a ``thinking_binding_loss`` event was emitted.
        placed_blocks: placed blocks this call dropped.
        unplaced: blocks this call dropped that could not be placed.
        previous_most: the resident incident's most placed blocks before this call
            (0: none was open on this branch).
        most: the resident incident's most placed blocks after this call (0: closed).
    """

    tell: bool
    alerted: bool
    placed_blocks: int
    unplaced: int
    previous_most: int
    most: int


@attrs.frozen
class _Incident:
    scope: str | None
    most_placed: int
    most_total: int


class ThinkingLossIncidents:
    """The incident rule for a call's dropped blocks, per agent, scoped by branch.

    Two counts share one incident. The resident's counts placed blocks: the first call that
    drops one opens it (told), a later call is told only if it drops more than the incident's
    most, and a call that drops no placed block closes it. The operators' also counts blocks
    that could not be placed, so a call none of whose drops can be placed alerts (once per
    incident, again when it grows) but tells the agent nothing. A call on another scope (branch
    key) closes the open incident and opens a new one.
    """

    def __init__(self) -> None:
        self._open: dict[str, _Incident] = {}

    def observe(self, agent: str, scope: str | None, placed: PlacedDrops) -> IncidentStep:
        """Apply one call's placed drops (a call with no drop too: it closes the incident).

        Args:
            agent: whose call it was.
            scope: the key of the branch the call's compile read.
            placed: the call's drops, from ``place_thinking_drops``.

        Returns:
            The ``IncidentStep``; a ``thinking_binding_loss`` warning was logged when it says
            ``alerted``.
        """
        prior = self._open.get(agent)
        if prior is not None and prior.scope != scope:
            prior = None
        previous_most = prior.most_placed if prior else 0
        previous_total = prior.most_total if prior else 0
        placed_blocks = placed.placed_blocks
        unplaced = placed.unplaced_count
        total = placed_blocks + unplaced
        most = max(previous_most, placed_blocks) if placed_blocks else 0
        most_total = max(previous_total, total) if total else 0
        if most_total:
            self._open[agent] = _Incident(scope, most, most_total)
        else:
            self._open.pop(agent, None)
        tell = placed_blocks > previous_most
        alerted = tell or total > previous_total
        if alerted:
            paths = placed.paths
            log.warning(
                ALERT_EVENT,
                agent=agent,
                branch=scope,
                opened=previous_total == 0,
                placed=placed_blocks,
                unplaced=unplaced,
                replies=placed.reply_count,
                reasons=list(placed.reasons),
                paths=[p[:MAX_PATH_CHARS] for p in paths[:MAX_ALERT_PATHS]],
                paths_total=len(paths),
            )
        return IncidentStep(tell, alerted, placed_blocks, unplaced, previous_most, most)

    def retract(self, agent: str, scope: str | None, step: IncidentStep) -> None:
        """Undo ``step``'s growth of the resident's count: its line could not be made.

        The next call that drops as many placed blocks is then told. A no-op when the
        incident has moved on since (another call, another branch).
        """
        current = self._open.get(agent)
        if current is None or current.scope != scope or current.most_placed != step.most:
            return
        self._open[agent] = attrs.evolve(current, most_placed=step.previous_most)

    def forget(self, agent: str, scope: str | None = None) -> None:
        """Close an agent's incident (any, or only one on ``scope``)."""
        current = self._open.get(agent)
        if current is not None and (scope is None or current.scope == scope):
            del self._open[agent]

    def open_incidents(self) -> int:
        """How many agents have an open incident."""
        return len(self._open)

    def _check(self) -> None:
        """Assert the structural invariants (tests call it after each mutation)."""
        for agent, incident in self._open.items():
            assert isinstance(agent, str)
            assert incident.most_total > 0, (agent, incident)
            assert 0 <= incident.most_placed <= incident.most_total, (agent, incident)
