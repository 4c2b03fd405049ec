"""HTTP framing of the simulator's answers, shared by the in-process transport and the server.

Pure data and functions: an ``HttpReply`` is a status, headers and body chunks; a streamed reply
has one chunk per SSE event (sent chunked on the wire). Error bodies always use the API's shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._errors import SimulatedApiError
from ._stream import encode_event, message_events

RETRY_AFTER_MS = "1"
"""Sent with 429 / 5xx answers so an SDK client asked to retry does so at once (fast tests)."""

BETA_HEADER = "anthropic-beta"
VERSION_HEADER = "anthropic-version"


@attrs.frozen
class HttpReply:
    """One HTTP answer: ``status``, ``headers`` and the body in ``chunks``.

    ``streamed`` replies are SSE, one chunk per event, and carry no length.
    """

    status: int
    headers: tuple[tuple[str, str], ...]
    chunks: tuple[bytes, ...]
    streamed: bool = False

    @property
    def body(self) -> bytes:
        """The whole body."""
        return b"".join(self.chunks)


def json_reply(status: int, payload: Any, request_id: str) -> HttpReply:
    """A JSON answer with a ``Content-Length``."""
    body = json.dumps(payload, ensure_ascii=False).encode()
    headers = (
        ("content-type", "application/json"),
        ("request-id", request_id),
        ("content-length", str(len(body))),
    )
    return HttpReply(status, headers, (body,))


def error_reply(error: SimulatedApiError, request_id: str) -> HttpReply:
    """The API's error answer for ``error``; retryable statuses say how soon to retry."""
    reply = json_reply(error.status, error.body(), request_id)
    if error.status == 429 or error.status >= 500:
        reply = attrs.evolve(reply, headers=(*reply.headers, ("retry-after-ms", RETRY_AFTER_MS)))
    return reply


def sse_reply(message: Mapping[str, Any], request_id: str) -> HttpReply:
    """A streamed answer: the reply's events as SSE, one chunk each."""
    headers = (
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
        ("request-id", request_id),
    )
    chunks = tuple(encode_event(event) for event in message_events(message))
    return HttpReply(200, headers, chunks, streamed=True)


def lower_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header names lower-cased (repeated headers joined with ``,``, as HTTP allows)."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


def betas_of(headers: Mapping[str, str]) -> frozenset[str]:
    """The beta names of an ``anthropic-beta`` header (comma separated, spaces ignored)."""
    raw = headers.get(BETA_HEADER, "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def framed_reply(body: Mapping[str, Any], message: Mapping[str, Any], request_id: str) -> HttpReply:
    """``message`` streamed when ``body`` asked for a stream, else as JSON."""
    if body.get("stream") is True:
        return sse_reply(message, request_id)
    return json_reply(200, message, request_id)
