"""Test helpers shared by several suites (one definition each; import them from here).

Pure readers of what a user can see: a request's texts and thinking, a context's messages and its
``[reasoning]`` notices. They build nothing and assert nothing, so a test's meaning stays in the
test.
"""

from __future__ import annotations

from typing import Any

from context_manager import REASONING_LOSS_KIND, ContextManager, TextBlock
from context_manager.runtime import Agent


def request_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every content block of a request's messages, in order (string contents are skipped)."""
    return [
        block
        for message in request["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
    ]


def request_texts(request: dict[str, Any]) -> list[str]:
    """The text of every text block a request sends, in order."""
    return [b["text"] for b in request_blocks(request) if b.get("type") == "text"]


def thinking_signatures(request: dict[str, Any]) -> list[str]:
    """The signature of every ``thinking`` block a request sends, in order."""
    return [b["signature"] for b in request_blocks(request) if b.get("type") == "thinking"]


def message_texts(cm: ContextManager, **kwargs: Any) -> list[str]:
    """The first text of each message ``cm.messages(**kwargs)`` returns (each must have one)."""
    out = []
    for message in cm.messages(**kwargs):
        block = message.content[0]
        assert isinstance(block, TextBlock)
        out.append(block.text)
    return out


def notice_texts(agent: Agent) -> list[str]:
    """The agent's stored ``[reasoning]`` lines, oldest first."""
    return message_texts(agent.context, kind=REASONING_LOSS_KIND)
