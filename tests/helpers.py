"""Shared test helpers. Keep each one small, named for what it does, and used by more than one test.

Simulator helpers: ``sdk_client`` (the real SDK client in-process or over the loopback server),
``wire_reply`` (a reply as the assistant message a client sends back) and ``transformations``
(a reply's ``input_transformations`` as ``(type, path, reason)`` triples).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic

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
