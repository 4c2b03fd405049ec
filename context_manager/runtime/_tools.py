"""Running an agent's tool calls: every outcome becomes a ``tool_result``, never an exception.

Pure with respect to the store: takes the tool map and the calls, returns result blocks. A tool
that raises, is unknown, or returns something that cannot be sent becomes an error result naming
what happened, so the turn goes on and the model is told.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeAlias

import attrs

from context_manager._model._content import (
    Block,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    to_block,
)
from context_manager._model._errors import InvalidType
from context_manager._model._log import library_logger

log = library_logger("context_manager.runtime")

ToolFunction: TypeAlias = Callable[[dict[str, Any]], Any | Awaitable[Any]]
"""A tool: takes the call's input dict, returns text or blocks (sync or async)."""


@attrs.frozen
class ToolCall:
    """One tool call of a turn and how it ended."""

    id: str
    name: str
    input: dict[str, Any]
    is_error: bool


REMOVED_TOOL_TEXT = (
    "tool {name!r} was removed from your tools by a change of this conversation (a system "
    "message withdrew it); it cannot be called now"
)
"""The error result of a call to a tool the agent's head no longer offers (SPEC 7b)."""


async def run_tool(
    tools: Mapping[str, ToolFunction],
    call: ToolUseBlock,
    offered: Collection[str] | None = None,
) -> ToolResultBlock:
    """Run ``call`` and return its result block (``is_error`` on any failure).

    ``offered``: the tool names the agent's head offers now; a call to any other name is
    answered with an error result naming the change (a removed tool stays declared in the
    request's ``tools`` while changes are appended, so the model may still call it).
    """
    if offered is not None and call.name not in offered:
        return _error(call, REMOVED_TOOL_TEXT.format(name=call.name))
    function = tools.get(call.name)
    if function is None:
        known = ", ".join(sorted(tools)) or "none"
        return _error(call, f"unknown tool {call.name!r}; known tools: {known}")
    try:
        value = function(dict(call.input))
        if inspect.isawaitable(value):
            value = await value
    except Exception as err:  # a tool's failure is the model's to see, not the turn's
        log.warning("tool_failed", tool=call.name, tool_use_id=call.id, error=repr(err))
        return _error(call, f"{type(err).__name__}: {err}")
    try:
        return ToolResultBlock(tool_use_id=call.id, content=_content(value))
    except (TypeError, ValueError) as err:
        log.warning("tool_result_unsendable", tool=call.name, tool_use_id=call.id, error=str(err))
        return _error(call, f"the tool returned a value that cannot be sent: {err}")


def _error(call: ToolUseBlock, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call.id, content=text, is_error=True)


def _content(value: Any) -> str | tuple[Block, ...]:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, TextBlock | ImageBlock):
        return (value,)
    if isinstance(value, list | tuple) and value:
        try:
            blocks = tuple(to_block(item) for item in value)
        except TypeError:
            blocks = ()
        if blocks and all(isinstance(b, TextBlock | ImageBlock) for b in blocks):
            return blocks
    if isinstance(value, dict | list | tuple | int | float | bool):
        return json.dumps(value, ensure_ascii=False)
    raise InvalidType(f"{type(value).__name__} is neither text, blocks nor JSON")
