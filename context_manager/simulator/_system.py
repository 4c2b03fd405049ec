"""Mid-conversation ``role: "system"`` messages: placement, blocks, betas and tool changes.

Pure functions (provider rules 16-19). Accepted shape: a system message follows a user message and
is followed by an assistant message or ends the list; it is never first, never right after an
assistant message (so never between a ``tool_use`` and its ``tool_result``), never right before a
user message, never next to another system message; the model must be one that accepts them. Tool
changes reference a tool by name (``tool_reference``, beta ``mid-conversation-tool-changes``) or
define one inline (``tool_definition``, beta ``inline-tools``); ``clear_at`` and ``output_config``
need their own betas. Every refusal is an ``InvalidRequest`` naming ``messages.i...``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ._api import INLINE_TOOLS_BETA, OUTPUT_CONFIG_BETA, SYSTEM_CLEAR_AT_BETA, TOOL_CHANGES_BETA
from ._canon import is_deferred, tool_name
from ._errors import InvalidRequest
from ._models import accepts_system_messages

CLEAR_NEVER = "never"
CLEAR_AT_VALUES = frozenset({"next_user_message", CLEAR_NEVER})
"""``clear_at`` values (SDK ``BetaSystemMessageParam``); ``"never"`` is the default."""

EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
"""``output_config.effort`` values (SDK ``BetaSystemMessageOutputConfigParam``)."""

OUTPUT_CONFIG_FIELDS = frozenset({"effort"})
"""Fields a per-message ``output_config`` accepts (``format`` stays top-level only)."""

TOOL_CHANGE_TYPES = frozenset({"tool_addition", "tool_removal"})

MCP_REFERENCES = frozenset({"mcp_tool_reference", "mcp_toolset_reference"})
"""MCP references: accepted with the tool-changes beta, not tracked (no MCP server here)."""


def added_tool_name(block: Any) -> str | None:
    """The name a ``tool_addition`` block references (``tool_reference``), else ``None``."""
    if not isinstance(block, Mapping) or block.get("type") != "tool_addition":
        return None
    tool = block.get("tool")
    if isinstance(tool, Mapping) and tool.get("type") == "tool_reference":
        name = tool.get("name")
        return name if isinstance(name, str) else None
    return None


@attrs.define
class ToolSet:
    """The tools offered to the model at a point of the conversation, by name.

    ``known`` holds every definition a reference may name (``tools`` plus inline definitions seen
    so far); ``active`` the names currently offered.
    """

    known: dict[str, dict[str, Any]]
    active: list[str]
    deferred: frozenset[str] = frozenset()
    """The names ``tools`` declares with ``defer_loading: true``: the only ones a
    ``tool_reference`` may add (provider rule 17; adding any other by reference is undocumented)."""

    @classmethod
    def start(cls, tools: Any) -> ToolSet:
        """The set before any message: every ``tools`` entry except deferred ones."""
        known: dict[str, dict[str, Any]] = {}
        active: list[str] = []
        deferred: set[str] = set()
        for tool in tools if isinstance(tools, list) else []:
            name = tool_name(tool)
            if name is None:
                continue
            known[name] = tool
            if is_deferred(tool):
                deferred.add(name)
            else:
                active.append(name)
        return cls(known, active, frozenset(deferred))

    def offered(self) -> list[dict[str, Any]]:
        """The active tools' definitions (``defer_loading`` removed: they are loaded)."""
        return [
            {k: v for k, v in self.known[name].items() if k != "defer_loading"}
            for name in self.active
        ]

    def apply(self, block: Mapping[str, Any], path: str, betas: frozenset[str]) -> None:
        """Apply one ``tool_addition`` / ``tool_removal`` block, refusing what the API refuses."""
        kind = block["type"]
        tool = block.get("tool")
        if not isinstance(tool, Mapping) or not isinstance(tool.get("type"), str):
            raise InvalidRequest(f"{path}.tool: Field required (a tool reference or definition)")
        ref_type = tool["type"]
        if ref_type in MCP_REFERENCES:
            _need(TOOL_CHANGES_BETA, betas, f"{path}.tool.type", ref_type)
            return
        if ref_type == "tool_definition":
            if kind != "tool_addition":
                raise InvalidRequest(
                    f"{path}.tool.type: 'tool_definition' is only permitted in tool_addition "
                    "blocks; remove a tool by reference"
                )
            _need(INLINE_TOOLS_BETA, betas, f"{path}.tool.type", ref_type)
            definition = tool.get("definition")
            name = tool_name(definition)
            if not isinstance(definition, Mapping) or name is None:
                raise InvalidRequest(f"{path}.tool.definition: Input should be a named tool")
            if name in self.active:
                raise InvalidRequest(
                    f"{path}.tool.definition.name: tool {name!r} is already available"
                )
            self.known[name] = dict(definition)
            self.active.append(name)
            return
        if ref_type != "tool_reference":
            raise InvalidRequest(f"{path}.tool.type: '{ref_type}' is not a tool reference")
        _need(TOOL_CHANGES_BETA, betas, f"{path}.type", kind)
        name = tool.get("name")
        if not isinstance(name, str) or name not in self.known:
            raise InvalidRequest(
                f"{path}.tool.name: {name!r} is not a tool declared in `tools` or defined earlier"
            )
        if kind == "tool_addition":
            if name in self.active:
                raise InvalidRequest(
                    f"{path}.tool.name: tool {name!r} is already available; a tool_addition "
                    "references a tool declared with `defer_loading: true` (or one removed earlier)"
                )
            if name not in self.deferred:
                raise InvalidRequest(
                    f"{path}.tool.name: tool {name!r} is not declared with "
                    "`defer_loading: true`; add it again by an inline `tool_definition`"
                )
            self.active.append(name)
        else:
            if name not in self.active:
                raise InvalidRequest(f"{path}.tool.name: tool {name!r} is not available to remove")
            self.active.remove(name)


