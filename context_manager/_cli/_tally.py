"""What the demo counts: lines told by form and cause, blocks stripped, drops placed and unplaced.

Stateful counters fed by the library's own hooks (a teller subclass, an incidents subclass and an
``on_thinking_strip`` observer); the counting never changes what is told.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from context_manager._binding._drops import PlacedDrops
from context_manager._model._results import ThinkingStrip
from notices import IncidentStep, ReadMessage, ReasoningLossTeller, ThinkingLossIncidents, TurnState

from ._format import line_form, table

DropsHook = Callable[[PlacedDrops, "str | None"], None]
"""Called after each model call's drops are judged, with the line told (or ``None``)."""


class CountingIncidents(ThinkingLossIncidents):
    """``ThinkingLossIncidents`` that also counts the operators' alerts it raised."""

    def __init__(self) -> None:
        super().__init__()
        self.alerts = 0

    def observe(self, agent: str, scope: str | None, placed: PlacedDrops) -> IncidentStep:
        step = super().observe(agent, scope, placed)
        self.alerts += step.alerted
        return step


class TallyingTeller(ReasoningLossTeller):
    """A ``ReasoningLossTeller`` that counts each line it tells by form and cause.

    The cause is the strip's (``head``, ``first``, ``messages``) or ``drops``.
    """

    def __init__(self, read_message: ReadMessage, on_drops: DropsHook | None = None) -> None:
        self.counting = CountingIncidents()
        super().__init__(read_message, incidents=self.counting)
        self.told: Counter[tuple[str, str]] = Counter()
        self.placed = 0
        self.unplaced = 0
        self.calls_with_drops = 0
        self._on_drops = on_drops

    def for_strip(
        self, agent: str, branch_key: str, strip: ThinkingStrip, turn: TurnState | None
    ) -> str | None:
        line = super().for_strip(agent, branch_key, strip, turn)
        if line:
            self.told[(line_form(line) or "?", strip.cause)] += 1
        return line

    def for_drops(
        self, agent: str, branch_key: str, placed: PlacedDrops, turn: TurnState | None
    ) -> str | None:
        line = super().for_drops(agent, branch_key, placed, turn)
        self.placed += placed.placed_blocks
        self.unplaced += placed.unplaced_count
        self.calls_with_drops += bool(placed.placed_blocks or placed.unplaced_count)
        if line:
            self.told[(line_form(line) or "?", "drops")] += 1
        if self._on_drops is not None:
            self._on_drops(placed, line)
        return line


class StripCounter:
    """An ``on_thinking_strip`` observer: blocks and replies stripped, per cause."""

    def __init__(self) -> None:
        self.blocks: Counter[str] = Counter()
        self.compiles = 0

    def __call__(self, strip: ThinkingStrip, branch_key: str) -> None:
        self.blocks[strip.cause] += strip.blocks
        self.compiles += 1


FORM_ORDER = {"head": 0, "count": 1, "at_least": 2}
CAUSE_ORDER = {"head": 0, "messages": 1, "first": 2, "drops": 3}


def summary_lines(teller: TallyingTeller, strips: StripCounter) -> list[str]:
    """The demo's closing summary: lines told per form and cause, then the counts."""
    told = sorted(
        teller.told.items(),
        key=lambda item: (FORM_ORDER.get(item[0][0], 9), CAUSE_ORDER.get(item[0][1], 9)),
    )
    rows = [(form.replace("_", "-"), cause, str(n)) for (form, cause), n in told]
    by_cause = sorted(strips.blocks.items(), key=lambda item: CAUSE_ORDER.get(item[0], 9))
    counts = [
        (
            "thinking blocks stripped at compile (on_thinking_strip)",
            str(sum(strips.blocks.values())),
        ),
        *((f"  cause {cause}", str(n)) for cause, n in by_cause),
        ("committing compiles that stripped", str(strips.compiles)),
        ("provider drops placed on stored replies", str(teller.placed)),
        ("provider drops that could not be placed", str(teller.unplaced)),
        ("model calls with drops", str(teller.calls_with_drops)),
        ("operators' alerts (thinking_binding_loss)", str(teller.counting.alerts)),
    ]
    return [
        *table(rows, ("[reasoning] line form", "cause", "lines told")),
        "",
        *table(counts, ("what", "count")),
    ]
