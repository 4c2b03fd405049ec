"""Server-side context editing from the library (issue #30, VENDOR_RULES 29): ``ContextEditing``
adds ``context_management`` and its beta to every compiled request, the simulator clears old tool
results in its own copy, no thinking is lost, and every reply records the applied edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    PROBE_HEAD,
    THINKING_HEAD,
    calling_script,
    invalid_calls,
    notice_texts,
    runtime_on,
)

from context_manager import (
    ApiTokenCounter,
    ClearThinking,
    ClearToolUses,
    Compact,
    ContextEditing,
    ContextManager,
    Fold,
    MemoryStore,
    SQLiteStore,
    Store,
)
from context_manager._cli._main import main
from context_manager._compile._fold import SUMMARY_KIND
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
    assert len(result.edits) == len(result.replies) == 2
    assert result.edits[0].cleared_tool_uses == 1  # the call: two old results, one kept
    assert result.edits[1].cleared_tool_uses == 2  # the answer: three results, one kept
    assert result.edits[1].cleared_input_tokens > 0

    assert seeing.results[-1][:2] == [CLEARED_RESULT, CLEARED_RESULT]
    assert invalid_calls(sim) == []
    recorded = [
        m.metadata.extra.get("context_management")
        for m in ada.context.messages()
        if m.role == "assistant"
    ]
    assert recorded[-1] is not None
    assert recorded[-1]["applied_edits"][0]["cleared_tool_uses"] == 2


def summaries(agent: Agent) -> int:
    return sum(1 for m in agent.context.messages() if m.metadata.kind == SUMMARY_KIND)


@pytest.mark.parametrize("editing", [None, EAGER])
async def test_a_fold_runs_only_when_the_request_as_the_server_edits_it_still_does_not_fit(
    editing: ContextEditing | None,
) -> None:
    sim = Simulator(script=default_script)
    runtime = runtime_on(sim)
    fold = Fold(lambda covered: f"summary of {len(covered)}", trigger_tokens=1_200)
    ada = runtime.register(
        Agent(
            "ada",
            HEAD,
            tools={"read_log": lambda _: "line " * 300},
            strategy=fold,
            editing=editing,
        )
    )
    for _ in range(4):
        await ada.run_turn("please use read_log")

    if editing is None:
        assert summaries(ada) >= 1  # the client folds: the kept turns lose their thinking
    else:
        assert summaries(ada) == 0  # the server's clearing keeps the window inside the trigger
        assert sim.requests[-1]["context_management"] == EAGER.to_wire()
        assert invalid_calls(sim) == []


async def test_exact_counts_are_learned_from_the_request_as_sent_not_as_edited() -> None:
    sim = Simulator(script=calling_script())
    counter = ApiTokenCounter(sim.sync_client())
    clear_all = ContextEditing(ClearToolUses(trigger_tokens=10, keep=0))
    edited = ContextManager.open(
        MemoryStore(), namespace="ada", editing=clear_all, estimator=counter
    )
    plain = ContextManager.open(
        MemoryStore(), namespace="bea", estimator=ApiTokenCounter(sim.sync_client())
    )
    async with sim.client() as client:
        for cm in (edited, plain):
            cm.add_message("user", "please use tool")
            first = cm.compile(HEAD)
            reply = await client.beta.messages.create(**first.request)
            cm.record_reply(reply, first)
            calls = [b for b in reply.content if b.type == "tool_use"]
            cm.add_message(
                "user",
                [
                    {"type": "tool_result", "tool_use_id": c.id, "content": "ok " * 300}
                    for c in calls
                ],
            )

    assert edited.compile(HEAD, dry_run=True).request["context_management"] == clear_all.to_wire()
    answered = [c.response for c in sim.count_calls if "context_management" in c.request]
    assert answered
    assert all(a["context_management"]["original_input_tokens"] > 0 for a in answered)
    with_editing = edited.compile(HEAD, dry_run=True).tokens
    without = plain.compile(HEAD, dry_run=True).tokens
    assert abs(with_editing - without) <= 30  # the same history; only the ids and beta differ


async def test_transcript_usage_shows_what_the_server_cleared_per_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    runtime = runtime_on(Simulator(), store)
    ada = runtime.register(
        Agent("ada", HEAD, tools={"read_log": lambda _: "line " * 300}, editing=EAGER)
    )
    turns = [await ada.run_turn("please use read_log") for _ in range(3)]
    store.close()

    assert main(["transcript", str(path), "--usage", "--json"]) == 0
    per_turn = [json.loads(line) for line in capsys.readouterr().out.splitlines()][:-1]
    assert main(["transcript", str(path), "--usage"]) == 0
    text = capsys.readouterr().out

    assert "cleared_tool_uses" not in per_turn[0]  # one result so far: nothing to clear
    assert [t.get("cleared_tool_uses", 0) for t in per_turn] == [
        sum(e.cleared_tool_uses for e in turn.edits) for turn in turns
    ]
    assert per_turn[2]["cleared_tool_uses"] == 3
    assert [c["cleared_tool_uses"] for c in per_turn[2]["cleared_by_call"]] == [
        e.cleared_tool_uses for e in turns[2].edits
    ]  # each call of the turn: what the server cleared on it
    assert [c["cleared_input_tokens"] for c in per_turn[2]["cleared_by_call"]] == [
        e.cleared_input_tokens for e in turns[2].edits
    ]
    tokens = sum(e.cleared_input_tokens for e in turns[2].edits)
    assert f"turn 3: the server cleared 3 tool uses and 0 thinking turns ({tokens} input" in text
    per_call = ", ".join(
        f"{e.cleared_tool_uses} uses / {e.cleared_input_tokens} tokens" for e in turns[2].edits
    )
    assert f"per call: {per_call}" in text


async def test_thinking_the_server_clears_is_told_once_per_growth_in_the_count_form() -> None:
    sim = Simulator()
    runtime = runtime_on(sim)
    editing = ContextEditing(clear_tool_uses=None, clear_thinking=ClearThinking(keep_turns=1))
    ada = runtime.register(Agent("ada", HEAD, editing=editing))
    told = []
    for text in ("first", "second", "third", "fourth"):
        result = await ada.run_turn(text)
        told.append(len(result.notices))

    assert sim.requests[-1]["context_management"] == editing.to_wire()
    assert [e.cleared_thinking_turns for e in result.edits] == [2]
    assert told == [0, 0, 1, 1]  # the third call clears one turn, the fourth one more
    line = (
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        "reasoning behind at least one of your replies. Their words are still here. Re-read "
        "before relying on an earlier decision."
    )
    assert notice_texts(ada) == [line, line]
    assert invalid_calls(sim) == []


@pytest.mark.parametrize("editing", [None, ContextEditing(None, ClearThinking(keep_turns=1))])
async def test_with_exact_counts_a_fold_is_judged_by_the_count_of_the_request_as_edited(
    editing: ContextEditing | None,
) -> None:
    sim = Simulator()
    runtime = runtime_on(sim)
    fold = Fold(lambda covered: f"summary of {len(covered)}", trigger_tokens=800)
    ada = runtime.register(Agent("ada", HEAD, strategy=fold, editing=editing))
    ada.context.estimator = ApiTokenCounter(sim.sync_client())
    for text in ("first", "second", "third", "fourth", "fifth"):
        await ada.run_turn(f"{text} question " * 20)

    edited = [c for c in sim.count_calls if "context_management" in c.request]
    if editing is None:
        assert summaries(ada) == 1  # the sent window passes the trigger
        assert edited == []
    else:
        # count_tokens answers the window with old turns' thinking cleared: it never passes
        assert summaries(ada) == 0
        answers = [(c.response["input_tokens"], c.response["context_management"]) for c in edited]
        assert answers
        assert all(sent <= m["original_input_tokens"] for sent, m in answers)
        assert any(sent < m["original_input_tokens"] for sent, m in answers)
    assert invalid_calls(sim) == []


async def test_no_request_that_asks_for_or_carries_a_compaction_carries_the_edits() -> None:
    sim = Simulator(script=calling_script("probe"))
    runtime = runtime_on(sim)
    ada = runtime.register(
        Agent(
            "ada",
            PROBE_HEAD,
            tools={"probe": lambda _: "fine " * 200},
            strategy=Compact(300),
            editing=EAGER,
        )
    )
    for n in range(8):
        await ada.run_turn(f"Turn {n}: the deploy log again. " * 8 + " Please use tool probe.")
    await ada.run_turn("And what now?")

    asked = [c for c in sim.calls if "compaction" in c.request]
    carrying = [
        c
        for c in sim.calls
        if isinstance(c.request["messages"][0]["content"], list)
        and c.request["messages"][0]["content"][0].get("type") == "compaction"
    ]
    plain = [c for c in sim.calls if c not in asked and c not in carrying]
    assert asked
    assert carrying
    assert all("context_management" not in c.request for c in asked + carrying)
    assert all(c.request["context_management"] == EAGER.to_wire() for c in plain)
    assert all(c.status == 200 for c in sim.calls)  # the API refuses the two together
    assert invalid_calls(sim) == []
