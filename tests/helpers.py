"""Test helpers shared by several suites (one definition each; import them from here).

Readers of what a user can see: a request's texts and thinking, a context's messages and its
``[reasoning]`` notices. Simulator helpers: ``sdk_client`` (the real SDK client in-process or over
the loopback server), ``wire_reply`` (a reply as the assistant message a client sends back) and
``transformations`` (a reply's ``input_transformations`` as ``(type, path, reason)`` triples).
They assert nothing, so a test's meaning stays in the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic

from context_manager import REASONING_LOSS_KIND, ContextManager, TextBlock
from context_manager._model import strip_cache_control
from context_manager.runtime import Agent
from context_manager.simulator import Simulator

TRANSPORTS = ("in-process", "loopback")
"""How a test reaches the simulator: ``sim.client()``, or the SDK over ``sim.serve()``."""


@asynccontextmanager
async def sdk_client(sim: Simulator, transport: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An ``anthropic.AsyncAnthropic`` talking to ``sim`` over ``transport`` (one of TRANSPORTS)."""
    if transport == "in-process":
        async with sim.client() as client:
            yield client
        return
    with sim.serve() as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sim", max_retries=0) as client:
            yield client


def wire_reply(message: anthropic.types.beta.BetaMessage) -> dict[str, Any]:
    """A reply as the assistant message a client sends back (plain wire dicts)."""
    return {
        "role": "assistant",
        "content": [block.model_dump(exclude_none=True) for block in message.content],
    }


def transformations(message: anthropic.types.beta.BetaMessage) -> list[tuple[str, str, str]]:
    """``(type, path, reason)`` of every ``input_transformations`` entry of a reply, in order."""
    assert message.input_transformations is not None
    return [(t.type, t.path, t.reason) for t in message.input_transformations]


def unmarked(value: Any) -> Any:
    """``value`` (a request, messages, a message) with every ``cache_control`` marker removed:
    what a test about rendering compares, whatever breakpoints the compile placed."""
    return strip_cache_control(value)


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
