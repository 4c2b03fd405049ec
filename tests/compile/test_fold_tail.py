"""A fold made mid-round keeps its tail (``Fold.keep_tokens``): the whole turns before the open
one are sent with their thinking stripped (VENDOR_RULES 20), and the open turn's rounds go as
text after them, so no call is replayed without its thinking (VENDOR_RULES 6). Through the
runtime and the real SDK client against the simulator, on every store."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import (
    PROBE_HEAD,
    THINKING_HEAD,
    calling_script,
    invalid_calls,
    notice_texts,
    request_blocks,
    request_texts,
    runtime_on,
    signed_conversation,
    snapshots_off,
    thinking_signatures,
)

from context_manager import ContextManager, Fold, Head, Passthrough, Store, ThinkingStrip
from context_manager._compile._strategies import estimate_tokens
from context_manager.runtime import Agent
from context_manager.simulator import Simulator

HEADS = {"system messages": PROBE_HEAD, "no system messages": THINKING_HEAD}
"""A model that takes mid-conversation system messages (the notice goes as one) and one that
does not (it goes as user text); both run the prefix check."""

LONG_QUESTION = "please use tool, and first read all of this: " + "o" * 8_000
"""The first turn's words: too long for the kept tail, so the fold has something to cover."""


class Host:
    """A runtime whose agent folds at the first call after the last turn's last tool run, once
    (the tool arms the fold; the simulator disarms it when the call arrives)."""

    def __init__(self, store: Store, head: Head, keep_tokens: int, rounds: int = 1) -> None:
        self.tool = str(head.tools[0]["name"])
        self.answer = calling_script(self.tool)
        self.sim = Simulator(script=self._script)
        self.keep_tokens = keep_tokens
        self.rounds = rounds
        self.armed = False
        self.arming = False
        self.runs = 0
        self.fold_at: int | None = None
        self.strips: list[ThinkingStrip] = []
        self.agent = runtime_on(self.sim, store).register(
            Agent("ada", head, tools={self.tool: self._run}, strategy=Passthrough())
        )
        self.agent.context.on_thinking_strip(lambda strip, key: self.strips.append(strip))

    def _script(self, request: dict[str, Any]) -> list[Any]:
        if self.armed:
            self.agent.context.strategy = Passthrough()
            self.armed = False
            self.fold_at = len(self.sim.calls)
        if self.arming and 0 < self.runs < self.rounds:  # another round of the same turn
            return [
                {"type": "thinking", "thinking": "one more look"},
                {"type": "text", "text": "Looking again."},
                {"type": "tool_use", "name": self.tool, "input": {}},
            ]
        return self.answer(request)

    def _run(self, _: Any) -> str:
        if self.arming:
            self.runs += 1
            if self.runs == self.rounds:
                self.agent.context.strategy = Fold(
                    lambda covered: f"Ada answered {len(covered)} earlier messages.",
                    trigger_tokens=1,
                    keep_tokens=self.keep_tokens,
                )
                self.armed = True
        return "the log says: all quiet"

    async def fold_mid_round(self) -> dict[str, Any]:
        """Three turns, then one whose last tool round folds; the folded request."""
        await self.agent.run_turn(LONG_QUESTION)
        await self.agent.run_turn("please use tool for the second question")
        await self.agent.run_turn("please use tool for the third question")
        self.arming = True
        await self.agent.run_turn("please use tool for the last question")
        self.arming = False
        assert self.fold_at is not None, "the fold did not happen"
        return dict(self.sim.calls[self.fold_at].request)


