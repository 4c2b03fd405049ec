"""The operator console: agents, transcripts, usage and reasoning in the browser.

A layer above the facade, beside ``runtime/`` (which mounts it: ``Runtime.serve``); Starlette and
uvicorn are imported only when an app is built or served (the ``web`` extra).
"""

from __future__ import annotations

from ._access import (
    MIN_TOKEN_CHARS,
    OWNER_GRANT,
    Access,
    Principal,
    reads_reasoning,
    sees_agent,
)
from ._app import COOKIE, NOT_FOUND, Console, create_app, sse_frame
from ._chart import cache_share, usage_chart
from ._server import LOOPBACK, ConsoleServer
from ._source import CallbackSource, ConsoleSource, StoreSource, read_transcript
from ._view import Line, Marker, Round, TranscriptView, TurnUsage, build_view, line_of

__all__ = [
    "COOKIE",
    "LOOPBACK",
    "MIN_TOKEN_CHARS",
    "NOT_FOUND",
    "OWNER_GRANT",
    "Access",
    "CallbackSource",
    "Console",
    "ConsoleServer",
    "ConsoleSource",
    "Line",
    "Marker",
    "Principal",
    "Round",
    "StoreSource",
    "TranscriptView",
    "TurnUsage",
    "build_view",
    "cache_share",
    "create_app",
    "line_of",
    "read_transcript",
    "reads_reasoning",
    "sees_agent",
    "sse_frame",
    "usage_chart",
]
