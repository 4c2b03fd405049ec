"""Issue 28: invalid sends and needless losses where the compiler's parts meet (tool changes,
budgets, windows, forks, releases, drops), each judged by the simulator through the real SDK
client, on every store."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from helpers import (
    PROBE_HEAD,
    READ_LOG_TOOL,
    THINKING_HEAD,
    calling_script,
    invalid_calls,
    notice_texts,
    replies_with_thinking,
    runtime_on,
    thinking_signatures,
    unmarked,
)

from context_manager import ContextManager, MessageId, OverBudget, Store, Window
from context_manager.runtime import Agent
from context_manager.simulator import (
    END_USER_MISMATCH,
    ORGANIZATION_MISMATCH,
    PREFIX_MISMATCH,
    Simulator,
)


async def test_a_removed_tool_added_again_comes_back_inline_and_every_request_is_valid(
    store: Store,
) -> None:
    both = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, READ_LOG_TOOL])
    sim = Simulator(script=calling_script())
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    results = []
    for n, head in enumerate([both, PROBE_HEAD, both, PROBE_HEAD]):
        cm.add_message("user", f"Question {n}.")
        result = cm.compile(head)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
        results.append(result)

    readded = [
        block["tool"]
        for message in results[2].request["messages"]
        if message["role"] == "system"
        for block in message["content"]
        if block.get("type") == "tool_addition"
    ]
    assert readded == [{"type": "tool_definition", "definition": READ_LOG_TOOL}]
    assert all(r.thinking_strip is None for r in results)
    assert invalid_calls(sim) == []


async def test_a_budget_caps_the_whole_request_system_and_tools_included(store: Store) -> None:
    tools = [
        {
            "name": f"tool_{n}",
            "description": f"Tool number {n}.",
            "input_schema": {"type": "object"},
        }
        for n in range(40)
    ]
    head = attrs.evolve(THINKING_HEAD, tools=tools)
    sim = Simulator(script=calling_script())
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    for n in range(6):
        cm.add_message("user", f"Question number {n}: what about part {n} of the plan?")
        result = cm.compile(head)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
    cm.add_message("user", "And the last part?")
    whole = cm.compile(head, dry_run=True).tokens
    budget = whole - 100

    result = cm.compile(head, budget=budget)
    await client.beta.messages.create(**result.request)

    assert result.tokens <= budget
    assert invalid_calls(sim) == []


async def dropped_in_the_third_turn(
    store: Store, path: str, reason: str, text: str = "once more"
) -> tuple[Simulator, Agent]:
    """An agent on ``store`` after three turns, the third's first call dropping ``path``."""
    sim = Simulator(script=calling_script())
    ada = runtime_on(sim, store).register(Agent("ada", THINKING_HEAD))
    await ada.run_turn("hello")
    await ada.run_turn("and more")
    sim.force_drop(paths=[path], reason=reason)
    await ada.run_turn(text)
    return sim, ada


async def test_a_loss_told_on_main_is_not_told_again_on_a_fork_made_at_its_head(
    store: Store,
) -> None:
    """SPEC 5: a provider drop told on main, then a fork at the head: the fork's first
    compile leaves out the same reply and its agent hears nothing new."""
    sim, ada = await dropped_in_the_third_turn(store, "messages.1.content.0", PREFIX_MISMATCH)
    assert len(notice_texts(ada)) == 1

    async with ada.forked("what-if") as fork:
        await fork.run_turn("try something else")
        assert len(notice_texts(fork)) == 1

    assert (sim.calls[-1].status, sim.calls[-1].dropped) == (200, ())


def pondering_script(request: dict[str, Any]) -> list[Any]:
    """Long thinking for the first question, short for the rest; calls a tool when asked."""
    last = request["messages"][-1]
    content = last["content"] if isinstance(last["content"], list) else []
    said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    if any(b.get("type") == "tool_result" for b in content):
        return [{"type": "thinking", "thinking": "the log is in"}, "All is well."]
    thought = "pondering " * 600 if "question 0" in said else "considering"
    if "use tool" in said:
        return [{"type": "thinking", "thinking": thought}, {"type": "tool_use", "name": "read_log"}]
    return [{"type": "thinking", "thinking": thought}, {"type": "text", "text": f"On {said}."}]


