"""Regressions of issue 17 in recording replies, on the simulator's real SDK client."""

from __future__ import annotations

import pytest
from helpers import THINKING_HEAD, calling_script

from context_manager import ContextManager, MemoryStore, ThinkingBlock
from context_manager.simulator import Simulator


async def test_a_response_body_given_as_a_plain_dict_is_recorded_as_its_content_blocks() -> None:
    sim = Simulator(script=calling_script())
    client = sim.client()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "Hello there.")
    result = cm.compile(THINKING_HEAD)
    message = await client.beta.messages.create(**result.request)
    body = message.model_dump(mode="json", exclude_none=True)  # what a host using httpx has
    reply = cm.record_reply(body, result)
    stored = cm.get_message(reply).content
    assert [type(b).__name__ for b in stored] == ["ThinkingBlock", "TextBlock"]
    assert isinstance(stored[0], ThinkingBlock)
    assert stored[0].signature == body["content"][0]["signature"]
    cm.add_message("user", "And now?")
    following = cm.compile(THINKING_HEAD)
    assert following.request["messages"][1]["content"] == body["content"]
    checks = sim.verify(following.request)
    assert [c.path for c in checks if c.reason is not None] == []


@pytest.mark.parametrize("body", [{"id": "msg_1"}, {"type": "text", "text": "hi"}])
async def test_a_dict_that_is_not_a_response_body_is_refused_as_a_reply(body: object) -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "Hello there.")
    result = cm.compile(THINKING_HEAD)
    with pytest.raises(TypeError, match="not a response"):
        cm.record_reply(body, result)
    assert len(cm.messages(limit=None)) == 1
