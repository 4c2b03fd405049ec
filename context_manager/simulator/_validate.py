"""Request validation: refuse, with the API's 400 and a message naming the place, what the real
Messages API refuses.

Pure functions over the parsed body and the request's betas. Signatures are not checked here
(``_verify`` does that); after ``validate_request`` returns, every message is a dict with a valid
role and list-or-string content, and every content block is a dict with a string ``type``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from anthropic.types.beta.message_create_params import MessageCreateParamsBase

from ._api import (
    BINDING_BETA,
    DIAGNOSTICS,
    PREFIX_MISMATCH_BEHAVIORS,
    PREVIOUS_MESSAGE_ID,
    REDACTED_THINKING,
    THINKING,
)
from ._cache import check_markers
from ._compaction import COMPACTION, check_blocks
from ._errors import InvalidRequest
from ._models import SYSTEM_MESSAGE_MODELS
from ._system import check_system_messages

SAMPLING_FIELDS = frozenset({"temperature", "top_p", "top_k"})
"""Sampling settings the API accepts (59 recorded 200s carry them) though the SDK names none."""

BODY_FIELDS = (
    frozenset(MessageCreateParamsBase.__annotations__) - {"betas"} | {"stream"} | SAMPLING_FIELDS
)
"""Top-level fields the API accepts: the SDK's create params (``betas`` is a header instead) and
the sampling settings."""

BETA_FIELDS = {"output_format": "structured-outputs-2025-11-13"}
"""Top-level fields of an earlier beta the API takes with that beta though the SDK names them no
more (recorded 200s: Mirascope sends ``output_format``, now ``output_config.format``)."""

NULLABLE_FIELDS = frozenset({"citations", "cache_control", "page_age", "previous_message_id"})
"""Fields the API takes as ``null`` (recorded 200s: Mirascope sends block-level ``citations`` and
``cache_control`` as ``null``, four clients send back web-search results with ``page_age:
null``; ``diagnostics.previous_message_id`` is ``null`` on a first turn, the documented opt-in)."""

TOOL_NULLABLE_FIELDS = frozenset(
    {"allowed_domains", "blocked_domains", "max_uses", "max_content_tokens", "user_location"}
)
"""A server tool's optional settings the API takes as ``null`` in its definition (recorded 200s:
pydantic-ai declares ``web_search_20250305`` and ``web_fetch_20250910`` with each unset one
``null``)."""

_TOOL_AT = re.compile(r"tools\.\d+")
"""The path of a tool definition (where ``TOOL_NULLABLE_FIELDS`` may be ``null`` too)."""

_IN_A_TOOL = NULLABLE_FIELDS | TOOL_NULLABLE_FIELDS

OPAQUE_JSON_FIELDS = frozenset({"input", "input_schema", "citations"})
"""Fields whose value is data, not request structure: a ``null`` inside a tool call's ``input``, a
tool's ``input_schema`` or a text block's ``citations`` (the API returns ``null`` there itself) is
kept; the field itself may still not be ``null``."""

MIN_THINKING_BUDGET = 1024
"""The API's floor for ``thinking.budget_tokens``."""

THINKING_FIELDS = {
    "enabled": frozenset({"type", "budget_tokens", "block_binding", "display"}),
    "adaptive": frozenset({"type", "block_binding", "display"}),
    "disabled": frozenset({"type"}),
    "between_tools": frozenset({"type"}),
}
"""Fields each ``thinking.type`` accepts (SDK ``BetaThinkingConfig*Param``)."""

THINKING_DISPLAYS = frozenset({"summarized", "omitted", "updates"})

MESSAGE_FIELDS = {
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content"}),
    "system": frozenset({"role", "content", "clear_at", "output_config"}),
}
"""Fields each message role accepts."""

USER_BLOCK_TYPES = frozenset(
    {"text", "image", "document", "search_result", "tool_result", "container_upload"}
)
"""Block types a user message may hold; assistant messages pass unknown types through."""

