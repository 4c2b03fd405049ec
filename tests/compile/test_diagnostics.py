"""Cache diagnostics (``Caching(diagnostics=True)``) against the simulator, through the real SDK.

The compiler claims byte-stable prefixes between window jumps; the provider's cache diagnostics
is its own check of that claim. Each request names the branch's previous reply; each reply keeps
the verdict, judged against what the compiler knew changed (a window jump, a fold, a head change,
a compaction: expected); anything else is a ``cache_prefix_unexpected`` warning.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import PROBE_HEAD, PROBE_TOOL, cli, runtime_on
from structlog.testing import capture_logs

from context_manager import (
    Caching,
    ContextManager,
    Fold,
    MemoryStore,
    SQLiteStore,
    Store,
    Window,
)
from context_manager.runtime import Agent
from context_manager.simulator import Simulator

DIAGNOSING = Caching(diagnostics=True)
GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
PAGE = {"name": "page", "description": "Page someone.", "input_schema": {"type": "object"}}
OTHER_MODEL = "claude-fable-5-1"  # reads Opus 5.5's blocks on the Claude API


def script(request: dict[str, Any]) -> list[Any]:
    return [{"type": "thinking", "thinking": "a thought"}, {"type": "text", "text": "noted " * 8}]


def plain(request: dict[str, Any]) -> list[Any]:
    return [{"type": "text", "text": "noted " * 8}]


class Session:
    """A manager with cache diagnostics on, calling the simulator through the SDK."""

    def __init__(self, cm: ContextManager | None = None, *, thinks: bool = True) -> None:
        self.cm = cm or ContextManager.open(MemoryStore(), namespace="ada", caching=DIAGNOSING)
        self.sim = Simulator(script=script if thinks else plain)
        self.client = self.sim.sync_client()
        self.head = PROBE_HEAD

    def call(self, text: str = "next") -> str:
        self.cm.add_message("user", text)
        result = self.cm.compile(self.head)
        message = self.client.beta.messages.create(**result.request)
        return self.cm.record_reply(message, result)

    def verdict(self, reply: str) -> dict[str, Any] | None:
        found = self.cm.get_message(reply).metadata.extra.get("cache_diagnostics")
        return found if isinstance(found, dict) else None


def test_the_first_request_opts_in_and_each_later_one_names_the_previous_reply() -> None:
    s = Session()
    first = s.call("hello")
    second = s.call("again")
    requests = s.sim.requests
    assert requests[0]["diagnostics"] == {"previous_message_id": None}
    sent_id = s.cm.get_message(first).metadata.extra["response_id"]
    assert sent_id == s.sim.responses[0]["id"]
    assert requests[1]["diagnostics"] == {"previous_message_id": sent_id}
    assert s.verdict(first) is None
    verdict = s.verdict(second)
    assert verdict is not None
    assert verdict["reason"] is None
    assert verdict["unexpected"] is False


def test_diagnostics_are_off_by_default() -> None:
    s = Session(ContextManager.open(MemoryStore(), namespace="ada"))
    reply = s.call("hello")
    s.call("again")
    assert all("diagnostics" not in r for r in s.sim.requests)
    assert "response_id" not in s.cm.get_message(reply).metadata.extra


def test_a_tool_change_is_an_expected_tools_divergence() -> None:
    s = Session()
    s.call("hello")
    s.head = attrs.evolve(s.head, tools=[PROBE_TOOL, GREP])
    with capture_logs() as logs:
        reply = s.call("with grep")
    assert s.verdict(reply) == {
        "previous": s.verdict(reply)["previous"],  # type: ignore[index]
        "reason": "tools_changed",
        "missed_tokens": s.sim.responses[-1]["diagnostics"]["cache_miss_reason"][
            "cache_missed_input_tokens"
        ],
        "expected": "tools_changed",
        "why": ["head change"],
        "unexpected": False,
    }
    assert not [e for e in logs if e["event"] == "cache_prefix_unexpected"]


def test_a_model_switch_is_an_expected_model_divergence() -> None:
    s = Session()
    s.call("hello")
    s.head = attrs.evolve(s.head, model=OTHER_MODEL)
    verdict = s.verdict(s.call("on fable"))
    assert verdict is not None
    assert (verdict["reason"], verdict["expected"], verdict["unexpected"]) == (
        "model_changed",
        "model_changed",
        False,
    )


def test_an_edit_of_an_earlier_message_is_an_unexpected_divergence_named_in_a_warning() -> None:
    s = Session(thinks=False)
    s.call("hello")
    opener = s.cm.messages()[0]
    s.cm.edit_message(opener.id, "hello there")
    with capture_logs() as logs:
        reply = s.call("after the edit")
    verdict = s.verdict(reply)
    assert verdict is not None
    assert (verdict["reason"], verdict["expected"], verdict["unexpected"]) == (
        "messages_changed",
        None,
        True,
    )
    warnings = [e for e in logs if e["event"] == "cache_prefix_unexpected"]
    assert [(w["reason"], w["reply"], w["log_level"]) for w in warnings] == [
        ("messages_changed", reply, "warning")
    ]


def test_a_dry_compile_shows_the_diagnostics_it_would_send_and_records_nothing() -> None:
    s = Session()
    first = s.call("hello")
    s.cm.add_message("user", "peek")
    dry = s.cm.compile(s.head, dry_run=True)
    sent = s.cm.get_message(first).metadata.extra["response_id"]
    assert dry.request["diagnostics"] == {"previous_message_id": sent}


def fold_summary(messages: Sequence[Any]) -> str:
    return f"(summary of {len(messages)} messages)"


async def test_a_200_turn_resident_session_has_only_the_expected_divergences(
    store: Store,
) -> None:
    """Window jumps, a fold, two tool changes and a model switch: every divergence the
    provider reports is one the compiler expected, and every expected change was reported."""
    sim = Simulator(script=script)
    runtime = runtime_on(sim, store)
    window = Window(max_tokens=3_000)
    ada = runtime.register(Agent(name="ada", head=PROBE_HEAD, strategy=window, caching=DIAGNOSING))
    events: list[tuple[int, str]] = []
    with capture_logs() as logs:
        for turn in range(200):
            if turn == 60:
                ada.head = attrs.evolve(ada.head, tools=[PROBE_TOOL, GREP])
                events.append((turn, "tools_changed"))
            if turn == 90:
                ada.context.strategy = Fold(fold_summary, trigger_tokens=2_000, keep_tokens=600)
            if turn == 91:
                ada.context.strategy = window
            if turn == 120:
                ada.head = attrs.evolve(ada.head, tools=[PROBE_TOOL, GREP, PAGE])
                events.append((turn, "tools_changed"))
            if turn == 150:
                ada.head = attrs.evolve(ada.head, model=OTHER_MODEL)
                events.append((turn, "model_changed"))
            await ada.run_turn(f"turn {turn}: what changed?")
    replies = [m for m in ada.context.messages() if m.role == "assistant"]
    store.close()
    verdicts = [r.metadata.extra.get("cache_diagnostics") for r in replies]
    assert len(replies) == 200
    assert verdicts[0] is None
    assert all(isinstance(v, dict) for v in verdicts[1:])
    reported = [(i, v["reason"]) for i, v in enumerate(verdicts) if v and v["reason"]]
    assert [e for e in logs if e["event"] == "cache_prefix_unexpected"] == []
    assert all(not v["unexpected"] for v in verdicts[1:] if v)
    # every reported divergence was expected, and every expected one was reported
    assert [(i, r) for i, r in reported] == [
        (i, v["expected"]) for i, v in enumerate(verdicts) if v and v["expected"]
    ]
    whys = [w for v in verdicts if v for w in v["why"]]
    assert whys.count("window jump") >= 2
    assert "fold" in whys
    assert [(turn, reason) for turn, reason in events if (turn, reason) in reported] == events
    assert [r for _, r in reported].count("model_changed") == 1


def test_transcript_usage_sums_expected_and_unexpected_divergences(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    store = SQLiteStore(db)
    s = Session(ContextManager.open(store, namespace="ada", caching=DIAGNOSING), thinks=False)
    s.call("hello")
    s.head = attrs.evolve(s.head, tools=[PROBE_TOOL, GREP])
    s.call("with grep")
    s.cm.edit_message(s.cm.messages()[0].id, "hello there")
    s.call("after the edit")
    s.call("steady")
    store.close()
    shown = cli("transcript", str(db), "--agent", "ada", "--usage")
    assert shown.returncode == 0, shown.stderr
    assert (
        "cache diagnostics: 3 requests compared, 1 divergence expected, 1 unexpected "
        "(messages_changed 1)"
    ) in shown.stdout
    as_json = cli("transcript", str(db), "--agent", "ada", "--usage", "--json")
    total = json.loads(as_json.stdout.splitlines()[-1])["total"]
    assert total["cache_diagnostics"]["unexpected"] == 1
    assert total["cache_diagnostics"]["expected"] == 1
    assert total["cache_diagnostics"]["unexpected_reasons"] == {"messages_changed": 1}


@pytest.mark.parametrize("diagnostics", [True, False])
def test_caching_keeps_its_api_with_diagnostics_keyword_only(diagnostics: bool) -> None:
    caching = Caching(True, "1h", diagnostics=diagnostics)
    assert (caching.enabled, caching.ttl, caching.diagnostics) == (True, "1h", diagnostics)


def test_a_comparison_still_pending_is_recorded_as_pending_and_never_unexpected() -> None:
    s = Session(thinks=False)
    s.call("hello")
    s.cm.add_message("user", "again")
    result = s.cm.compile(s.head)
    answer = {
        "id": "msg_pending",
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "diagnostics": {"cache_miss_reason": None},
    }
    with capture_logs() as logs:
        reply = s.cm.record_reply(answer, result)
    verdict = s.verdict(reply)
    assert verdict is not None
    assert (verdict["reason"], verdict["unexpected"]) == ("pending", False)
    assert s.cm.get_message(reply).metadata.extra["response_id"] == "msg_pending"
    assert [e["reason"] for e in logs if e["event"] == "cache_diagnosed"] == ["pending"]


def test_a_reopened_store_names_the_same_previous_reply_and_keeps_the_verdicts(
    store: Store,
) -> None:
    s = Session(ContextManager.open(store, namespace="ada", caching=DIAGNOSING))
    s.call("hello")
    second = s.call("again")
    s.cm.add_message("user", "third")
    before = s.cm.compile(s.head, dry_run=True).request["diagnostics"]
    reopened = ContextManager.open(store, namespace="ada", caching=DIAGNOSING)
    after = reopened.compile(s.head, dry_run=True).request["diagnostics"]
    assert (
        before
        == after
        == {"previous_message_id": reopened.get_message(second).metadata.extra["response_id"]}
    )
    verdict = reopened.get_message(second).metadata.extra["cache_diagnostics"]
    assert (verdict["reason"], verdict["unexpected"]) == (None, False)
