"""Append-only head changes (SPEC 7b) through the runtime against the simulator (SDK client)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
from helpers import notice_texts as notices

from context_manager import (
    ContextManager,
    Fold,
    Head,
    MemoryStore,
    Passthrough,
    SQLiteStore,
    Store,
    ThinkingBinding,
    Window,
)
from context_manager._model._content import is_thinking
from context_manager.runtime import Agent, RetryPolicy, Runtime
from context_manager.simulator import Simulator

READ_LOG = {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
ACTIVATE = {"name": "activate_skill", "description": "Grow.", "input_schema": {"type": "object"}}
HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[READ_LOG, ACTIVATE],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
FAST = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.002)


def system_text(request: dict[str, Any]) -> str:
    """The request's top-level system text, whatever cache breakpoints the compile placed."""
    system = request["system"]
    if isinstance(system, str):
        return system
    return "".join(block["text"] for block in system)


def conversational(message: dict[str, Any]) -> bool:
    return bool(message["role"] != "system")


def script(request: dict[str, Any]) -> list[Any]:
    """Think, then: after a result, call the next tool the result names (``then NAME``) if it
    is offered, else answer; on ``call NAME`` call it; otherwise answer."""
    last = [m for m in request["messages"] if conversational(m)][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    thought = {"type": "thinking", "thinking": "considering"}
    offered = {t["name"] for t in request.get("tools", [])}
    results = [b for b in content if b.get("type") == "tool_result"]
    if results:
        text = str(results[-1].get("content", ""))
        if "then " in text and text.split("then ")[-1] in offered:
            return [thought, {"type": "tool_use", "name": text.split("then ")[-1], "input": {}}]
        return [thought, {"type": "text", "text": f"Done: {text[:60]}"}]
    said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    if "call " in said:
        return [thought, {"type": "tool_use", "name": said.split("call ")[-1], "input": {}}]
    return [thought, {"type": "text", "text": f"Noted: {said[:40]}"}]


def thinking_count(request: dict[str, Any]) -> int:
    return sum(
        1
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") in ("thinking", "redacted_thinking")
    )


def agent(
    sim: Simulator, store: Store | None = None, head: Head = HEAD, **binding: Any
) -> tuple[Runtime, Agent]:
    runtime = Runtime(sim.client(), store or MemoryStore(), retry=FAST)
    ada = Agent(
        "ada",
        head,
        tools={"read_log": lambda _: "all quiet", "grep": lambda _: "grep found it"},
        binding=ThinkingBinding(**binding),
    )

    def activate(_: dict[str, Any]) -> str:
        ada.head = attrs.evolve(ada.head, tools=[*ada.head.tools, GREP])
        return "skill active, then grep"

    ada.tools["activate_skill"] = activate
    runtime.register(ada)
    return runtime, ada


def all_ok(sim: Simulator) -> None:
    assert all(r.get("type") == "message" for r in sim.responses), sim.responses[-1]


def replies_with_thinking(cm: ContextManager) -> int:
    return sum(
        1
        for m in cm.messages(limit=None)
        if m.role == "assistant" and any(is_thinking(b) for b in m.content)
    )


async def test_tool_and_system_changes_between_and_mid_turn_keep_every_earlier_thinking_block() -> (
    None
):
    sim = Simulator(script=script)
    _, ada = agent(sim)
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, tools=[*ada.head.tools, GREP])  # added
    first = await ada.run_turn("call grep")
    assert len(first.head_changes) == 1
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG, ACTIVATE])  # removed
    await ada.run_turn("And now?")
    redefined = {**READ_LOG, "description": "Read the whole log."}
    ada.head = attrs.evolve(ada.head, tools=[redefined, ACTIVATE], system="You are Ada, terse.")
    await ada.run_turn("call read_log")
    result = await ada.run_turn("call activate_skill")  # grows the menu mid-turn, calls grep
    assert [c.name for c in result.tool_calls] == ["activate_skill", "grep"]
    assert [c.is_error for c in result.tool_calls] == [False, False]
    all_ok(sim)
    assert notices(ada) == []
    assert sim.calls[-1].unoffered_calls == ()
    # every thinking block recorded before the last call is sent in it
    assert thinking_count(sim.requests[-1]) == replies_with_thinking(ada.context) - 1
    changes = ada.context.messages(kind="head-change")
    assert len(changes) == 4
    last = sim.requests[-1]
    assert system_text(last) == "You are Ada."
    assert [t["name"] for t in last["tools"]] == ["read_log", "activate_skill", "grep"]
    assert last["tools"][-1]["defer_loading"] is True
    assert "mid-conversation-tool-changes-2026-07-01" in sim.calls[-1].betas
    assert "inline-tools-2026-09-15" in sim.calls[-1].betas
    system_texts = [
        b["text"]
        for m in last["messages"]
        if m["role"] == "system"
        for b in m["content"]
        if b["type"] == "text"
    ]
    assert any(t.endswith("\n\nYou are Ada, terse.") for t in system_texts)


