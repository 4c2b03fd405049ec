"""The library's on-demand server compaction (issue 29, provider rules 23-25), foreground.

Through the real SDK client against the simulator, which enforces rules 23-27 on its own: a
resident agent with ``Compact`` compacts at the end of a turn once its window passes the
trigger; the block goes first on every later request, the kept reply's thinking is still sent
and verifies; a later compaction covers the earlier block; no block leaves the history as it
was; a reopened store renders the same request.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest
from helpers import (
    GREP_TOOL,
    LONG_TURN,
    PROBE_HEAD,
    calling_script,
    cli,
    compaction_calls,
    invalid_calls,
    runtime_on,
    thinking_signatures,
)

from context_manager import (
    Compact,
    ContextManager,
    Fold,
    Head,
    SQLiteStore,
    Store,
    ThinkingBlock,
    Window,
)
from context_manager.runtime import Agent
from context_manager.simulator import PREFIX_MISMATCH, Simulator
from context_manager.simulator._system import offered_tools

LONG = LONG_TURN
TRIGGER = 300


def compactions(cm: ContextManager) -> list[Any]:
    return cm.messages(kind="compaction")


def first_block(request: dict[str, Any]) -> dict[str, Any]:
    first: dict[str, Any] = request["messages"][0]["content"][0]
    return first


async def agent_past_the_trigger(sim: Simulator, store: Store, asks: int = 1) -> Agent:
    """An agent with ``Compact``, run turn by turn (the second with a tool round) until
    ``asks`` compaction requests were sent."""
    runtime = runtime_on(sim, store)
    ada = runtime.register(
        Agent("ada", PROBE_HEAD, tools={"probe": lambda _: "fine"}, strategy=Compact(TRIGGER))
    )
    for n in range(12):
        await ada.run_turn(f"Turn {n}: {LONG}" + (" Please use tool probe." if n == 1 else ""))
        if len(compaction_calls(sim)) >= asks:
            break
    return ada


async def test_a_resident_agent_compacts_at_a_turn_end_and_sends_the_block_first(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script("probe"))
    ada = await agent_past_the_trigger(sim, store)
    assert len(compaction_calls(sim)) == 1
    [block] = compactions(ada.context)
    kept = ada.context.messages()[-2]  # the reply to the request that was compacted
    assert kept.role == "assistant"
    assert ada.context.messages()[-1] == block

    await ada.run_turn("And what now?")

    sent = sim.calls[-1].request
    assert first_block(sent)["type"] == "compaction"
    assert "compact-2026-09-04" in sim.calls[-1].betas
    # the kept reply's thinking is still sent, after the block, and verifies
    assert sent["messages"][0]["content"][1]["type"] == "thinking"
    assert len(thinking_signatures(sent)) == 1
    assert block.metadata.extra["covers_upto"] < kept.sequence
    assert invalid_calls(sim) == []


async def test_a_drop_of_the_kept_reply_sent_beside_the_block_is_placed_on_that_reply(
    store: Store,
) -> None:
    """The kept reply shares the block's assistant message (rule 24): a prefix drop of its
    thinking there is placed on it and released, so no later request sends it again (its
    place in the merged message was once counted twice, and the drop went unplaced)."""
    sim = Simulator(script=calling_script("probe"))
    ada = await agent_past_the_trigger(sim, store)
    kept = ada.context.messages()[-2]
    sim.force_drop(paths=["messages.0.content.1"], reason=PREFIX_MISMATCH)

    await ada.run_turn("And what now?")
    await ada.run_turn("Anything else?")

    dropped = sim.calls[-2]
    assert [c.path for c in dropped.dropped] == [(0, 1)]
    [signature] = [b.signature for b in kept.content if isinstance(b, ThinkingBlock)]
    assert dropped.request["messages"][0]["content"][1]["signature"] == signature
    assert signature not in thinking_signatures(sim.calls[-1].request)


async def test_thinking_kept_by_a_compaction_without_preserved_thinking_is_left_out_when_checked(
    store: Store,
) -> None:
    """Rule 25 (a): a compaction on a model that does not preserve thinking (Mythos 5.1 runs
    no prefix check) keeps the reply's thinking valid only for such models; once a model with
    the check reads the history, the kept thinking is left out (cause ``messages``), never
    sent for the API to drop, while thinking made after the block is still sent."""
    sim = Simulator(script=calling_script("probe"))
    runtime = runtime_on(sim, store)
    mythos = attrs.evolve(PROBE_HEAD, model="claude-mythos-5-1")
    ada = runtime.register(
        Agent("ada", mythos, tools={"probe": lambda _: "fine"}, strategy=Compact(TRIGGER))
    )
    for n in range(12):
        await ada.run_turn(f"Turn {n}: {LONG}")
        if compaction_calls(sim):
            break
    [block] = compactions(ada.context)
    assert block.metadata.extra["preserving"] is False
    kept = ada.context.messages()[-2]
    [kept_signature] = [b.signature for b in kept.content if isinstance(b, ThinkingBlock)]
    await ada.run_turn("Still on Mythos?")
    assert kept_signature in thinking_signatures(sim.calls[-1].request)  # no check: kept

    strips: list[Any] = []
    ada.context.on_thinking_strip(lambda strip, key: strips.append(strip))
    ada.head = attrs.evolve(mythos, model="claude-fable-5-1")  # reads Mythos 5.1's blocks
    result = await ada.run_turn("Now on Fable.")
    await ada.run_turn("And again.")

    assert invalid_calls(sim) == []
    for call in sim.calls[-2:]:
        sent = thinking_signatures(call.request)
        assert kept_signature not in sent
        assert sent  # the thinking made after the block still goes
    assert [(s.cause, s.replies) for s in strips] == [("messages", (kept.id,))]
    assert result.notices == ()  # a compaction between turns is not told (SPEC 9)


async def test_the_compaction_request_is_the_last_request_sent_with_the_compaction_field(
    store: Store,
) -> None:
    sim = Simulator(script=calling_script("probe"))
    await agent_past_the_trigger(sim, store)
    [ask] = compaction_calls(sim)
    before = sim.calls[sim.calls.index(ask) - 1].request
    assert ask.request["messages"] == before["messages"]
    assert ask.request.get("system") == before.get("system")
    assert ask.request["tools"] == before["tools"]
    assert ask.request["compaction"] == {"type": "summarize"}
    assert ask.status == 200


async def test_a_second_compaction_covers_the_previous_block(store: Store) -> None:
    sim = Simulator(script=calling_script("probe"))
    ada = await agent_past_the_trigger(sim, store, asks=2)
    assert len(compactions(ada.context)) == 2
    second = compaction_calls(sim)[1].request
    assert first_block(second)["type"] == "compaction"  # the old block is summarized again

    await ada.run_turn("Still there?")

    sent = sim.calls[-1].request
    blocks = [b for m in sent["messages"] for b in m["content"] if b["type"] == "compaction"]
    assert len(blocks) == 1
    assert "[earlier summary]" in blocks[0]["content"]
    assert len(thinking_signatures(sent)) >= 1
    assert invalid_calls(sim) == []


async def test_a_compaction_that_returns_no_block_leaves_the_history_as_it_was(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    sim = Simulator(script=calling_script("probe"))
    sim.fail_compaction_next(outcome="max_tokens")
    with caplog.at_level(logging.INFO):
        ada = await agent_past_the_trigger(sim, store)
    assert len(compaction_calls(sim)) == 1
    assert compactions(ada.context) == []
    assert "compaction_skipped" in caplog.text
    stored = ada.context.messages()

    await ada.run_turn("And now?")  # compacted after this turn instead

    assert ada.context.messages()[: len(stored)] == stored

    assert len(compaction_calls(sim)) == 2
    assert len(compactions(ada.context)) == 1
    assert first_block(sim.calls[-2].request)["type"] != "compaction"
    assert invalid_calls(sim) == []


async def test_a_529_compaction_unavailable_is_retried_by_the_runtime(store: Store) -> None:
    sim = Simulator(script=calling_script("probe"))
    sim.fail_compaction_next(outcome="compaction_unavailable")
    ada = await agent_past_the_trigger(sim, store)
    assert [c.status for c in compaction_calls(sim)] == [529, 200]
    assert len(compactions(ada.context)) == 1


async def test_a_model_that_cannot_compact_falls_back_with_one_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fold = Fold(lambda covered: f"{len(covered)} messages", trigger_tokens=10_000)
    head = Head(
        model="claude-haiku-5-5",
        system=PROBE_HEAD.system,
        tools=PROBE_HEAD.tools,
        settings=PROBE_HEAD.settings,
    )
    sim = Simulator()
    runtime = runtime_on(sim, store)
    ada = runtime.register(Agent("ada", head, strategy=Compact(TRIGGER, fallback=fold)))
    with caplog.at_level(logging.WARNING):
        for n in range(4):
            await ada.run_turn(f"Turn {n}: {LONG}")
    assert ada.context.strategy is fold
    assert caplog.text.count("compaction_fallback") == 1
    assert len(compaction_calls(sim)) == 1
    assert compactions(ada.context) == []


async def test_a_reopened_sqlite_store_renders_the_same_request_after_a_compaction(
    sqlite_path: Any,
) -> None:
    sim = Simulator(script=calling_script("probe"))
    ada = await agent_past_the_trigger(sim, SQLiteStore(sqlite_path))
    ada.context.add_message("user", "One more question.")
    before = ada.context.compile(PROBE_HEAD, dry_run=True).request

    reopened = ContextManager.open(SQLiteStore(sqlite_path), namespace=ada.context.namespace)
    after = reopened.compile(PROBE_HEAD, dry_run=True).request

    assert after == before
    assert first_block(after)["type"] == "compaction"
    reply = await sim.client().beta.messages.create(**reopened.compile(PROBE_HEAD).request)
    assert reply.input_transformations in (None, [])
    assert invalid_calls(sim) == []


async def test_a_tool_added_before_a_compaction_is_offered_again_after_the_next_user_turn(
    store: Store,
) -> None:
    sim = Simulator()
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada", strategy=Compact(50))
    grown = Head(
        model=PROBE_HEAD.model,
        system=PROBE_HEAD.system,
        tools=[*PROBE_HEAD.tools, GREP_TOOL],
        settings=PROBE_HEAD.settings,
    )
    for n, head in enumerate((PROBE_HEAD, grown, grown)):
        cm.add_message("user", f"Question {n}: {LONG}")
        result = await cm.compile_async(head)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
    assert await cm.compact_async(client) is not None

    cm.add_message("user", "Search the logs.")
    result = await cm.compile_async(grown)

    sent = result.request["messages"]
    assert [m["role"] for m in sent] == ["assistant", "user", "system"]
    assert sent[-1]["content"] == [
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}
    ]
    assert [b["type"] for b in sent[0]["content"]] == ["compaction", "thinking", "text"]
    reply = await client.beta.messages.create(**result.request)
    assert reply.input_transformations in (None, [])
    assert invalid_calls(sim) == []


def test_run_compacts_on_the_server_with_slash_compact_and_the_next_turn_keeps_going(
    tmp_path: Any,
) -> None:
    path = tmp_path / "agent.db"
    session = "\n".join(["/compact", "hello there", "/compact", "and now?", "/quit"])

    done = cli("run", "--db", path, "--agent", "ada", stdin=session + "\n")

    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert any(line.startswith("nothing to compact now") for line in said)
    assert any(line.startswith("compacted into block #") for line in said)
    assert "!" not in "".join(line[:1] for line in said)  # no refused turn or command
    store = SQLiteStore(path)
    try:
        blocks = ContextManager.open(store, namespace="ada").messages(kind="compaction")
        assert len(blocks) == 1
    finally:
        store.close()


def test_transcript_shows_a_compaction_block_as_a_marker_with_its_coverage(tmp_path: Any) -> None:
    path = tmp_path / "agent.db"
    done = cli("run", "--db", path, "--agent", "ada", stdin="hello there\n/compact\n")
    assert done.returncode == 0, done.stderr

    shown = cli("transcript", path).stdout.splitlines()

    assert any(
        line.endswith("assistant ⟨compaction: a server summary of everything up to #2⟩")
        for line in shown
    )


async def test_a_tool_added_and_removed_inside_the_summarized_range_stays_declared_after_the_block(
    store: Store,
) -> None:
    """Rule 25 (c) with rule 3: a new tool the library added as a deferred definition is part
    of the prefix of the thinking made after its addition; removed again before the
    compaction, its definition must stay in ``tools`` after the block, or the kept reply's
    thinking fails (the definition once went with the summarized change)."""
    sim = Simulator()
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada", strategy=Compact(50))
    grown = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP_TOOL])
    for n, head in enumerate((PROBE_HEAD, grown, PROBE_HEAD, PROBE_HEAD)):
        cm.add_message("user", f"Question {n}: {LONG}")
        result = await cm.compile_async(head)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
    compacted = result.request["tools"]
    assert any(t.get("defer_loading") and t["name"] == "grep" for t in compacted)
    assert await cm.compact_async(client) is not None

    cm.add_message("user", "And now?")
    result = await cm.compile_async(PROBE_HEAD)
    reply = await client.beta.messages.create(**result.request)

    assert [t["name"] for t in result.request["tools"]] == [t["name"] for t in compacted]
    assert [b["type"] for b in result.request["messages"][0]["content"]][:2] == [
        "compaction",
        "thinking",
    ]
    assert reply.input_transformations in (None, [])
    assert invalid_calls(sim) == []


async def test_a_window_that_jumps_past_the_kept_turns_re_anchors_so_a_tool_comes_back_once(
    store: Store,
) -> None:
    """A window start past a compaction's kept turns has changed every later block's prefix
    (rule 5), so the head re-anchors as it does without a block: a tool removed, restated
    after the block (rule 26), left behind by the jump and then wanted again is offered by
    ``tools`` once, not added a second time by a change (a 400: already available)."""
    sim = Simulator()
    client = sim.client()
    window = Window(max_tokens=400, shed_thinking=False)
    cm = ContextManager.open(store, namespace="ada", strategy=window)
    grown = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP_TOOL])

    async def turn(head: Head, text: str) -> None:
        cm.add_message("user", text)
        result = await cm.compile_async(head)
        cm.record_reply(await client.beta.messages.create(**result.request), result)

    await turn(grown, "Question 0.")
    await turn(PROBE_HEAD, "Question 1.")  # grep removed: a change appended
    cm.strategy = Compact(1)
    assert await cm.compact_async(client) is not None
    cm.strategy = window
    await turn(PROBE_HEAD, f"Question 2: {LONG}")  # the removal is restated after the block
    await turn(grown, f"Question 3: grep again, please. {LONG * 3}")  # and left behind

    before = sim.calls[-2].request["messages"]
    assert before[-1]["content"][0]["type"] == "tool_removal"  # restated after the block
    assert [c.status for c in sim.calls] == [200] * len(sim.calls)
    assert invalid_calls(sim) == []
    sent = sim.calls[-1].request
    assert first_block(sent)["type"] == "compaction"
    assert "grep" in offered_tools(sent).active
    assert sent["messages"][1]["content"][0]["text"].startswith("Question 3")


async def _turn(cm: ContextManager, client: Any, head: Head, text: str = "Go on.") -> None:
    cm.add_message("user", text)
    result = await cm.compile_async(head)
    cm.record_reply(await client.beta.messages.create(**result.request), result)


async def _compacted_after_grep_came_and_went(
    store: Store,
) -> tuple[Simulator, Any, ContextManager, Head]:
    """A branch where ``grep`` was added by a change and removed again, then compacted (one
    reply kept); returns the simulator, its client, the context and the head with ``grep``."""
    sim = Simulator()
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    grown = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP_TOOL])
    for head in (PROBE_HEAD, grown, PROBE_HEAD):
        await _turn(cm, client, head)
    cm.strategy = Compact(1)
    assert await cm.compact_async(client) is not None
    return sim, client, cm, grown


async def test_a_tool_added_before_a_compaction_keeps_its_definition_through_a_later_re_anchor(
    store: Store,
) -> None:
    """Found by the compile fuzzing helper. A tool added by a change (a deferred definition
    and a ``tool_addition``) and removed again before a compaction binds the thinking made
    since (rule 3, carried through the block). A window jump past the kept turns re-anchors the
    head: the definition must stay in ``tools``, or the thinking after the block fails once the
    window renders it again, and a later change that adds the tool back by a new deferred
    definition fails it too (it was dropped with ``prefix_binding_mismatch``)."""
    sim, client, cm, grown = await _compacted_after_grep_came_and_went(store)
    for text in (f"After. {LONG}", f"More. {LONG}"):
        await _turn(cm, client, PROBE_HEAD, text)
    cm.strategy = Window(300, shed_thinking=False)
    await _turn(cm, client, PROBE_HEAD, "Jump. " * 50)
    cm.strategy = Compact(10_000)  # the whole branch rendered again, the block first
    for head in (PROBE_HEAD, grown, grown):
        await _turn(cm, client, head)

    assert invalid_calls(sim) == []
    assert "grep" in [t["name"] for t in sim.calls[-1].request["tools"]]


async def test_a_model_without_system_messages_keeps_the_tools_of_the_compaction_block(
    store: Store,
) -> None:
    """Found by the compile fuzzing helper. On a model that takes no system messages the head
    is not appended but anchored as asked; under a compaction block the anchor keeps the
    block's tool definitions as deferred ones, so the thinking made there stays valid when a
    model that takes them adds a tool the summarized range had added (before, ``grep`` came
    back as a new deferred definition and that thinking was dropped)."""
    sim, client, cm, grown = await _compacted_after_grep_came_and_went(store)
    cm.strategy = Compact(10_000)
    plain = attrs.evolve(PROBE_HEAD, model="claude-sonnet-5")  # no system messages
    for head in (plain, plain, grown, grown):
        await _turn(cm, client, head)

    assert invalid_calls(sim) == []