async def test_shedding_never_puts_back_a_withheld_block_and_the_open_round_stays_valid(
    store: Store,
) -> None:
    """Issue 28 item 1: R1 released, so R2 (made while R1 was sent) is withheld; R3 and the
    open round's R4 were made while R2 was gone. Shedding R0 must not put R2 back (VENDOR_RULES
    4): R3 and R4 stay valid."""
    sim = Simulator(script=pondering_script)
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    replies: list[MessageId] = []
    for text in ["question 0", "question 1", "question 2", "release", "question 3", "use tool"]:
        if text == "release":
            cm.release_thinking(replies[1])
            continue
        cm.add_message("user", text)
        result = cm.compile(THINKING_HEAD)
        call = await client.beta.messages.create(**result.request)
        replies.append(cm.record_reply(call, result))
    cm.add_message(
        "user",
        [{"type": "tool_result", "tool_use_id": call.content[-1].id, "content": "ok"}],
    )
    whole = cm.compile(THINKING_HEAD, dry_run=True).tokens

    result = cm.compile(THINKING_HEAD, budget=whole - 50)
    await client.beta.messages.create(**result.request)

    assert replies_with_thinking(result) == [replies[3], replies[4]]
    assert result.restored == ()
    assert invalid_calls(sim) == []


async def pondered(cm: ContextManager, sim: Simulator, count: int) -> list[str]:
    """``count`` questions answered through the SDK (the first with long thinking), then one
    more question; the replies' ids."""
    client = sim.client()
    replies = []
    for n in range(count):
        cm.add_message("user", f"question {n}")
        result = cm.compile(THINKING_HEAD)
        replies.append(cm.record_reply(await client.beta.messages.create(**result.request), result))
    cm.add_message("user", "and now?")
    return replies


async def test_a_forks_first_compile_under_a_window_sheds_like_its_parent(store: Store) -> None:
    """Issue 28 item 2 (SPEC 5, 7): the fork at the head renders what the parent would: R0's
    thinking shed, R1-R4 kept, no window jump and no ``first`` loss."""
    sim = Simulator(script=pondering_script)
    cm = ContextManager.open(store, namespace="ada")
    replies = await pondered(cm, sim, 5)
    whole = cm.compile(THINKING_HEAD, dry_run=True).tokens
    cm.strategy = Window(whole - 50)
    parent = cm.compile(THINKING_HEAD, dry_run=True)
    assert replies_with_thinking(parent) == replies[1:]
    cm.fork("what-if")

    fork = cm.compile(THINKING_HEAD)
    await sim.client().beta.messages.create(**fork.request)

    assert unmarked(fork.request["messages"]) == unmarked(parent.request["messages"])
    assert fork.thinking_strip is not None
    assert fork.thinking_strip.cause == "messages"
    assert invalid_calls(sim) == []


async def test_a_first_budget_on_a_reopened_branch_sheds_instead_of_jumping(store: Store) -> None:
    """Issue 28 item 2: earlier compiles had ``budget=None``; the next one, with a budget and
    nothing cached, sheds R0's thinking and keeps every message."""
    sim = Simulator(script=pondering_script)
    cm = ContextManager.open(store, namespace="ada")
    replies = await pondered(cm, sim, 5)
    whole = cm.compile(THINKING_HEAD, dry_run=True)
    again = ContextManager.open(store, namespace="ada")

    result = again.compile(THINKING_HEAD, budget=whole.tokens - 50)
    await sim.client().beta.messages.create(**result.request)

    assert len(result.request["messages"]) == len(whole.request["messages"])
    assert replies_with_thinking(result) == replies[1:]
    assert invalid_calls(sim) == []


async def open_round_under_budget(cm: ContextManager, sim: Simulator, budget: int) -> str:
    """Eight questions under ``budget`` (the window jumps), then a tool round left open: the
    call recorded and its result stored; the calling reply's id."""
    client = sim.client()
    for n in range(8):
        cm.add_message("user", f"Question number {n}: what about part {n} of the plan?")
        result = cm.compile(THINKING_HEAD, budget=budget)
        cm.record_reply(await client.beta.messages.create(**result.request), result)
    cm.add_message("user", "Now use tool read_log.")
    result = cm.compile(THINKING_HEAD, budget=budget)
    call = await client.beta.messages.create(**result.request)
    reply = cm.record_reply(call, result)
    use = call.content[-1]
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}])
    return reply


async def test_dropping_the_budget_mid_round_keeps_what_precedes_the_inflight_reply(
    store: Store,
) -> None:
    """Issue 28 item 4: ``budget=N`` then ``None`` inside an open round: the history in front
    of the in-flight reply is not re-rendered (VENDOR_RULES 6), so its thinking stays valid."""
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada")
    reply = await open_round_under_budget(cm, sim, 400)

    result = cm.compile(THINKING_HEAD)
    await sim.client().beta.messages.create(**result.request)

    assert reply in replies_with_thinking(result)
    assert invalid_calls(sim) == []


async def test_over_its_hard_budget_mid_round_a_window_does_not_jump_it_refuses(
    store: Store,
) -> None:
    """Issue 28 item 4: a jump inside an open round would send the in-flight thinking
    failing; it is deferred, and ``OverBudget`` raised since nothing else fits."""
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada")
    await open_round_under_budget(cm, sim, 400)
    fits = cm.compile(THINKING_HEAD, budget=400, dry_run=True)

    with pytest.raises(OverBudget):
        cm.compile(THINKING_HEAD, budget=fits.tokens - 40)

    result = cm.compile(THINKING_HEAD, budget=400)
    await sim.client().beta.messages.create(**result.request)
    assert invalid_calls(sim) == []


