"""Observe mode (``ThinkingBinding(enforcement="observe")``) against an unenforced account.

``Simulator(enforced=False)`` is an account the prefix check is not enforced on: without
``block_binding`` a failing block reaches the model and is listed as
``thinking_mismatch_allowed`` (VENDOR_RULES 10, 14). The compiler predicts those entries; each
test checks its predictions against the simulator's own report through the real SDK client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from helpers import PROBE_HEAD, PROBE_TOOL
from structlog.testing import capture_logs

from context_manager import (
    ContextManager,
    Fold,
    MemoryStore,
    ThinkingBinding,
    ThinkingStrip,
    ToolUseBlock,
)
from context_manager.simulator import Simulator

HEAD = PROBE_HEAD  # Opus 5.5: runs the prefix check, takes system messages
TOOL = PROBE_TOOL
OBSERVE = ThinkingBinding(enforcement="observe", append_changes=False)


def script(request: dict[str, Any]) -> list[Any]:
    last = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
    said = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
    return [{"type": "thinking", "thinking": "thought"}, {"type": "text", "text": f"Re: {said}"}]


class Session:
    """A manager in observe mode talking to an unenforced simulator account."""

    def __init__(self, binding: ThinkingBinding = OBSERVE) -> None:
        self.cm = ContextManager.open(MemoryStore(), namespace="ada", binding=binding)
        self.sim = Simulator(script=script, enforced=False)
        self.client = self.sim.sync_client()
        self.head = HEAD
        self.strips: list[ThinkingStrip] = []
        self.cm.on_thinking_strip(lambda strip, key: self.strips.append(strip))
        self.reports: list[tuple[tuple[str, ...], list[str]]] = []

    def call(self, text: str) -> dict[str, Any]:
        """One call; records what was predicted and what the simulator allowed."""
        self.cm.add_message("user", text)
        result = self.cm.compile(self.head)
        message = self.client.beta.messages.create(**result.request)
        allowed = [
            t.path
            for t in message.input_transformations or []
            if t.type == "thinking_mismatch_allowed"
        ]
        self.reports.append((result.predicted_mismatches, allowed))
        self.cm.record_reply(message, result)
        return result.request


def thinking_count(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] for b in m["content"] if b["type"] in ("thinking",))


def system_change(s: Session) -> None:
    s.head = attrs.evolve(s.head, system="You are Ada, on call.")


def tools_change(s: Session) -> None:
    s.head = attrs.evolve(
        s.head, tools=[TOOL, {"name": "grep", "input_schema": {"type": "object"}}]
    )


def edit(s: Session) -> None:
    s.cm.edit_message(s.cm.messages()[0].id, "an edited first question")


def fold(s: Session) -> None:
    size = s.cm.compile(s.head, dry_run=True).tokens
    s.cm.strategy = Fold(lambda covered: "earlier talk", trigger_tokens=size - 50, keep_tokens=60)


@pytest.mark.parametrize("change", [system_change, tools_change, edit, fold])
def test_observe_mode_predicts_exactly_what_an_unenforced_account_reports(
    change: Callable[[Session], None],
) -> None:
    s = Session()
    for text in ("hello", "second", "third"):
        s.call(text)
    change(s)
    with capture_logs() as logs:
        after = [s.call("after the change"), s.call("and once more")]

    assert [e for e in logs if e["event"] == "binding_prediction_mismatch"] == []
    assert s.cm.prediction_mismatches == 0
    assert all(predicted == tuple(allowed) for predicted, allowed in s.reports)
    if change is not fold:  # a fold replaces the old turns: nothing of them is sent
        assert s.reports[-2][0], "the change left blocks that fail: they were predicted"
        # every block enforcement would leave out was sent anyway, and no strip was told
        assert thinking_count(after[0]) == 3
        assert s.strips == []
    summaries = [e for e in logs if e["event"] == "binding_observed"]
    assert [e["mismatches"] for e in summaries] == [0, 0]


def test_observe_mode_sends_no_block_binding_but_the_binding_beta() -> None:
    s = Session()
    request = s.call("hello")

    assert "block_binding" not in request["thinking"]
    assert "thinking-binding-controls-2026-08-01" in request["betas"]
    enforced = Session(ThinkingBinding(append_changes=False)).call("hello")
    assert enforced["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}


def test_enforcement_leaves_out_what_observe_mode_sends_after_a_head_change() -> None:
    enforced, observed = Session(ThinkingBinding(append_changes=False)), Session()
    for s in (enforced, observed):
        s.call("hello")
        s.call("second")
        system_change(s)
        s.call("after the change")

    assert thinking_count(enforced.cm.compile(enforced.head, dry_run=True).request) == 1
    assert thinking_count(observed.cm.compile(observed.head, dry_run=True).request) == 3
    assert [strip.cause for strip in enforced.strips] == ["head"]
    assert observed.strips == []


def test_a_prefix_table_that_disagrees_gives_unpredicted_mismatch_events() -> None:
    """A test-only prefix table saying Opus 5.5 runs no prefix check (the simulator's says it
    does): the compiler predicts nothing, the simulator lists both old blocks."""
    s = Session(attrs.evolve(OBSERVE, prefix_check=lambda model: False))
    s.call("hello")
    s.call("second")
    system_change(s)
    with capture_logs() as logs:
        s.call("after the change")

    mismatches = [e for e in logs if e["event"] == "binding_prediction_mismatch"]
    assert [(e["kind"], e["paths"], e["log_level"]) for e in mismatches] == [
        ("unpredicted", ["messages.1.content.0", "messages.3.content.0"], "warning")
    ]
    assert s.cm.prediction_mismatches == 2


def test_bound_settings_the_account_does_not_bind_give_unreported_mismatch_events() -> None:
    """``binds_settings=True`` predicts a settings change fails every block; the simulator
    (like the API, VENDOR_RULES 2) does not compare settings and reports nothing."""
    s = Session(attrs.evolve(OBSERVE, binds_settings=True))
    s.call("hello")
    s.call("second")
    s.head = attrs.evolve(s.head, settings={**s.head.settings, "max_tokens": 4000})
    with capture_logs() as logs:
        s.call("after the change")

    mismatches = [e for e in logs if e["event"] == "binding_prediction_mismatch"]
    assert [(e["kind"], e["paths"]) for e in mismatches] == [
        ("unreported", ["messages.1.content.0", "messages.3.content.0"])
    ]
    assert s.cm.prediction_mismatches == 2


def tool_script(request: dict[str, Any]) -> list[Any]:
    """Think, then call the tool when asked, else answer."""
    last = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
    said = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
    if "tool" in said:
        return [
            {"type": "thinking", "thinking": "let me look"},
            {"type": "tool_use", "name": TOOL["name"], "input": {}},
        ]
    return [{"type": "thinking", "thinking": "thought"}, {"type": "text", "text": "Done."}]


def test_a_head_change_inside_an_open_tool_round_is_predicted_and_sent_as_recorded() -> None:
    """VENDOR_RULES 6: the in-flight reply is never altered; in observe mode its failing
    thinking goes out and the simulator's report matches the prediction."""
    s = Session()
    s.sim = Simulator(script=tool_script, enforced=False)
    s.client = s.sim.sync_client()
    s.call("hello")
    s.call("please use the tool")
    use = next(
        b
        for b in s.cm.messages()[-1].content
        if isinstance(b, ToolUseBlock) and b.name == TOOL["name"]
    )
    s.cm.add_message("user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}])
    system_change(s)
    with capture_logs() as logs:
        result = s.cm.compile(s.head)
        message = s.client.beta.messages.create(**result.request)
        s.cm.record_reply(message, result)

    allowed = [t.path for t in message.input_transformations or []]
    assert result.predicted_mismatches == tuple(allowed)
    assert len(allowed) == 2
    assert [e for e in logs if e["event"] == "binding_prediction_mismatch"] == []
    assert s.strips == []