SYSTEM_BLOCK_TYPES = frozenset({"text", "tool_addition", "tool_removal"})
"""Block types a mid-conversation system message may hold."""

USER_ONLY_TYPES = frozenset({"tool_result"})
"""Block types an assistant message may not hold (everything else there passes through)."""


def validate_request(
    body: Any, betas: frozenset[str], system_message_models: frozenset[str] = SYSTEM_MESSAGE_MODELS
) -> None:
    """Refuse ``body`` as the API would, or return.

    Args:
        body: the parsed JSON request body.
        betas: the names in the request's ``anthropic-beta`` header.
        system_message_models: the models that accept mid-conversation system messages.

    Raises:
        InvalidRequest: the first problem found; its message starts with the offending path.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    _no_nulls(body, "")
    for name in sorted(body):
        if name not in BODY_FIELDS and BETA_FIELDS.get(name) not in betas:
            raise InvalidRequest(f"{name}: Extra inputs are not permitted")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise InvalidRequest(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise InvalidRequest("model: Input should be a non-empty string")
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Input should be an integer of at least 1")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise InvalidRequest("stream: Input should be a valid boolean")
    _check_sampling(body)
    _check_system(body.get("system"))
    _check_tools(body.get("tools", []))
    if "thinking" in body:
        _check_thinking(body["thinking"], max_tokens, betas)
    check_blocks(body, betas)
    _check_messages(body["messages"], betas)
    check_system_messages(body, betas, system_message_models)
    check_markers(body)
    check_diagnostics(body)


def _no_nulls(value: Any, path: str) -> None:
    if value is None:
        raise InvalidRequest(f"{path or 'body'}: Input should not be null; omit the field instead")
    if isinstance(value, dict):
        nullable = _IN_A_TOOL if _TOOL_AT.fullmatch(path) else NULLABLE_FIELDS
        for key, item in value.items():
            if key in OPAQUE_JSON_FIELDS or (item is None and key in nullable):
                continue
            _no_nulls(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_nulls(item, f"{path}.{index}" if path else str(index))


def _check_sampling(body: Mapping[str, Any]) -> None:
    for name, top in (("temperature", 1.0), ("top_p", 1.0)):
        value = body.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= top:
            raise InvalidRequest(f"{name}: Input should be a number between 0 and {top:g}")
    top_k = body.get("top_k", 0)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise InvalidRequest("top_k: Input should be an integer of at least 0")


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise InvalidRequest("system: Input should be a string or a list of text blocks")
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidRequest(f"system.{j}: Input should be a text block")
        _check_text(block, f"system.{j}")


def _check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise InvalidRequest("tools: Input should be a list")
    names: set[str] = set()
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"tools.{k}: Input should be an object")
        name = tool.get("name")
        if name is None and tool.get("type", "custom") != "custom":
            continue  # a server toolset (e.g. ``mcp_toolset``) is named by other fields
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools.{k}.name: Field required")
        if tool.get("type", "custom") == "custom" and not isinstance(
            tool.get("input_schema"), dict
        ):
            raise InvalidRequest(f"tools.{k}.custom.input_schema: Field required")
        if name in names:
            raise InvalidRequest(f"tools.{k}: Tool names must be unique; {name!r} appears twice")
        names.add(name)


def _check_thinking(thinking: Any, max_tokens: int, betas: frozenset[str]) -> None:
    if not isinstance(thinking, dict):
        raise InvalidRequest("thinking: Input should be an object")
    kind = thinking.get("type")
    if kind not in THINKING_FIELDS:
        allowed = ", ".join(repr(k) for k in THINKING_FIELDS)
        raise InvalidRequest(f"thinking.type: Input should be one of {allowed}")
    for name in sorted(thinking):
        if name not in THINKING_FIELDS[kind] or (
            name == "block_binding" and BINDING_BETA not in betas
        ):
            raise InvalidRequest(f"thinking.{name}: Extra inputs are not permitted")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_THINKING_BUDGET:
            raise InvalidRequest(
                f"thinking.budget_tokens: Input should be an integer of at least "
                f"{MIN_THINKING_BUDGET}"
            )
        if budget >= max_tokens:
            raise InvalidRequest("thinking.budget_tokens: must be less than max_tokens")
    if "display" in thinking and thinking["display"] not in THINKING_DISPLAYS:
        raise InvalidRequest(
            f"thinking.display: Input should be one of {', '.join(sorted(THINKING_DISPLAYS))}"
        )
    if "block_binding" in thinking:
        binding = thinking["block_binding"]
        if not isinstance(binding, dict):
            raise InvalidRequest("thinking.block_binding: Input should be an object")
        for name in sorted(binding):
            if name != "prefix_mismatch_behavior":
                raise InvalidRequest(
                    f"thinking.block_binding.{name}: Extra inputs are not permitted"
                )
        behavior = binding.get("prefix_mismatch_behavior", "error")
        if behavior not in PREFIX_MISMATCH_BEHAVIORS:
            raise InvalidRequest(
                "thinking.block_binding.prefix_mismatch_behavior: Input should be 'error' or "
                "'drop_block'"
            )


def _check_messages(messages: Any, betas: frozenset[str]) -> None:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages.{i}: Input should be an object")
        role = message.get("role")
        if role not in MESSAGE_FIELDS:
            raise InvalidRequest(
                f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'"
            )
        for name in sorted(message):
            if name not in MESSAGE_FIELDS[role]:
                raise InvalidRequest(f"messages.{i}.{name}: Extra inputs are not permitted")
        if "content" not in message and not (role == "system" and "output_config" in message):
            raise InvalidRequest(f"messages.{i}.content: Field required")
        _check_content(i, role, message.get("content", []), i == len(messages) - 1, betas)
    _check_tool_pairing(messages)


def _check_content(i: int, role: str, content: Any, last: bool, betas: frozenset[str]) -> None:
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = content
    else:
        raise InvalidRequest(f"messages.{i}.content: Input should be a string or a list of blocks")
    if not blocks:
        if (role == "assistant" and last) or role == "system":
            return
        raise InvalidRequest(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    beside = not all(_blank_text(block) for block in blocks)
    for j, block in enumerate(blocks):
        if beside and _blank_text(block) and block["text"]:
            continue  # whitespace beside other content: sent back by clients, accepted
        _check_block(block, role, f"messages.{i}.content.{j}", betas)


def _blank_text(block: Any) -> bool:
    """A text block whose text is a string of whitespace only (or empty)."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and not block["text"].strip()
    )