def twice_script(request: dict[str, Any]) -> list[Any]:
    """Calls ``read_log`` twice in a row when asked to use it, then answers."""
    results = sum(
        1
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    )
    last = request["messages"][-1]
    asked = "use tool" in str(last["content"])
    thought = {"type": "thinking", "thinking": f"step {results}"}
    if asked or 0 < results < 3:
        return [thought, {"type": "tool_use", "name": "read_log", "input": {}}]
    return [thought, "All read."]


async def test_a_release_during_a_tool_loop_waits_until_no_round_is_open(store: Store) -> None:
    """Issue 28 item 3: the host releases the open round's reply A and the reply before it
    mid-loop; A's round closes with B calling again. Every request of the loop keeps what
    precedes its in-flight reply, and the releases land at the turn's end."""
    sim = Simulator(script=twice_script)
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    for text in ("Hello.", "Hello again."):
        cm.add_message("user", text)
        result = cm.compile(THINKING_HEAD)
        older = cm.record_reply(await client.beta.messages.create(**result.request), result)
    cm.add_message("user", "Please use tool read_log.")
    strips = []
    loop = []
    for step in range(3):
        result = cm.compile(THINKING_HEAD)
        strips.append(result.thinking_strip)
        call = await client.beta.messages.create(**result.request)
        loop.append(cm.record_reply(call, result))
        if step == 0:
            cm.release_thinking(loop[0])
            cm.release_thinking(older)
        if call.stop_reason == "tool_use":
            use = call.content[-1]
            cm.add_message(
                "user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]
            )
    assert invalid_calls(sim) == []
    assert strips == [None, None, None]
    cm.add_message("user", "Thanks.")

    after = cm.compile(THINKING_HEAD)

    assert after.thinking_strip is not None
    assert older in after.thinking_strip.replies
    assert loop[0] in after.thinking_strip.replies


def two_thoughts_script(request: dict[str, Any]) -> list[Any]:
    """``twice_script``, with two thinking blocks in every reply that is not a tool call."""
    blocks = twice_script(request)
    if blocks[-1] == "All read.":
        return [{"type": "thinking", "thinking": "first"}, *blocks]
    return blocks


async def test_a_release_lowered_mid_round_holds_back_only_the_blocks_it_added(
    store: Store,
) -> None:
    """Issue 28 item 3, found by the model-based suite: a reply's second block was released and
    told before the round; mid-round the host releases it from its first block. The hold-back
    waits with the first block only: the second stays out of every request of the loop."""
    sim = Simulator(script=two_thoughts_script)
    client = sim.client()
    cm = ContextManager.open(store, namespace="ada")
    for text in ("Hi.", "Hello."):  # the first reply's thinking stays: a release after it gaps
        cm.add_message("user", text)
        result = cm.compile(THINKING_HEAD)
        older = cm.record_reply(await client.beta.messages.create(**result.request), result)
    sent = thinking_signatures(cm.compile(THINKING_HEAD, dry_run=True).request)
    assert len(sent) == 4  # both replies' two blocks go out
    cm.release_thinking(older, from_block=1)
    cm.add_message("user", "Please use tool read_log.")
    for step in range(3):
        result = cm.compile(THINKING_HEAD)
        assert sent[3] not in thinking_signatures(result.request), step
        call = await client.beta.messages.create(**result.request)
        cm.record_reply(call, result)
        if step == 0:
            cm.release_thinking(older)
        if call.stop_reason != "tool_use":
            break
        use = call.content[-1]
        cm.add_message("user", [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}])
    assert invalid_calls(sim) == []


@pytest.mark.parametrize("reason", [ORGANIZATION_MISMATCH, END_USER_MISMATCH])
async def test_a_block_dropped_for_its_organization_is_still_sent_so_later_replies_keep_theirs(
    store: Store, reason: str
) -> None:
    """Issue 28 item 6: the provider drops reply X (another organization, or end user) in the
    call that makes the open round's reply R, which records X before it. X is kept and sent again
    after the round (dropped again at no cost): R and the round's closing reply keep their
    reasoning on every later request, and the one loss is told once."""
    sim, ada = await dropped_in_the_third_turn(
        store, "messages.3.content.0", reason, "Please use tool read_log."
    )
    assert [c.reason for c in sim.calls[-2].dropped] == [reason]

    sent = []
    for text in ("what next?", "and then?"):
        await ada.run_turn(text)
        sent.append(len(thinking_signatures(sim.calls[-1].request)))

    assert sent == [4, 5]  # every earlier reply's, the dropped one's included
    assert invalid_calls(sim) == [f"status {200}"]  # only the forced drop's call
    assert len(notice_texts(ada)) == 1