def _types(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [b["type"] for b in content] if isinstance(content, list) else ["text"]


def _accepted(sim: Simulator) -> None:
    assert invalid_calls(sim) == []
    assert [c.status for c in sim.calls] == [200] * len(sim.calls)
    assert [r.get("input_transformations") or [] for r in sim.responses] == [[]] * len(
        sim.responses
    )


@pytest.mark.parametrize("head", list(HEADS.values()), ids=list(HEADS))
async def test_a_mid_round_fold_keeps_the_earlier_turns_text_and_strips_their_thinking(
    store: Store, head: Head
) -> None:
    host = Host(store, head, keep_tokens=1_500)
    folded = await host.fold_mid_round()

    texts = request_texts(folded)
    assert texts[0] == "[summary of earlier conversation]\nAda answered 4 earlier messages."
    assert "please use tool for the second question" in texts
    assert "please use tool for the third question" in texts
    assert LONG_QUESTION not in texts  # summarized
    assert thinking_signatures(folded) == []  # the kept tail's thinking is stripped
    # the kept turns go as they were stored: their tool rounds too
    assert sum(1 for b in request_blocks(folded) if b["type"] == "tool_use") == 2
    # the open round: its call is not replayed, its result is text after the turn's words
    conversation = [m for m in folded["messages"] if m["role"] != "system"]
    last = conversation[-1]
    assert last["role"] == "user"
    assert [b["text"] for b in last["content"]] == [
        "please use tool for the last question",
        f"Result of your {head.tools[0]['name']} call: the log says: all quiet",
    ]
    assert conversation[-2]["role"] == "assistant"
    assert "tool_use" not in _types(conversation[-2])  # the last turn before, closed

    (strip,) = host.strips
    assert strip.cause == "messages"
    replies = [m.id for m in host.agent.context.messages() if m.role == "assistant"]
    assert list(strip.replies) == replies[:7]  # every reply so far, the open round's last
    (line,) = notice_texts(host.agent)
    assert line.startswith(
        "[reasoning] ada: Some of your earlier reasoning is no longer in your context: the "
        "reasoning behind 7 of your replies, the first being the one that called "
    )
    assert "this turn's earlier steps among them" in line

    await host.agent.run_turn("please use tool once more")
    after = host.sim.calls[-1].request
    assert host.fold_at is not None
    made_since = host.sim.responses[host.fold_at]["content"][0]["signature"]
    assert made_since in thinking_signatures(after)  # thinking made after the fold is kept
    assert len(notice_texts(host.agent)) == 1  # told once
    _accepted(host.sim)


async def test_a_mid_round_fold_sends_every_round_of_the_open_turn_as_text(
    store: Store,
) -> None:
    """A turn with two rounds before the fold: the first round's call would otherwise be the
    latest assistant message of an open tool loop, sent without its thinking (VENDOR_RULES 6)."""
    host = Host(store, PROBE_HEAD, keep_tokens=1_500, rounds=2)
    folded = await host.fold_mid_round()

    conversation = [m for m in folded["messages"] if m["role"] != "system"]
    assert [b["text"] for b in conversation[-1]["content"]] == [
        "please use tool for the last question",
        "Result of your probe call: the log says: all quiet\n"
        "You wrote: Looking again.\n"
        "Result of your probe call: the log says: all quiet",
    ]
    assert "tool_result" not in _types(conversation[-1])
    assert "please use tool for the third question" in request_texts(folded)
    await host.agent.run_turn("please use tool once more")
    _accepted(host.sim)


async def test_a_mid_round_fold_with_no_whole_turn_in_keep_tokens_takes_the_simple_shape(
    store: Store,
) -> None:
    host = Host(store, PROBE_HEAD, keep_tokens=60)
    folded = await host.fold_mid_round()

    assert [m["role"] for m in folded["messages"]] == ["user"]
    assert request_texts(folded) == [
        "[summary of earlier conversation]\nAda answered 15 earlier messages.",
        "Result of your probe call: the log says: all quiet",
    ]
    (summary,) = host.agent.context.messages(kind="summary")
    assert "inflight" not in summary.metadata.extra
    await host.agent.run_turn("please use tool once more")
    _accepted(host.sim)


async def test_a_store_reopened_after_a_mid_round_fold_sends_what_was_sent(store: Store) -> None:
    """The open turn's text is a pure function of the stored summary: a render from the store
    (no kept render, no snapshot) sends the same bytes, so the thinking made since stays valid."""
    host = Host(store, PROBE_HEAD, keep_tokens=1_500)
    await host.fold_mid_round()
    cm = host.agent.context
    kept = cm.compile(PROBE_HEAD, dry_run=True).request["messages"]

    cm.forget_cache()
    with snapshots_off():
        again = cm.compile(PROBE_HEAD, dry_run=True).request["messages"]

    assert again == kept
    assert thinking_signatures({"messages": again}) != []


async def test_a_fold_measures_its_kept_tail_as_it_is_sent_without_the_stripped_thinking(
    store: Store,
) -> None:
    """``keep_tokens`` bounds the tail the fold sends: each kept reply's thinking strips, so it
    is weighed without it (here a reply weighs 75 tokens with its thinking, 16 without)."""
    sim = Simulator(script=calling_script())
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(sim, cm, 6)
    cm.strategy = Fold(lambda covered: "Questions 0 to 2.", trigger_tokens=1, keep_tokens=100)

    folded = cm.compile(THINKING_HEAD)

    assert request_texts(folded.request) == [
        "[summary of earlier conversation]\nQuestions 0 to 2.",
        "question 3",
        "Noted: question 3",
        "question 4",
        "Noted: question 4",
        "question 5",
        "Noted: question 5",
        "and now?",
    ]
    assert thinking_signatures(folded.request) == []
    tail = folded.request["messages"][1:]
    assert sum(estimate_tokens(m) for m in tail) <= 100


async def test_a_system_message_inside_the_open_turn_is_still_sent_after_a_mid_round_fold(
    store: Store,
) -> None:
    """The host's own system message, stored while the open turn's first round ran, is not
    left out with the rounds sent as text: it follows them, in place (VENDOR_RULES 16)."""
    host = Host(store, PROBE_HEAD, keep_tokens=1_500, rounds=2)
    run = host._run

    def noting(arg: Any) -> str:
        if host.arming and host.runs == 0:
            host.agent.context.add_message("system", "The deploy is frozen until Monday.")
        return run(arg)

    host.agent.tools["probe"] = noting
    folded = await host.fold_mid_round()

    (summary,) = host.agent.context.messages(kind="summary")
    first, last = summary.metadata.extra["inflight"]
    (note,) = [
        m for m in host.agent.context.messages() if m.metadata.kind is None and m.role == "system"
    ]
    assert first < note.sequence < last  # stored inside the rounds sent as text
    roles = [m["role"] for m in folded["messages"]]
    assert roles[-2:] == ["user", "system"]
    assert folded["messages"][-1]["content"] == [
        {"type": "text", "text": "The deploy is frozen until Monday."}
    ]
    await host.agent.run_turn("please use tool once more")
    _accepted(host.sim)
