"""The bundled asyncio runtime: resident agents whose turns run through the ``anthropic`` SDK."""

from __future__ import annotations

from ._agent import CALL_USAGE_EVENT, Agent, Turn, TurnResult
from ._calls import RetryPolicy
from ._runtime import Runtime, check_agent_name
from ._tools import ToolCall, ToolFunction

__all__ = [
    "CALL_USAGE_EVENT",
    "Agent",
    "RetryPolicy",
    "Runtime",
    "ToolCall",
    "ToolFunction",
    "Turn",
    "TurnResult",
    "check_agent_name",
]
