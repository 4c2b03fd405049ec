"""What a turn's newest stored messages say: open tool calls, an unanswered turn, its asker.

Pure functions over stored messages (the runtime reads at most the newest 64). A fold's summary
and a compaction block open a window; they never answer a turn nor close a tool round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from context_manager._binding._drops import parse_input_transformations, place_thinking_drops
from context_manager._compile._compaction import COMPACTION_KIND
from context_manager._compile._fold import SUMMARY_KIND
from context_manager._model._content import ToolResultBlock, ToolUseBlock
from context_manager._model._head import Head
from context_manager._model._log import library_logger
from context_manager._model._messages import ASKER_KEY
from context_manager._model._results import CompileResult

log = library_logger("context_manager.runtime")

OPENER_KINDS = (SUMMARY_KIND, COMPACTION_KIND)
"""Stored messages that open a window rather than answer a turn (a fold's summary, a block)."""


def offered(head: Head) -> frozenset[str] | None:
    """The tool names ``head`` offers, or ``None`` when it declares no tools (the agent's tool
    map alone decides then)."""
    if not head.tools:
        return None
    return frozenset(str(t.get("name")) for t in head.tools if not t.get("defer_loading"))


def awaits_answer(messages: Sequence[Any]) -> bool:
    """True when the newest message that is neither a system one, a fold's summary nor a
    compaction block is the user's (a trigger or tool results): the model has not answered it
    yet."""
    for message in reversed(messages):
        if message.role != "system" and message.metadata.kind not in OPENER_KINDS:
            return bool(message.role == "user")
    return False


def dropped(message: object, result: CompileResult) -> list[list[object]]:
    """The provider's drops in this call's request placed on stored replies (no store read):
    ``[reply id, block, reason]`` each, for the console's markers."""
    try:
        drops = parse_input_transformations(message, quiet=True)
        placed = place_thinking_drops(drops, result.provenance) if drops else None
    except Exception as err:  # a report that cannot be read is placed (and logged) later
        log.debug("drops_not_noted", error=repr(err))
        return []
    if placed is None:
        return []
    return [[d.message_id, d.block, d.reason] for d in placed.replies if d.block is not None]


def asker_of(messages: Sequence[Any]) -> str | None:
    """Who asked the turn the newest user message belongs to (``None``: nobody recorded)."""
    for message in reversed(messages):
        if message.role == "user":
            asker = message.metadata.extra.get(ASKER_KEY)
            return asker if isinstance(asker, str) else None
    return None


def unanswered(messages: Sequence[Any]) -> list[ToolUseBlock]:
    """Tool calls of the newest reply that no later message answers. A reply a user message
    follows is answered as stored (text alone answers a forced call, and is sent so)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != "assistant" or message.metadata.kind == COMPACTION_KIND:
            continue
        later = messages[index + 1 :]
        if any(m.role == "user" and not m.metadata.system_notice for m in later) and not any(
            isinstance(b, ToolResultBlock) for m in later for b in m.content
        ):
            return []
        uses = [b for b in message.content if isinstance(b, ToolUseBlock)]
        answered = {
            b.tool_use_id
            for later in messages[index + 1 :]
            for b in later.content
            if isinstance(b, ToolResultBlock)
        }
        return [u for u in uses if u.id not in answered]
    return []