async def test_a_call_to_a_removed_tool_gets_an_error_result_naming_the_change() -> None:
    sim = Simulator(script=script)
    _, ada = agent(sim)
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, tools=[ACTIVATE])
    result = await ada.run_turn("call read_log")
    (call,) = result.tool_calls
    assert call.is_error
    answer = sim.requests[-1]["messages"][-1]["content"][0]
    assert "removed from your tools" in answer["content"]
    assert sim.calls[-2].unoffered_calls == ("read_log",)
    all_ok(sim)


async def test_on_sonnet_5_a_tools_change_goes_out_at_the_top_and_costs_no_reasoning() -> None:
    """Sonnet 5 takes no system messages (VENDOR_RULES 16), so a change is sent in ``tools``
    itself; and it runs no prefix check (VENDOR_RULES 10), so the earlier thinking still goes
    out and reaches the model: nothing is stripped or told."""
    sim = Simulator(script=script)
    _, ada = agent(sim, head=attrs.evolve(HEAD, model="claude-sonnet-5"))
    heard: list[Any] = []
    ada.context.on_thinking_strip(lambda strip, key: heard.append(strip))
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, tools=[*ada.head.tools, GREP])
    result = await ada.run_turn("And now?")
    assert result.head_changes == ()
    assert heard == []
    assert notices(ada) == []
    assert ada.context.messages(kind="head-change") == []
    last = sim.requests[-1]
    assert all(m["role"] != "system" for m in last["messages"])
    assert [t["name"] for t in last["tools"]][-1] == GREP["name"]
    seen = [b["type"] for m in sim.calls[-1].request["messages"] for b in m["content"]]
    assert "thinking" in seen
    assert sim.responses[-1]["input_transformations"] == []
    all_ok(sim)


async def test_with_append_changes_off_a_change_is_a_head_change_as_before() -> None:
    sim = Simulator(script=script)
    _, ada = agent(sim, append_changes=False)
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, system="You are Ada, terse.")
    await ada.run_turn("And now?")
    (line,) = notices(ada)
    assert "because your system text changed" in line
    assert system_text(sim.requests[-1]) == "You are Ada, terse."


async def test_a_window_jump_reanchors_and_renders_no_stale_tool_addition() -> None:
    sim = Simulator(script=script)
    _, ada = agent(sim)
    ada.strategy = Window(max_tokens=600, reanchor=0.5)
    ada.context.strategy = ada.strategy
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, tools=[*ada.head.tools, GREP])
    await ada.run_turn("call grep")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG, ACTIVATE])
    for n in range(12):
        await ada.run_turn(f"Turn {n} with some padding words to grow the history quickly.")
    last = sim.requests[-1]
    assert last["tools"] == [READ_LOG, ACTIVATE]
    assert not any(m["role"] == "system" for m in last["messages"])
    all_ok(sim)


async def asking_after_a_turn() -> tuple[ContextManager, Head]:
    """An agent's context after one turn and a new question, and its head with grep added."""
    _, ada = agent(Simulator(script=script))
    await ada.run_turn("Hello.")
    ada.context.add_message("user", "next")
    return ada.context, attrs.evolve(ada.head, tools=[*ada.head.tools, GREP])


async def test_a_dry_compile_shows_the_appended_message_and_stores_nothing() -> None:
    cm, grown = await asking_after_a_turn()
    before = len(cm.messages(limit=None))
    dry = cm.compile(grown, dry_run=True)
    assert dry.appended == ()
    assert dry.request["messages"][-1] == {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}],
    }
    assert len(cm.messages(limit=None)) == before
    assert cm.messages(kind="head-change") == []
    committed = cm.compile(grown)
    assert committed.request == dry.request
    assert len(committed.appended) == 1


