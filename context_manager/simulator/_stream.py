"""Server-sent events for a reply, in the order and shapes the real Messages API streams them.

Pure functions. Accumulating the events (as the SDK's stream helper does) rebuilds exactly the
reply message: ``message_start`` carries the final ``input_transformations``; thinking streams as
``thinking_delta`` then one ``signature_delta``; tool input as ``input_json_delta`` pieces; a
``compaction`` block arrives whole in its ``content_block_start`` (no deltas); the final
``message_delta`` carries ``context_management`` (``applied_edits``) and ``usage.iterations``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ._api import THINKING

DELTA_CHARS = 24
"""Characters per text / thinking / JSON delta: small, so every non-trivial block streams in
several pieces, as the real API's do."""

START_OUTPUT_TOKENS = 1
"""``message_start`` reports one output token, as the real API does; ``message_delta`` the total."""

Event = tuple[str, dict[str, Any]]
"""``(event name, data)``; the name equals ``data["type"]``."""


def _pieces(text: str) -> Iterator[str]:
    for at in range(0, len(text), DELTA_CHARS):
        yield text[at : at + DELTA_CHARS]


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[Event]:
    kind = block.get("type")
    if kind == THINKING:
        start: dict[str, Any] = {**block, "thinking": "", "signature": ""}
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": piece}
            for piece in _pieces(str(block.get("thinking", "")))
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(str(block["text"]))]
    elif kind == "tool_use":
        start = {**block, "input": {}}
        partial = (
            json.dumps(block.get("input", {}), ensure_ascii=False) if block.get("input") else ""
        )
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(partial)]
        deltas = deltas or [{"type": "input_json_delta", "partial_json": ""}]
    else:
        start, deltas = dict(block), []
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": start},
    )
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def message_events(message: Mapping[str, Any]) -> list[Event]:
    """The full event sequence for ``message`` (a reply built by ``_reply.message_dict``)."""
    usage = message["usage"]
    start = {
        **{k: v for k, v in message.items() if k != "context_management"},
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": START_OUTPUT_TOKENS},
    }
    events: list[Event] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block))
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    if "iterations" in usage:
        delta["usage"]["iterations"] = usage["iterations"]
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    events.append(("message_delta", delta))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_event(event: Event) -> bytes:
    """One SSE frame: ``event: NAME`` and ``data: JSON`` lines, then a blank line."""
    name, data = event
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
