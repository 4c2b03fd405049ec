"""The attributes of this library's spans and span events, from its own results.

Pure functions from frozen values (``CompileResult``, ``ThinkingStrip``, ``PlacedDrops``, a
stored head change) to attribute maps. They read ids, counts, causes, reasons and paths, never
message text or reasoning text: what they return is safe to export with content capture off.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from context_manager._binding._drops import PlacedDrops
from context_manager._compile._caching import _blocks, _message_markers, previous_request_end
from context_manager._model._content import TextBlock, UnknownBlock
from context_manager._model._messages import StoredMessage
from context_manager._model._results import CompileResult, ThinkingStrip

from . import _names as n
from ._span import Attributes


def cache_markers(request: Mapping[str, Any]) -> int:
    """The ``cache_control`` markers where the compiler places its own (``Caching``): the tools,
    the system, the first message, the previous call's newest message and the newest message.

    A host's own marker on any other message is not counted (finding it would cost a scan of the
    whole request). Cost: O(tools + system blocks), whatever the history's length.
    """
    messages = _blocks(request.get("messages"))
    head = [*_blocks(request.get("tools")), *_blocks(request.get("system"))]
    found = sum(1 for block in head if type(block) is dict and "cache_control" in block)
    if not messages:
        return found
    previous = previous_request_end(messages)
    indexes = {0, len(messages) - 1, *(() if previous is None else (previous,))}
    return found + sum(len(_message_markers(i, messages[i])) for i in indexes)


def compile_attributes(result: CompileResult) -> dict[str, Any]:
    """The ``compile`` span's attributes: id, tokens, cache markers and what it changed.

    The counts of what it appended, shed, folded and restored, and the compaction flag, are
    present only when not zero (a steady compile sets none of them). Cost: O(1) in the history's
    length (see ``cache_markers``).
    """
    request = result.request
    messages = request.get("messages")
    out: dict[str, Any] = {
        n.COMPILE_ID: result.compile_id,
        n.NAMESPACE: result.namespace,
        n.BRANCH: result.branch,
        n.REQUEST_MODEL: str(request.get("model", "")),
        n.COMPILE_TOKENS: result.tokens,
        n.COMPILE_MESSAGES: len(messages) if isinstance(messages, list) else 0,
        n.COMPILE_CACHE_MARKERS: cache_markers(request),
    }
    changes = (
        (n.COMPILE_APPENDED, len(result.appended)),
        (n.COMPILE_SHED, len(result.shed)),
        (n.COMPILE_FOLDED, result.folded),
        (n.COMPILE_RESTORED, len(result.restored)),
        (n.COMPILE_COMPACTED, result.compacted),
    )
    out.update((key, value) for key, value in changes if value)
    return out


def strip_attributes(strip: ThinkingStrip) -> dict[str, Any]:
    """A ``context_manager.thinking_strip`` event: cause, changed components, replies, blocks."""
    return {
        n.CAUSE: strip.cause,
        n.CHANGED: list(strip.changed),
        n.REPLIES: list(strip.replies),
        n.BLOCKS: strip.blocks,
        n.BRANCH: strip.branch,
        n.COMPILE_ID: strip.compile_id,
    }


def drop_events(placed: PlacedDrops) -> Iterator[dict[str, Any]]:
    """One ``context_manager.thinking_drop`` event per dropped block, placed or not."""
    for reply in placed.replies:
        yield {
            n.PLACED: True,
            n.REASON: reply.reason,
            n.PATH: reply.path,
            n.MESSAGE_ID: reply.message_id,
        }
    for round_drop in placed.rounds:
        yield {
            n.PLACED: True,
            n.REASON: round_drop.reason,
            n.PATH: round_drop.path,
            n.MESSAGE_ID: round_drop.message_id or f"round:{round_drop.round}",
        }
    for unplaced in placed.unplaced:
        yield {
            n.PLACED: False,
            n.REASON: unplaced.reason,
            n.PATH: unplaced.path,
            n.WHY: unplaced.why,
        }


def release_attributes(
    branch: str, message_id: str, from_block: int | None, origin: str
) -> dict[str, Any]:
    """A ``context_manager.release`` event: whose thinking, from which block (left out when not
    known: a shed reports replies), and why (``host``, ``drop``, ``shed``)."""
    out: dict[str, Any] = {n.BRANCH: branch, n.MESSAGE_ID: message_id, n.ORIGIN: origin}
    if from_block is not None:
        out[n.FROM_BLOCK] = from_block
    return out


def head_change_attributes(message: StoredMessage) -> dict[str, Any]:
    """A ``context_manager.head_change`` event: the tools added and removed, whether the system
    text changed (never the text itself)."""
    added: list[str] = []
    removed: list[str] = []
    for block in message.content:
        if not isinstance(block, UnknownBlock):
            continue
        tool = block.raw.get("tool")
        name = _tool_name(tool) if isinstance(tool, Mapping) else ""
        if block.type == "tool_addition":
            added.append(name)
        elif block.type == "tool_removal":
            removed.append(name)
    return {
        n.MESSAGE_ID: message.id,
        n.BRANCH: message.branch,
        n.TOOLS_ADDED: added,
        n.TOOLS_REMOVED: removed,
        n.SYSTEM_CHANGED: any(isinstance(b, TextBlock) for b in message.content),
    }


def _tool_name(tool: Mapping[str, Any]) -> str:
    definition = tool.get("definition")
    if isinstance(definition, Mapping):
        return str(definition.get("name", ""))
    return str(tool.get("name", ""))


def notice_attributes(branch: str, message_id: str, form: str | None) -> Attributes:
    """A ``context_manager.notice`` event: the stored line's id and form (never its text)."""
    return {n.BRANCH: branch, n.MESSAGE_ID: message_id, n.FORM: form or "other"}