def _check_block(block: Any, role: str, path: str, betas: frozenset[str]) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidRequest(f"{path}: Input should be a content block with a string 'type'")
    kind = block["type"]
    if role == "system":
        if kind not in SYSTEM_BLOCK_TYPES:
            raise InvalidRequest(
                f"{path}.type: '{kind}' blocks are not permitted in system messages"
            )
    elif role == "user" and kind not in USER_BLOCK_TYPES and kind != COMPACTION:
        raise InvalidRequest(f"{path}.type: '{kind}' blocks are not permitted in user messages")
    elif role == "assistant" and kind in USER_ONLY_TYPES:
        raise InvalidRequest(
            f"{path}.type: '{kind}' blocks are not permitted in assistant messages"
        )
    _check_fields(block, kind, path)


def _require_str(block: Mapping[str, Any], name: str, path: str) -> None:
    if not isinstance(block.get(name), str):
        raise InvalidRequest(f"{path}.{name}: Field required (a string)")


def _check_text(block: Mapping[str, Any], path: str) -> None:
    _require_str(block, "text", path)
    if not block["text"].strip():
        raise InvalidRequest(f"{path}.text: text content blocks must contain non-whitespace text")


def _check_fields(block: Mapping[str, Any], kind: str, path: str) -> None:
    if kind == "text":
        _check_text(block, path)
    elif kind == THINKING:
        _require_str(block, "thinking", path)
        _require_str(block, "signature", path)
    elif kind == REDACTED_THINKING:
        _require_str(block, "data", path)
    elif kind == "tool_use":
        for name in ("id", "name"):
            _require_str(block, name, path)
            if not block[name]:
                raise InvalidRequest(f"{path}.{name}: String should not be empty")
        if not isinstance(block.get("input"), dict):
            raise InvalidRequest(f"{path}.input: Field required (an object)")
    elif kind == "tool_result":
        _require_str(block, "tool_use_id", path)
        inner = block.get("content", [])
        if not isinstance(inner, str | list):
            raise InvalidRequest(f"{path}.content: Input should be a string or a list of blocks")
        for k, item in enumerate(inner if isinstance(inner, list) else []):
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise InvalidRequest(f"{path}.content.{k}: Input should be a content block")
            if item["type"] == "text":
                _check_text(item, f"{path}.content.{k}")


