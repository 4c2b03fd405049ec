"""The ``[reasoning]`` notices: the line, the teller, incidents and the operators' alert."""

from __future__ import annotations

from ._incidents import ALERT_EVENT, IncidentStep, ThinkingLossIncidents
from ._line import (
    MARKER,
    QUOTE_LIMIT,
    LineForm,
    cause_clause,
    name_reply,
    quoted_start,
    reasoning_loss_line,
)
from ._notice import notice_metadata
from ._teller import ReadMessage, ReasoningLossTeller
from ._told import DEFAULT_CAP
from ._turn import TurnState

__all__ = [
    "ALERT_EVENT",
    "DEFAULT_CAP",
    "MARKER",
    "QUOTE_LIMIT",
    "IncidentStep",
    "LineForm",
    "ReadMessage",
    "ReasoningLossTeller",
    "ThinkingLossIncidents",
    "TurnState",
    "cause_clause",
    "name_reply",
    "notice_metadata",
    "quoted_start",
    "reasoning_loss_line",
]