async def test_a_change_the_request_ends_with_is_named_in_its_provenance() -> None:
    cm, grown = await asking_after_a_turn()

    committed = cm.compile(grown)

    [change] = committed.appended
    assert committed.request["messages"][-1]["role"] == "system"
    last = committed.provenance[-1]
    assert last.kind == "notice"
    assert [source.message_id for source in last.sources] == [change]


async def test_reopening_the_store_renders_byte_identical_requests(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    sim = Simulator(script=script)
    store = SQLiteStore(path)
    _, ada = agent(sim, store=store)
    await ada.run_turn("Hello.")
    ada.head = attrs.evolve(ada.head, tools=[*ada.head.tools, GREP], system="New rules.")
    await ada.run_turn("call grep")
    ada.context.add_message("user", "more")
    head = ada.head
    before = ada.context.compile(head, dry_run=True).request
    store.close()
    again = ContextManager.open(SQLiteStore(path), namespace="ada")
    after = again.compile(head, dry_run=True).request
    assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)


async def test_a_notice_stored_after_a_turn_renders_after_the_next_user_message() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "hi")
    cm.record_reply([{"type": "text", "text": "hello"}], cm.compile(HEAD))
    notice = {"system_notice": True, "kind": "notice", "target": "ada"}
    cm.add_message("system", "a note", metadata=notice)
    cm.add_message("user", "next")
    roles: Callable[[], list[str]] = lambda: [  # noqa: E731
        m["role"] for m in cm.compile(HEAD).request["messages"]
    ]
    assert roles() == ["user", "assistant", "user", "system"]
    cm.record_reply([{"type": "text", "text": "ok"}], cm.compile(HEAD))
    assert roles() == ["user", "assistant", "user", "system", "assistant"]


def test_a_host_system_message_keeps_every_block_and_field() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "hi")
    cm.add_message(
        "system",
        [{"type": "text", "text": "be brief"}, {"type": "future_block", "x": 1}],
        metadata={"extra": {"clear_at": "next_user_message", "output_config": {"effort": "low"}}},
    )
    request = cm.compile(HEAD).request
    assert request["messages"][-1] == {
        "role": "system",
        "content": [{"type": "text", "text": "be brief"}, {"type": "future_block", "x": 1}],
        "clear_at": "next_user_message",
        "output_config": {"effort": "low"},
    }
    assert "mid-conversation-system-clear-at-2026-08-21" in request["betas"]
    assert "mid-conversation-output-config-2026-07-01" in request["betas"]


def _thinking_reply(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": f"step {n}", "signature": f"sig-{n}"},
        {"type": "text", "text": f"answer {n}"},
    ]


def test_a_fork_starts_from_its_parents_anchored_head_as_of_the_fork_point(store: Store) -> None:
    """Every store keeps the anchored head and hands a branch its parent's as of the fork point;
    the branch's first compile appends its own difference and loses nothing."""
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "one")
    first = cm.record_reply(_thinking_reply(1), cm.compile(HEAD))
    grown = attrs.evolve(HEAD, tools=[*HEAD.tools, GREP])
    cm.add_message("user", "two")
    appended = cm.compile(grown)
    assert len(appended.appended) == 1
    cm.record_reply(_thinking_reply(2), appended)
    cm.branch_at(first, "early")
    cm.switch_branch("early")
    cm.add_message("user", "two, again")
    fork = cm.compile(grown)
    assert fork.thinking_strip is None
    assert fork.request["tools"] == [*HEAD.tools, {**GREP, "defer_loading": True}]
    assert [m["role"] for m in fork.request["messages"]] == ["user", "assistant", "user", "system"]
    assert thinking_count(fork.request) == 1
    assert len(cm.messages(kind="head-change")) == 1  # the fork's own
    cm.switch_branch("main")
    cm.add_message("user", "three")
    main = cm.compile(grown)
    assert main.appended == ()
    assert thinking_count(main.request) == 2
    assert main.request["tools"] == fork.request["tools"]


def test_a_redefined_tool_without_inline_definitions_is_a_head_change() -> None:
    cm = ContextManager.open(
        MemoryStore(), namespace="ada", binding=ThinkingBinding(inline_tools=False)
    )
    heard: list[Any] = []
    cm.on_thinking_strip(lambda strip, key: heard.append(strip))
    cm.add_message("user", "one")
    cm.record_reply(_thinking_reply(1), cm.compile(HEAD))
    cm.add_message("user", "two")
    redefined = attrs.evolve(HEAD, tools=[{**READ_LOG, "description": "Read all."}, ACTIVATE])
    result = cm.compile(redefined)
    assert result.appended == ()
    assert [(s.cause, s.changed) for s in heard] == [("head", ("tools",))]
    assert result.request["tools"] == list(redefined.tools)
    assert thinking_count(result.request) == 0


