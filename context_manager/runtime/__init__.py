"""The bundled asyncio runtime: resident agents whose turns run through the ``anthropic`` SDK."""

from __future__ import annotations

from ._agent import CALL_USAGE_EVENT, Agent
from ._calls import LiveSink, RetryPolicy
from ._live import LIVE_BUFFER_CHARS, SUBSCRIBER_BACKLOG, ReasoningHub, ReasoningSink, Subscription
from ._publish import MirroredReasoning, ReasoningPublisher, payloads_of
from ._runtime import Runtime, check_agent_name
from ._tools import ToolCall, ToolFunction
from ._turn import Turn, TurnResult

__all__ = [
    "CALL_USAGE_EVENT",
    "LIVE_BUFFER_CHARS",
    "SUBSCRIBER_BACKLOG",
    "Agent",
    "LiveSink",
    "MirroredReasoning",
    "ReasoningHub",
    "ReasoningPublisher",
    "ReasoningSink",
    "RetryPolicy",
    "Runtime",
    "Subscription",
    "ToolCall",
    "ToolFunction",
    "Turn",
    "TurnResult",
    "check_agent_name",
    "payloads_of",
]