def _need(beta: str, betas: frozenset[str], path: str, what: str) -> None:
    if beta not in betas:
        raise InvalidRequest(f"{path}: '{what}' requires the beta header `anthropic-beta: {beta}`")


def _placement(i: int, messages: Sequence[Mapping[str, Any]]) -> None:
    before = messages[i - 1].get("role") if i > 0 else None
    after = messages[i + 1].get("role") if i + 1 < len(messages) else None
    where = f"messages.{i}"
    if "system" in (before, after):
        raise InvalidRequest(
            f"{where}: two adjacent `system` messages are not permitted; put their content in "
            "one message"
        )
    if before != "user":
        raise InvalidRequest(
            f"{where}: a `system` message must come right after a `user` message (for example "
            "after the `tool_result` message), never first, after an `assistant` message or "
            "between a `tool_use` and its `tool_result`"
        )
    if after not in (None, "assistant"):
        raise InvalidRequest(
            f"{where}: a `system` message cannot come right before a `user` message; it must "
            "be followed by an `assistant` message or end the list"
        )


def _content(i: int, message: Mapping[str, Any], tools: ToolSet, betas: frozenset[str]) -> None:
    content = message.get("content", [])
    blocks: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise InvalidRequest(f"messages.{i}.content: Input should be a string or a list of blocks")
    config = message.get("output_config")
    if not blocks and not (isinstance(config, Mapping) and config):
        raise InvalidRequest(
            f"messages.{i}: a `system` message needs content or `output_config` fields"
        )
    for j, block in enumerate(blocks):
        path = f"messages.{i}.content.{j}"
        if isinstance(block, Mapping) and block.get("type") in TOOL_CHANGE_TYPES:
            tools.apply(block, path, betas)


def _fields(i: int, message: Mapping[str, Any], betas: frozenset[str]) -> None:
    if "clear_at" in message:
        _need(SYSTEM_CLEAR_AT_BETA, betas, f"messages.{i}.clear_at", "clear_at")
        if message["clear_at"] not in CLEAR_AT_VALUES:
            raise InvalidRequest(
                f"messages.{i}.clear_at: Input should be 'next_user_message' or 'never'"
            )
    if "output_config" in message:
        _need(OUTPUT_CONFIG_BETA, betas, f"messages.{i}.output_config", "output_config")
        config = message["output_config"]
        if not isinstance(config, Mapping):
            raise InvalidRequest(f"messages.{i}.output_config: Input should be an object")
        for name in sorted(config):
            if name not in OUTPUT_CONFIG_FIELDS:
                raise InvalidRequest(
                    f"messages.{i}.output_config.{name}: Extra inputs are not permitted"
                )
        if "effort" in config and config["effort"] not in EFFORTS:
            raise InvalidRequest(
                f"messages.{i}.output_config.effort: Input should be one of "
                f"{', '.join(sorted(EFFORTS))}"
            )


def check_system_messages(
    body: Mapping[str, Any], betas: frozenset[str], models: frozenset[str]
) -> ToolSet:
    """Refuse misplaced or malformed system messages; return the tool set at the end.

    Args:
        body: a request whose messages passed the structural checks.
        betas: the request's beta names.
        models: the models that accept mid-conversation system messages.

    Raises:
        InvalidRequest: the first problem, naming ``messages.i...``.
    """
    messages: list[Mapping[str, Any]] = body["messages"]
    model = str(body["model"])
    tools = ToolSet.start(body.get("tools", []))
    for i, message in enumerate(messages):
        if message.get("role") != "system":
            continue
        if not accepts_system_messages(model, models):
            raise InvalidRequest(
                f"messages.{i}.role: `system` messages in `messages` are not supported on "
                f"{model}; use the top-level `system` field or a user message"
            )
        _placement(i, messages)
        _fields(i, message, betas)
        _content(i, message, tools, betas)
    return tools


def offered_tools(body: Mapping[str, Any]) -> ToolSet:
    """The tool set after every system message of a validated request (no betas checked)."""
    tools = ToolSet.start(body.get("tools", []))
    everything = frozenset({TOOL_CHANGES_BETA, INLINE_TOOLS_BETA})
    for i, message in enumerate(body.get("messages", [])):
        if message.get("role") != "system" or not isinstance(message.get("content"), list):
            continue
        for j, block in enumerate(message["content"]):
            if isinstance(block, Mapping) and block.get("type") in TOOL_CHANGE_TYPES:
                tools.apply(block, f"messages.{i}.content.{j}", everything)
    return tools
