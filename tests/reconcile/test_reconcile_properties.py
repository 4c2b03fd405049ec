"""Property: framework lists built the way frameworks build them reconcile to accepted requests.

A framework is driven through a random sequence of calls: new questions (some asking for a tool,
so a tool loop runs), instructions and a tool menu that change between calls, its own copy of each
reply in one of the styles frameworks use, and (in the second property) a sliding window. Every
request the simulator gets (the real SDK, in-process) is accepted with nothing dropped; without a
window of the framework's own, nothing is ever stripped and every earlier reply's thinking goes
out. Memory store only (Hypothesis examples share no fixture); few examples, no deadline.
"""

from __future__ import annotations

from typing import Any

from helpers import REPLY_COPIES, framework_copy, framework_params, invalid_calls, reworded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_manager import ContextManager, MemoryStore
from context_manager.simulator import Simulator

GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}

Step = tuple[str, str, bool, bool, bool]
"""``(words, copy style, instructions change, tool menu grows, window slides)``."""

steps = st.lists(
    st.tuples(
        st.sampled_from(["a question", "please use probe", "another one"]),
        st.sampled_from(REPLY_COPIES),
        st.booleans(),
        st.booleans(),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


def drive(run: list[Step], *, slide: bool) -> tuple[Simulator, list[Any]]:
    """Run the framework through ``run``; returns the simulator and every compile result."""
    sim = Simulator()
    client = sim.sync_client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    messages: list[dict[str, Any]] = []
    results: list[Any] = []
    system, tools = "Run 0.", list(framework_params([])["tools"])
    for number, (words, style, new_system, grow, slides) in enumerate(run):
        if new_system:
            system = f"Run {number}."
        if grow and GREP not in tools:
            tools = [*tools, GREP]
        if slide and slides and len(messages) >= 4:
            del messages[:2]
            while messages and (messages[0]["role"] != "user" or _answers(messages[0])):
                del messages[0]
        messages.append({"role": "user", "content": words})
        for _ in range(3):  # the call, then the tool loop's calls
            result = cm.reconcile(framework_params(messages, system=system, tools=tools))
            results.append(result)
            reply = client.beta.messages.create(**result.request)
            cm.record_reply(reply, result)
            messages.append(framework_copy(reply, style))
            calls = [b for b in reply.content if b.type == "tool_use"]
            if not calls:
                break
            results_block = [
                {"type": "tool_result", "tool_use_id": c.id, "content": "ok"} for c in calls
            ]
            messages.append({"role": "user", "content": results_block})
    return sim, results


def _answers(message: dict[str, Any]) -> bool:
    content = message["content"]
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


def sent_thinking(request: dict[str, Any]) -> int:
    return sum(
        1
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_framework_lists_reconcile_to_accepted_requests_with_no_needless_strip(
    run: list[Step],
) -> None:
    sim, results = drive(run, slide=False)
    assert invalid_calls(sim) == []
    assert [r.thinking_strip for r in results] == [None] * len(results)
    for call in sim.calls:
        replies = sum(1 for m in call.request["messages"] if m["role"] == "assistant")
        assert sent_thinking(call.request) == replies


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_a_frameworks_sliding_window_still_reconciles_to_accepted_requests(
    run: list[Step],
) -> None:
    sim, results = drive(run, slide=True)
    assert invalid_calls(sim) == []
    causes = {r.thinking_strip.cause for r in results if r.thinking_strip is not None}
    assert causes <= {"messages"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(min_value=0, max_value=20))
def test_an_edit_strips_only_the_replies_after_the_edited_message(
    run: list[Step], pick: int
) -> None:
    sim = Simulator()
    client = sim.sync_client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    messages: list[dict[str, Any]] = []
    for words, style, *_ in run:
        messages.append({"role": "user", "content": words})
        result = cm.reconcile(framework_params(messages))
        reply = client.beta.messages.create(**result.request)
        cm.record_reply(reply, result)
        messages.append(framework_copy(reply, style))
        calls = [b for b in reply.content if b.type == "tool_use"]
        if calls:  # the framework answers, and the loop's next call closes the round
            results = [{"type": "tool_result", "tool_use_id": c.id, "content": "ok"} for c in calls]
            messages.append({"role": "user", "content": results})
            result = cm.reconcile(framework_params(messages))
            reply = client.beta.messages.create(**result.request)
            cm.record_reply(reply, result)
            messages.append(framework_copy(reply, style))
    questions = [
        k for k, m in enumerate(messages) if m["role"] == "user" and isinstance(m["content"], str)
    ]
    edited = questions[pick % len(questions)]
    messages[edited] = {"role": "user", "content": f"{messages[edited]['content']}, reworded"}
    messages.append({"role": "user", "content": "and now?"})
    result = cm.reconcile(framework_params(messages))
    reply = client.beta.messages.create(**result.request)
    assert invalid_calls(sim) == []
    later = sum(1 for m in messages[edited:] if m["role"] == "assistant")
    strip = result.thinking_strip
    assert (strip.blocks if strip is not None else 0) == later
    if strip is not None:
        assert strip.cause == "messages"
    assert sent_thinking(result.request) == sum(
        1 for m in messages[:edited] if m["role"] == "assistant"
    )


SENT_BACK = ("as-sent", "no-extras")
"""The copy styles that send a reply's thinking back as recorded."""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(REPLY_COPIES), min_size=1, max_size=4), st.integers(0, 20))
def test_a_reworded_reply_keeps_its_thinking_when_sent_back_and_reports_it_otherwise(
    styles: list[str], pick: int
) -> None:
    """Rewording a reply invalidates only the thinking after its words: its own thinking goes
    out again when the framework's copy carries it, and is reported lost when the copy left it
    out; every later reply's thinking strips; every request is accepted."""
    sim = Simulator()
    client = sim.sync_client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    messages: list[dict[str, Any]] = []
    for number, style in enumerate(styles):
        messages.append({"role": "user", "content": f"question {number}"})
        result = cm.reconcile(framework_params(messages))
        reply = client.beta.messages.create(**result.request)
        cm.record_reply(reply, result)
        messages.append(framework_copy(reply, style))
    replies = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    edited = replies[pick % len(replies)]
    kept = styles[replies.index(edited)] in SENT_BACK
    messages[edited] = reworded(messages[edited])
    messages.append({"role": "user", "content": "and now?"})

    result = cm.reconcile(framework_params(messages))
    client.beta.messages.create(**result.request)

    later = sum(1 for k in replies if k > edited)
    strip = result.thinking_strip
    assert invalid_calls(sim) == []
    assert (strip.blocks if strip is not None else 0) == later + (0 if kept else 1)
    assert sent_thinking(result.request) == replies.index(edited) + (1 if kept else 0)