def test_a_notice_and_a_change_stored_after_tool_results_merge_into_one_system_message() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "go")
    call = [
        {"type": "thinking", "thinking": "plan", "signature": "sig-call"},
        {"type": "tool_use", "id": "toolu_1", "name": "read_log", "input": {}},
    ]
    cm.record_reply(call, cm.compile(HEAD))
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}])
    cm.add_message(
        "system", "a note", metadata={"system_notice": True, "kind": "notice", "target": "ada"}
    )
    request = cm.compile(attrs.evolve(HEAD, tools=[*HEAD.tools, GREP])).request
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user", "system"]
    assert [b["type"] for b in request["messages"][-1]["content"]] == ["text", "tool_addition"]
    assert thinking_count(request) == 1


def test_system_notices_is_still_accepted_as_an_alias_of_system_messages() -> None:
    binding = ThinkingBinding(system_notices="user")
    assert binding.system_messages == "user"
    assert attrs.evolve(binding, system_messages="system").system_messages == "system"
    assert binding == ThinkingBinding(system_messages="user")
    assert ThinkingBinding().system_role("claude-sonnet-5") == "user"
    assert ThinkingBinding().system_role("claude-opus-5-5-20260901") == "system"
    assert not ThinkingBinding(append_changes=False).appends("claude-opus-5-5")


async def test_a_window_starting_past_appended_changes_re_anchors_so_requests_are_accepted() -> (
    None
):
    """SPEC 7b: changes appended before a window's start are not rendered, so the window's
    first compile anchors the head it sends; removing the window later sends nothing that
    refers to a tool the request no longer declares (VENDOR_RULES 17)."""
    sim = Simulator()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    heads = [
        HEAD,
        attrs.evolve(HEAD, tools=[READ_LOG, ACTIVATE, GREP]),  # grep appended
        HEAD,  # and removed again
    ]
    async with sim.client() as client:

        async def turn(text: str, head: Head) -> None:
            cm.add_message("user", text)
            result = cm.compile(head)
            cm.record_reply(await client.beta.messages.create(**result.request), result)

        for n, head in enumerate(heads):
            await turn(f"question {n}", head)
        for n in range(12):
            await turn(f"a longer question number {n}, with some words to fill the window", HEAD)
        cm.strategy = Window(300)
        await turn("inside the window", attrs.evolve(HEAD, tools=[ACTIVATE]))
        cm.strategy = Passthrough()
        await turn("the whole history again", attrs.evolve(HEAD, tools=[ACTIVATE]))
    assert [r.get("type") for r in sim.responses] == ["message"] * len(sim.responses)


async def test_a_change_after_a_window_jump_is_appended_and_strips_nothing() -> None:
    """SPEC 7b after a jump: the window starts past the anchor, but no change was appended
    between them, so the anchored head is still the one the window's blocks were made under and
    a later change is appended like any other: the turn sends what the same turn without the
    change sends, plus the change (it used to re-anchor, rewriting the top-level system and
    stripping the tail's thinking with cause ``messages``, told nothing)."""

    async def after_a_jump(change: bool) -> tuple[Simulator, Agent, list[str]]:
        sim = Simulator(script=script)
        _, ada = agent(sim)
        ada.strategy = ada.context.strategy = Window(max_tokens=400)
        for n in range(9):  # the window jumps at 8; the 10th turn still sends thinking
            await ada.run_turn(f"question {n} " + "w" * 60)
        first = sim.requests[-1]["messages"][0]["content"][0]["text"]
        assert not first.startswith("question 0 ")  # the window has jumped
        strips: list[str] = []
        ada.context.on_thinking_strip(lambda strip, key: strips.append(strip.cause))
        if change:
            ada.head = attrs.evolve(ada.head, system="You are Ada, terse.")
        await ada.run_turn("next")
        all_ok(sim)
        return sim, ada, strips

    plain, _, plain_strips = await after_a_jump(change=False)
    changed, ada, strips = await after_a_jump(change=True)

    last = changed.requests[-1]
    assert system_text(last) == "You are Ada."
    said = [m["content"][0]["text"] for m in last["messages"] if m["role"] == "system"]
    assert len(said) == 1
    assert said[0].endswith("You are Ada, terse.")
    assert thinking_count(last) == thinking_count(plain.requests[-1]) > 0
    assert strips == plain_strips
    assert notices(ada) == []


