"""What telemetry may say about a request or a reply: counts always, text only when opted in.

Pure functions. With content capture off nothing here is called with message text in view of an
exporter. With it on, messages are written in the GenAI conventions' ``parts`` shape (JSON
strings), and every ``thinking`` / ``redacted_thinking`` block is left out whatever the setting:
reasoning text is never recorded (it lives in the audit sidecar).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from context_manager._model._content import block_to_wire, to_blocks

from ._names import CAPTURE_CONTENT_VARIABLE

REASONING_TYPES = frozenset({"thinking", "redacted_thinking"})
"""Block types whose content no span or event ever carries."""

CAPTURE_ON = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event", "event_only"})
"""Values of the content-capture variable that turn capture on (case-insensitive): the classic
``true`` and the newer mode names of the GenAI utilities."""


def capture_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` turns capture on.

    >>> capture_from_environment({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "True"})
    True
    >>> capture_from_environment({})
    False
    """
    value = (os.environ if environ is None else environ).get(CAPTURE_CONTENT_VARIABLE, "")
    return value.strip().lower() in CAPTURE_ON


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", "")) for b in content if isinstance(b, Mapping) and "text" in b
        )
    return ""


def wire_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """One wire block as a conventions ``part``; ``None`` for reasoning (never recorded).

    >>> wire_part({"type": "thinking", "thinking": "secret", "signature": "s"}) is None
    True
    >>> wire_part({"type": "text", "text": "hi"})
    {'type': 'text', 'content': 'hi'}
    """
    kind = str(block.get("type"))
    if kind in REASONING_TYPES:
        return None
    if kind == "text":
        return {"type": "text", "content": str(block.get("text", ""))}
    if kind == "tool_use":
        return {
            "type": "tool_call",
            "id": block.get("id"),
            "name": block.get("name"),
            "arguments": block.get("input"),
        }
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": block.get("tool_use_id"),
            "result": _text_of(block.get("content")),
        }
    return {"type": kind}  # a block of another kind: named, its content not recorded


def _parts(content: Any) -> list[dict[str, Any]]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return []
    parts = (wire_part(b) for b in blocks if isinstance(b, Mapping))
    return [p for p in parts if p is not None]


def input_messages(messages: Sequence[Any]) -> str:
    """``gen_ai.input.messages``: the request's messages as JSON, reasoning left out."""
    out = [
        {"role": str(m.get("role")), "parts": _parts(m.get("content"))}
        for m in messages
        if isinstance(m, Mapping)
    ]
    return json.dumps(out, ensure_ascii=False, default=str)


def system_instructions(system: Any) -> str | None:
    """``gen_ai.system_instructions``: the request's ``system`` as JSON parts, or ``None``."""
    parts = _parts(system)
    return json.dumps(parts, ensure_ascii=False, default=str) if parts else None


def output_messages(message: object, finish_reason: str | None) -> str:
    """``gen_ai.output.messages``: the reply (an SDK message or blocks) as JSON, reasoning left
    out."""
    wire = [block_to_wire(b) for b in to_blocks(message)]
    out = [{"role": "assistant", "parts": _parts(wire), "finish_reason": finish_reason}]
    return json.dumps(out, ensure_ascii=False, default=str)


def as_json(value: Any) -> str:
    """A tool's arguments or result as the JSON string an attribute carries."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
