"""Observe mode's summary per turn, for operators (issue 33: "operators get a summary per turn").

A runtime agent in ``ThinkingBinding(enforcement="observe")`` on an unenforced simulator account:
each turn ends with one ``binding_observed_turn`` event summing the blocks sent that enforcement
would strip and the disagreements with the provider's reports, and ``TurnResult`` carries both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from helpers import PROBE_HEAD, runtime_on
from structlog.testing import capture_logs

from context_manager import ThinkingBinding
from context_manager.runtime import Agent, TurnResult
from context_manager.simulator import Simulator

OBSERVE = ThinkingBinding(enforcement="observe", append_changes=False)


def script(request: dict[str, Any]) -> list[Any]:
    return [{"type": "thinking", "thinking": "thought"}, {"type": "text", "text": "ok"}]


def turn_events(logs: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, int, str]]:
    return [
        (e["calls"], e["predicted_strips"], e["mismatches"], e["log_level"])
        for e in logs
        if e["event"] == "binding_observed_turn"
    ]


async def turn_after_a_head_change(
    binding: ThinkingBinding,
) -> tuple[TurnResult, list[tuple[int, int, int, str]]]:
    """Two turns, a system change, then a third turn: its result and its summary events."""
    sim = Simulator(script=script, enforced=False)
    ada = runtime_on(sim).register(Agent(name="ada", head=PROBE_HEAD, binding=binding))
    await ada.run_turn("hello")
    await ada.run_turn("second")
    ada.head = attrs.evolve(ada.head, system="You are Ada, on call.")
    with capture_logs() as logs:
        result = await ada.run_turn("after the change")
    return result, turn_events(logs)


async def test_each_observed_turn_sums_its_predicted_strips_and_mismatches() -> None:
    result, events = await turn_after_a_head_change(OBSERVE)
    # both earlier replies' thinking fails the changed head; sent anyway, listed as allowed
    assert (result.predicted_strips, result.prediction_mismatches) == (2, 0)
    assert events == [(1, 2, 0, "info")]


async def test_a_turn_whose_predictions_disagree_is_summed_as_a_warning() -> None:
    wrong = attrs.evolve(OBSERVE, prefix_check=lambda model: False)  # test-only, disagrees
    result, events = await turn_after_a_head_change(wrong)
    assert (result.predicted_strips, result.prediction_mismatches) == (0, 2)
    assert events == [(1, 0, 2, "warning")]


async def test_an_enforcing_agent_logs_no_observed_summary() -> None:
    ada = runtime_on(Simulator(script=script)).register(Agent(name="ada", head=PROBE_HEAD))
    with capture_logs() as logs:
        result = await ada.run_turn("hello")
    assert (result.predicted_strips, result.prediction_mismatches) == (0, 0)
    assert turn_events(logs) == []
