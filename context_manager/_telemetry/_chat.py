"""The attributes of one model call's ``chat {model}`` span, from its request and its reply.

Pure functions. Usage follows the conventions: ``gen_ai.usage.input_tokens`` is the whole input,
cache reads and writes included (the Messages API reports them apart); the cache figures are
given beside it. Message text appears only through ``_content`` and only when capture is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_manager._model._results import CompileResult
from context_manager._model._usage import CallUsage, usage_of

from . import _content
from . import _names as n


def conversation_id(namespace: str, branch: str) -> str:
    """``gen_ai.conversation.id``: the agent's namespace and the branch key.

    >>> conversation_id("ada", "b1@2026")
    'ada/b1@2026'
    """
    return f"{namespace}/{branch}"


def request_attributes(result: CompileResult, capture: bool) -> dict[str, Any]:
    """What a call span knows when it starts: the request's model, limits and conversation."""
    request = result.request
    max_tokens = request.get("max_tokens")
    out: dict[str, Any] = {
        n.OPERATION_NAME: n.OP_CHAT,
        n.PROVIDER_NAME: n.PROVIDER,
        n.REQUEST_MODEL: str(request.get("model", "")),
        n.REQUEST_STREAM: True,
        n.CONVERSATION_ID: conversation_id(result.namespace, result.branch),
        n.COMPILE_ID: result.compile_id,
    }
    if isinstance(max_tokens, int):
        out[n.REQUEST_MAX_TOKENS] = max_tokens
    if result.compacted:  # the conventions set it only when true
        out[n.CONVERSATION_COMPACTED] = True
    if capture:
        messages = request.get("messages")
        out[n.INPUT_MESSAGES] = _content.input_messages(
            messages if isinstance(messages, list) else []
        )
        out[n.SYSTEM_INSTRUCTIONS] = _content.system_instructions(request.get("system"))
    return out


def _field(message: object, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def response_attributes(message: object, capture: bool) -> dict[str, Any]:
    """What the reply adds: its model, id, finish reason and usage (cache included)."""
    usage = usage_of(message) or CallUsage()
    stop = _field(message, "stop_reason")
    out: dict[str, Any] = {
        n.RESPONSE_MODEL: _field(message, "model"),
        n.RESPONSE_ID: _field(message, "id"),
        n.RESPONSE_FINISH_REASONS: [str(stop)] if stop is not None else None,
        n.USAGE_INPUT_TOKENS: usage.total_input,
        n.USAGE_OUTPUT_TOKENS: usage.output_tokens,
        n.USAGE_CACHE_READ: usage.cache_read_input_tokens,
        n.USAGE_CACHE_WRITE: usage.cache_creation_input_tokens,
    }
    if capture:
        out[n.OUTPUT_MESSAGES] = _content.output_messages(
            message, str(stop) if stop is not None else None
        )
    return {k: v for k, v in out.items() if v is not None}


def metric_attributes(span_attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The conventions' metric attributes, taken from a call span's attributes."""
    keys = (n.OPERATION_NAME, n.PROVIDER_NAME, n.REQUEST_MODEL, n.RESPONSE_MODEL, n.ERROR_TYPE)
    return {k: span_attributes[k] for k in keys if span_attributes.get(k) is not None}
