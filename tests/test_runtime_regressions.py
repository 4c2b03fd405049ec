"""Regressions of issue 17 in the runtime: turns, notices and replies, on the simulator."""

from __future__ import annotations

import pytest
from helpers import THINKING_HEAD, calling_script, runtime_on

from context_manager.runtime import Agent
from context_manager.simulator import Simulator


@pytest.mark.parametrize("trigger", ["   ", "", "\n\t", [{"type": "text", "text": "  "}]])
async def test_a_blank_trigger_is_refused_and_nothing_is_stored(trigger: object) -> None:
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim).register(Agent("ada", THINKING_HEAD))
    with pytest.raises(ValueError, match="blank"):
        await ada.run_turn(trigger)
    assert ada.context.messages(limit=None) == []
    assert sim.requests == []