async def test_a_dry_fold_after_an_appended_change_previews_the_request_the_fold_sends() -> None:
    """A fold re-anchors the head (SPEC 7b); under ``dry_run`` its summary is a preview, never
    stored, and the re-render must open with it, as the committing compile opens with the
    stored one (it used to fall back to the latest stored summary: none here)."""
    sim = Simulator()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    head = HEAD
    async with sim.client() as client:
        for n in range(4):
            if n == 2:
                head = attrs.evolve(head, tools=[*head.tools, GREP])  # appended
            cm.add_message("user", f"question {n} " + "w" * 100)
            result = cm.compile(head)
            cm.record_reply(await client.beta.messages.create(**result.request), result)
    cm.add_message("user", "next")
    cm.strategy = Fold(lambda covered: f"summary of {len(covered)}", trigger_tokens=100)

    dry = cm.compile(head, dry_run=True)
    real = cm.compile(head)

    assert dry.request["messages"] == real.request["messages"]
    assert "summary of" in json.dumps(real.request["messages"][0])


async def test_a_fold_at_the_compile_that_appends_a_change_still_sends_the_newest_question() -> (
    None
):
    """The change stored after the user's newest message must not pull that message into the
    fold: without the change the same fold sends it after the summary, so with it too."""

    async def fold_with(change: bool) -> tuple[list[str], list[list[str | None]]]:
        covered: list[list[str | None]] = []

        def summarize(messages: Any) -> str:
            covered.append([m.metadata.kind for m in messages])
            return "the summary"

        sim = Simulator()
        cm = ContextManager.open(
            MemoryStore(), namespace="ada", strategy=Fold(summarize, trigger_tokens=400)
        )
        async with sim.client() as client:
            for n in range(9):
                cm.add_message("user", f"question {n} " + "w" * 60)
                result = cm.compile(HEAD)
                cm.record_reply(await client.beta.messages.create(**result.request), result)
            covered.clear()
            cm.add_message("user", "NEXT QUESTION")
            result = cm.compile(attrs.evolve(HEAD, system="Terse.") if change else HEAD)
            await client.beta.messages.create(**result.request)
        all_ok(sim)
        texts = [b["text"] for m in result.request["messages"] for b in m["content"]]
        return texts, covered

    plain, _ = await fold_with(change=False)
    texts, covered = await fold_with(change=True)

    assert len(covered) == 1  # it folded, at that compile
    assert "head-change" not in covered[0]
    assert plain[-1] == texts[-1] == "NEXT QUESTION"
    assert texts[0].endswith("the summary")


async def test_a_system_change_that_costs_reasoning_after_a_turn_on_sonnet_5_is_told() -> None:
    """A change appended on Opus 5.5, then a turn on Sonnet 5 (no system messages, VENDOR_RULES
    16: the head is rewritten and anchored there; Sonnet 5 runs no prefix check, so the first
    reply's thinking still goes out), then Opus 5.5 again: the first reply's thinking, made
    under the old system text, is left out for that text alone (its messages are unchanged),
    so the strip's cause is the head, with the system named, and the agent is told why (it was
    reported as a message change, which between turns is never told)."""
    sim = Simulator(script=script)
    _, ada = agent(sim, head=attrs.evolve(HEAD, model="claude-sonnet-5"))
    strips: list[tuple[str, tuple[str, ...]]] = []
    ada.context.on_thinking_strip(lambda strip, key: strips.append((strip.cause, strip.changed)))
    await ada.run_turn("one")
    ada.head = attrs.evolve(ada.head, model="claude-opus-5-5")
    await ada.run_turn("two")
    ada.head = attrs.evolve(ada.head, system="You are Ada, terse.")
    await ada.run_turn("three")
    assert strips == []  # appended: nothing lost
    ada.head = attrs.evolve(ada.head, model="claude-sonnet-5")
    await ada.run_turn("four")
    assert [cause for cause, _ in strips] == ["head"]  # Opus's replies, unread by Sonnet 5
    ada.head = attrs.evolve(ada.head, model="claude-opus-5-5")
    await ada.run_turn("five")
    all_ok(sim)
    assert system_text(sim.requests[-1]) == "You are Ada, terse."
    cause, changed = strips[-1]
    assert cause == "head"
    assert "system" in changed
    assert "because your system text and model changed" in notices(ada)[-1]
