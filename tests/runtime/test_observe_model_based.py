"""Observe mode over the model-based suite's histories (issue 33).

The reliability machine's operations (turns with tool rounds, head and model changes, folds,
windows, edits, forks, releases, forced drops) run with ``ThinkingBinding(enforcement="observe")``
against an unenforced account (``Simulator(enforced=False)``). Every block the compiler predicts
to fail must be exactly what the account lists as ``thinking_mismatch_allowed``: no
``binding_prediction_mismatch`` event on any step. The enforced reference is not consulted (observe
mode sends what enforcement would leave out, on purpose). A forced prefix drop is skipped: such
an account lets a failing block through (provider rule 10); organization, end-user and model
drops still happen, and a block dropped for them is no unreported prediction (rule 11).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis.stateful import invariant, run_state_machine_as_test
from test_model_based import PROFILES, BranchModel, ReliabilityMachine, _model_settings

from context_manager import REASONING_LOSS_KIND
from context_manager.simulator import COMPACTION_MODELS, PREFIX_MISMATCH


def _unsupported(call: Any) -> bool:
    """A compaction request refused for its model (the step expects it: the manager falls
    back, ``ReliabilityMachine.compact``)."""
    return "compaction" in call.request and call.request.get("model") not in COMPACTION_MODELS


class ObserveMachine(ReliabilityMachine):
    """The reliability machine in observe mode on an unenforced account."""

    enforced = False
    enforcement = "observe"

    def _open(
        self, sqlite: bool, notices_as: str, readability: frozenset[tuple[int, int]] | None
    ) -> None:
        super()._open(sqlite, notices_as, readability)
        forced = self.sim.force_drop

        def force_drop(
            paths: Iterable[str | tuple[int, int]] | None = None,
            reason: str = PREFIX_MISMATCH,
            predicate: Any = None,
        ) -> None:
            if reason != PREFIX_MISMATCH:  # an unenforced account lets those through (rule 10)
                forced(paths, reason, predicate)

        self.sim.force_drop = force_drop  # type: ignore[method-assign]

    def _process(self) -> None:
        self.events.clear()  # the enforced reference does not apply in observe mode
        self.calls_seen = len(self.sim.calls)
        for ref in self.cm.list_branches():  # the notices are what was stored (model changes)
            stored = self.cm.messages(branch=ref.name, kind=REASONING_LOSS_KIND)
            texts = [m.content[0].text for m in stored]  # type: ignore[union-attr]
            self.branches.setdefault(f"{ref.id}@{ref.created}", BranchModel()).notices = texts

    @invariant()
    def the_simulator_and_the_reference_agree(self) -> None:
        self._process()
        mismatches = [e for e in self.logged if e["event"] == "binding_prediction_mismatch"]
        assert mismatches == []
        assert self.cm.prediction_mismatches == 0
        assert all(call.status == 200 or _unsupported(call) for call in self.sim.calls)


@pytest.mark.parametrize("profile", PROFILES)
def test_observe_mode_predicts_every_allowed_mismatch_on_the_machines_histories(
    profile: str,
) -> None:
    run_state_machine_as_test(ObserveMachine, settings=_model_settings(profile))
