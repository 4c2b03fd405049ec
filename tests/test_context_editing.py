"""Server-side context editing from the library (issue #30, VENDOR_RULES 29): ``ContextEditing``
adds ``context_management`` and its beta to every compiled request, the simulator clears old tool
results in its own copy, no thinking is lost, and every reply records the applied edits."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import THINKING_HEAD, calling_script, invalid_calls, runtime_on

from context_manager import (
    ClearThinking,
    ClearToolUses,
    ContextEditing,
    ContextManager,
    Store,
)
from context_manager.runtime import Agent
from context_manager.simulator import CLEARED_RESULT, EDITING_BETA, Simulator, default_script

HEAD = THINKING_HEAD
EAGER = ContextEditing(ClearToolUses(trigger_tokens=10, keep=1))
"""Clears every tool result but the newest as soon as a request has any."""


def test_the_settings_become_the_documented_wire_shape() -> None:
    editing = ContextEditing(
        ClearToolUses(
            trigger_tokens=30_000,
            keep=2,
            clear_at_least=5_000,
            exclude_tools=["memory"],
            clear_inputs=True,
        ),
        clear_thinking=ClearThinking(keep_turns=None),
    )
    assert editing.to_wire() == {
        "edits": [
            {"type": "clear_thinking_20251015", "keep": "all"},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 2},
                "clear_at_least": {"type": "input_tokens", "value": 5_000},
                "exclude_tools": ["memory"],
                "clear_tool_inputs": True,
            },
        ]
    }
    assert ContextEditing().clear_thinking is None
    with pytest.raises(ValueError, match="keep must be a non-negative integer"):
        ClearToolUses(keep=-1)


async def test_a_compiled_request_carries_the_edits_and_the_reply_records_what_was_applied(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada", editing=EAGER)
    plain = ContextManager.open(store, namespace="bea")
    replies: list[Any] = []
    async with sim.client() as client:
        for text in ("please use tool", None, "please use tool", None, "how is it?"):
            if text is not None:
                cm.add_message("user", text)
            else:
                calls = [b for b in replies[-1].content if b.type == "tool_use"]
                results = [
                    {"type": "tool_result", "tool_use_id": c.id, "content": "ok " * 300}
                    for c in calls
                ]
                cm.add_message("user", results)
            result = cm.compile(HEAD)
            reply = await client.beta.messages.create(**result.request)
            cm.record_reply(reply, result)
            replies.append(reply)
        plain.add_message("user", "hello")
        bare = plain.compile(HEAD).request

    last = sim.requests[-1]
    assert last["context_management"] == EAGER.to_wire()
    assert EDITING_BETA in sim.calls[-1].betas
    assert "context_management" not in bare
    assert EDITING_BETA not in bare.get("betas", [])
    stored = cm.messages()[-1]
    edits = stored.metadata.extra["context_management"]["applied_edits"]
    assert edits[0]["type"] == "clear_tool_uses_20250919"
    assert edits[0]["cleared_tool_uses"] == 1
    assert edits[0]["cleared_input_tokens"] > 0
    assert invalid_calls(sim) == []  # the full history was sent: no thinking refused or dropped


class Seeing:
    """The default script, keeping the tool results the model saw."""

    def __init__(self) -> None:
        self.results: list[list[str]] = []

    def __call__(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        self.results.append(
            [
                block["content"][0]["text"]
                for message in request["messages"]
                if isinstance(message["content"], list)
                for block in message["content"]
                if block["type"] == "tool_result" and isinstance(block["content"], list)
            ]
        )
        return default_script(request)


async def test_an_agent_with_editing_loses_no_reasoning_while_the_server_clears_old_results() -> (
    None
):
    seeing = Seeing()
    sim = Simulator(script=seeing)
    runtime = runtime_on(sim)
    ada = runtime.register(
        Agent("ada", HEAD, tools={"read_log": lambda _: "line " * 300}, editing=EAGER)
    )
    for _ in range(3):
        result = await ada.run_turn("please use read_log")
        assert result.notices == ()

    assert seeing.results[-1][:2] == [CLEARED_RESULT, CLEARED_RESULT]
    assert invalid_calls(sim) == []
    recorded = [
        m.metadata.extra.get("context_management")
        for m in ada.context.messages()
        if m.role == "assistant"
    ]
    assert recorded[-1] is not None
    assert recorded[-1]["applied_edits"][0]["cleared_tool_uses"] == 2
