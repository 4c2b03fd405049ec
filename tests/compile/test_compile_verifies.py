"""The cross-check: after every kind of change, the compiler's request verifies with zero drops
but the model drops it expects (blocks the requested model cannot read, sent on purpose).

Replies come from the simulator through the real SDK client, so every signature is real; each
compiled request is then checked by the simulator's own verifier.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from context_manager import ContextManager, Fold, Head, MemoryStore, Window
from context_manager.simulator import MODEL_MISMATCH, Simulator

TOOL = {"name": "read_log", "input_schema": {"type": "object"}}
HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[TOOL],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


def script(request: dict[str, Any]) -> list[Any]:
    """Think, then call the tool when asked, else answer; interleave a second thought."""
    last = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
    said = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
    if "tool" in said:
        return [
            {"type": "thinking", "thinking": "first thought"},
            {"type": "text", "text": "Checking."},
            {"type": "thinking", "thinking": "second thought"},
            {"type": "tool_use", "name": "read_log", "input": {}},
        ]
    return [{"type": "thinking", "thinking": "thought"}, {"type": "text", "text": f"Re: {said}"}]


class Session:
    def __init__(self, cm: ContextManager) -> None:
        self.cm = cm
        self.sim = Simulator(script=script)
        self.client = self.sim.client()
        self.head = HEAD

    async def call(self, text: str | None = None) -> None:
        """One model call; answers a pending tool call first. Asserts zero drops."""
        if text is not None:
            self.cm.add_message("user", text)
        result = self.cm.compile(self.head)
        checks = self.sim.verify(result.request)
        expected = [(path, MODEL_MISMATCH) for path in result.unreadable]
        assert [(c.path_text, c.reason) for c in checks if c.reason is not None] == expected
        message = await self.client.beta.messages.create(**result.request)
        assert [(t.path, t.reason) for t in message.input_transformations or []] == expected
        self.cm.record_reply(message, result)
        uses = [b for b in message.content if b.type == "tool_use"]
        if uses:
            self.cm.add_message(
                "user",
                [{"type": "tool_result", "tool_use_id": u.id, "content": "ok"} for u in uses],
            )
            await self.call()

    def sent_thinking(self) -> int:
        request = self.cm.compile(self.head, dry_run=True).request
        return sum(
            1
            for m in request["messages"]
            for b in m["content"]
            if b["type"] in ("thinking", "redacted_thinking")
        )


Change = Callable[[Session], None]


def tools_change(s: Session) -> None:
    s.head = attrs.evolve(
        s.head, tools=[TOOL, {"name": "grep", "input_schema": {"type": "object"}}]
    )


def system_change(s: Session) -> None:
    s.head = attrs.evolve(s.head, system="You are Ada, on call.")


def model_switch(s: Session) -> None:
    s.head = attrs.evolve(s.head, model="claude-sonnet-5")


def settings_change(s: Session) -> None:
    s.head = attrs.evolve(s.head, settings={**s.head.settings, "max_tokens": 4000})


def edit(s: Session) -> None:
    s.cm.edit_message(s.cm.messages()[0].id, "an edited first question")


def release(s: Session) -> None:
    replies = [m for m in s.cm.messages() if m.role == "assistant"]
    s.cm.release_thinking(replies[1].id, from_block=0)


def release_tail(s: Session) -> None:
    replies = [m for m in s.cm.messages() if m.role == "assistant"]
    s.cm.release_thinking(replies[-1].id, from_block=0)


def fork(s: Session) -> None:
    s.cm.fork("other")


def fold(s: Session) -> None:
    size = s.cm.compile(s.head, dry_run=True).tokens
    s.cm.strategy = Fold(lambda covered: "earlier talk", trigger_tokens=size - 50, keep_tokens=60)


def window(s: Session) -> None:
    s.cm.strategy = Window(max_tokens=400)


def nothing(s: Session) -> None:
    pass


@pytest.mark.parametrize(
    "change",
    [
        nothing,
        tools_change,
        system_change,
        model_switch,
        settings_change,
        edit,
        release,
        release_tail,
        fork,
        fold,
        window,
    ],
)
async def test_every_request_after_a_change_verifies_with_zero_drops(change: Change) -> None:
    session = Session(ContextManager.open(MemoryStore(), namespace="ada"))
    await session.call("hello")
    await session.call("please use the tool")
    await session.call("thanks")
    change(session)
    await session.call("after the change, use the tool")
    await session.call("and once more")
    assert session.sent_thinking() > 0


async def test_a_settings_change_keeps_every_block_the_simulator_still_accepts() -> None:
    session = Session(ContextManager.open(MemoryStore(), namespace="ada"))
    await session.call("hello")
    await session.call("please use the tool")
    before = session.sent_thinking()
    settings_change(session)
    assert session.sent_thinking() == before
