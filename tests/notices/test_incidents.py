"""Drop incidents: told when they open or grow, scoped by branch, and alerted to operators."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from structlog.testing import capture_logs

from context_manager import PlacedDrops, ReplyDrop, RoundDrop, UnplacedDrop
from notices import ALERT_EVENT, IncidentStep, ThinkingLossIncidents
from notices._incidents import MAX_ALERT_PATHS

PREFIX = "prefix_binding_mismatch"
MODEL = "model_binding_mismatch"
NONE = PlacedDrops()


def drops(placed: int = 0, unplaced: int = 0, reason: str = PREFIX) -> PlacedDrops:
    """``placed`` blocks on distinct stored replies and ``unplaced`` malformed ones."""
    return PlacedDrops(
        replies=tuple(
            ReplyDrop(f"msg_{k}", 0, reason, f"messages.{k}.content.0") for k in range(placed)
        ),
        unplaced=tuple(
            UnplacedDrop(f"messages.{k}.content", reason, "malformed path") for k in range(unplaced)
        ),
    )


def alerts(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The operators' alert events among captured logs."""
    return [entry for entry in logs if entry["event"] == ALERT_EVENT]


def test_an_incident_is_told_when_it_opens_or_grows_and_closes_on_a_call_without_drops() -> None:
    """First drop told, same count silent, growth told, none closes, the next drop opens anew."""
    incidents = ThinkingLossIncidents()
    told = []
    with capture_logs() as logs:
        for call in (drops(1), drops(1), drops(2), drops(2), drops(1), NONE, drops(1)):
            told.append(incidents.observe("ada", "main@1", call).tell)
            incidents._check()

    assert told == [True, False, True, False, False, False, True]
    assert [event["placed"] for event in alerts(logs)] == [1, 2, 1]
    assert [event["opened"] for event in alerts(logs)] == [True, False, True]


def test_a_call_on_another_branch_closes_the_incident_and_opens_a_new_one() -> None:
    """The same count on another branch is a new incident, told and alerted again."""
    incidents = ThinkingLossIncidents()
    with capture_logs() as logs:
        first = incidents.observe("ada", "main@1", drops(2))
        other = incidents.observe("ada", "fork@2", drops(2))
        back = incidents.observe("ada", "main@1", drops(1))
        incidents._check()

    assert (first.tell, other.tell, back.tell) == (True, True, True)
    assert [event["branch"] for event in alerts(logs)] == ["main@1", "fork@2", "main@1"]


def test_agents_have_separate_incidents() -> None:
    """One agent's open incident does not silence another's first drop."""
    incidents = ThinkingLossIncidents()

    ada = incidents.observe("ada", "main@1", drops(1))
    bob = incidents.observe("bob", "main@1", drops(1))

    assert (ada.tell, bob.tell) == (True, True)
    assert incidents.open_incidents() == 2


def test_the_alert_names_agent_branch_counts_reasons_and_paths() -> None:
    """One warning per incident that opens, carrying everything an operator needs."""
    incidents = ThinkingLossIncidents()
    call = PlacedDrops(
        replies=(
            ReplyDrop("msg_2", 0, PREFIX, "messages.1.content.0"),
            ReplyDrop("msg_7", None, PREFIX, "messages.1.content.0"),
        ),
        rounds=(RoundDrop(0, 0, MODEL, "messages.4.content.0"),),
        unplaced=(UnplacedDrop("messages.x.content.0", PREFIX, "malformed path"),),
    )

    with capture_logs() as logs:
        step = incidents.observe("ada", "main@1", call)

    expected = [
        {
            "event": "thinking_binding_loss",
            "log_level": "warning",
            "agent": "ada",
            "branch": "main@1",
            "opened": True,
            "placed": 2,
            "unplaced": 1,
            "replies": 3,
            "reasons": [PREFIX, MODEL],
            "paths": ["messages.1.content.0", "messages.4.content.0", "messages.x.content.0"],
            "paths_total": 3,
        }
    ]
    assert expected == logs
    assert IncidentStep(True, True, 2, 1, 0, 2) == step


def test_a_call_none_of_whose_drops_can_be_placed_alerts_once_and_tells_nothing() -> None:
    """Unplaced-only calls go to the operators' alert alone, once per incident."""
    incidents = ThinkingLossIncidents()
    with capture_logs() as logs:
        first = incidents.observe("ada", "main@1", drops(unplaced=2))
        again = incidents.observe("ada", "main@1", drops(unplaced=2))
        incidents._check()

    assert (first.tell, again.tell) == (False, False)
    assert [(event["placed"], event["unplaced"]) for event in alerts(logs)] == [(0, 2)]


def test_a_call_without_placed_blocks_closes_the_residents_incident() -> None:
    """After an unplaced-only call, the next placed drop is told again at the same count."""
    incidents = ThinkingLossIncidents()

    incidents.observe("ada", "main@1", drops(1, unplaced=1))
    silent = incidents.observe("ada", "main@1", drops(unplaced=1))
    reopened = incidents.observe("ada", "main@1", drops(1))
    incidents._check()

    assert (silent.tell, reopened.tell) == (False, True)


def test_a_retracted_step_is_told_again_by_the_next_call_of_the_same_count() -> None:
    """A line that could not be made does not count: retracting restores the incident's most."""
    incidents = ThinkingLossIncidents()
    incidents.observe("ada", "main@1", drops(1))
    grown = incidents.observe("ada", "main@1", drops(3))

    incidents.retract("ada", "main@1", grown)
    incidents._check()

    assert incidents.observe("ada", "main@1", drops(3)).tell
    assert not incidents.observe("ada", "main@1", drops(3)).tell


def test_a_forgotten_agent_starts_a_new_incident() -> None:
    """``forget`` closes the agent's incident (only the named branch's, when one is given)."""
    incidents = ThinkingLossIncidents()
    incidents.observe("ada", "main@1", drops(1))

    incidents.forget("ada", "other@3")
    kept = incidents.observe("ada", "main@1", drops(1)).tell
    incidents.forget("ada")
    incidents._check()

    assert not kept
    assert incidents.open_incidents() == 0
    assert incidents.observe("ada", "main@1", drops(1)).tell


def test_an_alert_lists_a_bounded_number_of_paths() -> None:
    """A pathological response cannot flood the log; the total is still reported."""
    incidents = ThinkingLossIncidents()
    with capture_logs() as logs:
        incidents.observe("ada", "main@1", drops(unplaced=500))

    [event] = alerts(logs)
    assert (len(event["paths"]), event["paths_total"]) == (MAX_ALERT_PATHS, 500)