def _turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[tuple[int, int, Any]]]]:
    """Conversational turns: consecutive same-role user/assistant messages merged (as the API
    does), system messages left out; each block kept with its ``(i, j)``."""
    turns: list[tuple[str, list[tuple[int, int, Any]]]] = []
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "system":
            continue
        content = message.get("content", [])
        blocks = content if isinstance(content, list) else []
        located = [(i, j, block) for j, block in enumerate(blocks)]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(located)
        else:
            turns.append((role, located))
    return turns


def _check_tool_pairing(messages: list[dict[str, Any]]) -> None:
    """Each assistant turn's calls answered by the next turn. An id is unique within its turn;
    a later turn may use it again once answered (a recorded 200: pydantic-ai replaying a history
    another provider made, whose ids repeat across rounds)."""
    expected: dict[str, tuple[int, int]] = {}
    for role, blocks in _turns(messages):
        if role == "assistant":
            expected = {}
            for i, j, block in blocks:
                if block["type"] != "tool_use":
                    continue
                if block["id"] in expected:
                    raise InvalidRequest(
                        f"messages.{i}.content.{j}: `tool_use` ids must be unique; "
                        f"{block['id']!r} appears twice"
                    )
                expected[block["id"]] = (i, j)
            continue
        answered = set()
        if expected and not any(block["type"] == "tool_result" for _, _, block in blocks):
            # a call answered with text alone (a forced structured-output call): the API took
            # it in 11 recorded requests (Mirascope, ellmer); an answer in part is refused
            expected = {}
            continue
        for i, j, block in blocks:
            if block["type"] != "tool_result":
                continue
            if block["tool_use_id"] not in expected:
                raise InvalidRequest(
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {block['tool_use_id']}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
            answered.add(block["tool_use_id"])
        missing = [tool_id for tool_id in expected if tool_id not in answered]
        if missing:
            i, _ = expected[missing[0]]
            raise InvalidRequest(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        expected = {}


def check_diagnostics(body: Mapping[str, Any]) -> None:
    """Refuse a malformed ``diagnostics`` field as the API does.

    Raises:
        InvalidRequest: it is not an object, carries another field, or its
            ``previous_message_id`` is neither a string nor ``null``.
    """
    if DIAGNOSTICS not in body:
        return
    value = body[DIAGNOSTICS]
    if not isinstance(value, Mapping):
        raise InvalidRequest("diagnostics: Input should be an object")
    for name in sorted(value):
        if name != PREVIOUS_MESSAGE_ID:
            raise InvalidRequest(f"diagnostics.{name}: Extra inputs are not permitted")
    previous = value.get(PREVIOUS_MESSAGE_ID)
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise InvalidRequest(
            "diagnostics.previous_message_id: Input should be a response id or null"
        )
