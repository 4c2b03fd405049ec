"""The SDK's own cost for a request: ``client.beta.messages.create(**request)`` through a mock
transport, measured side by side with the compiles (issue 18).

The transport answers every request at once with one short message, so the figure is the SDK's
work on the request (validation, transformation, JSON encoding) and on the reply, no network.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2

from ._timing import settle, timed

REPLY: dict[str, Any] = {
    "id": "msg_bench",
    "type": "message",
    "role": "assistant",
    "model": "claude-opus-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
"""What the mock transport answers (small: the reply's cost is not what is measured)."""


class _Sink:
    """Answers every request with ``REPLY`` and remembers the last body's size."""

    def __init__(self) -> None:
        self.body_bytes = 0
        self._reply = json.dumps(REPLY).encode()

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.body_bytes = len(request.read())
        return httpx2.Response(
            200, content=self._reply, headers={"content-type": "application/json"}
        )


def sdk_create(request: Mapping[str, Any], repeats: int) -> tuple[list[float], int]:
    """Seconds of ``client.beta.messages.create(**request)`` per repetition, and the body's bytes.

    One untimed call first (the SDK's lazy imports and first-use caches).
    """
    sink = _Sink()
    client = anthropic.Anthropic(
        api_key="sk-bench",
        base_url="http://sdk.invalid",
        http_client=httpx2.Client(transport=httpx2.MockTransport(sink)),
        max_retries=0,
    )
    try:
        with warnings.catch_warnings():
            # the SDK warns that the benchmark's model id is deprecated: a name, not the cost
            warnings.simplefilter("ignore", DeprecationWarning)
            client.beta.messages.create(**request)
            settle()
            samples = [
                timed(lambda: client.beta.messages.create(**request))[0] for _ in range(repeats)
            ]
    finally:
        client.close()
    return samples, sink.body_bytes
