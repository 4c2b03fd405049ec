"""Where the server's tool-use clearing will next change the request, for the cache breakpoints
(provider rule 29: each clear invalidates the prompt cache from the cleared point).

Pure functions of the rendered messages and the ``ClearToolUses`` settings, so a reopened store
places the same markers (SPEC 7). Once the request passes the trigger, the API clears the results
of every tool use but the newest ``keep`` (and the excluded tools'): each new tool use moves that
boundary on, and the server's view changes from the oldest kept use's result (or, with
``clear_inputs``, its call) on. ``clear_point`` is the last markable block before that change: a
prefix that stays the same in the server's view until the boundary moves past it. A request
marks its own clear point (what the next call reads) and the previous call's (what this call
reads), so a clear costs one write, from the previous clear point to the end, instead of the
whole window from the head. When the boundary moved and the request is over the trigger, the
previous call's newest message no longer matches in the server's view (a result inside it was
cleared since): ``ClearPoints.previous_stale`` says so, and that breakpoint is given up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_manager._model._editing import ClearToolUses

Position = tuple[str, int, int]
"""``("messages", i, j)``: block ``j`` of message ``i`` (as ``_caching.Position``)."""

UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
MARKABLE_ROLES = frozenset({"user", "assistant"})


@attrs.frozen
class ClearPoints:
    """The breakpoints context editing asks for, most useful first, and whether the previous
    call's newest message is stale in the server's view."""

    points: tuple[Position, ...] = ()
    previous_stale: bool = False


def _uses(messages: Sequence[Any]) -> list[tuple[int, int, Mapping[str, Any]]]:
    return [
        (i, j, block)
        for i, message in enumerate(messages)
        if isinstance(message, Mapping) and message.get("role") == "assistant"
        if isinstance(message.get("content"), list)
        for j, block in enumerate(message["content"])
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]


def _result_of(messages: Sequence[Any], use_id: object, after: int) -> tuple[int, int] | None:
    for i in range(after + 1, len(messages)):
        message = messages[i]
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or message.get("role") != "user":
            continue
        for j, block in enumerate(content):
            if isinstance(block, Mapping) and block.get("tool_use_id") == use_id:
                return i, j
    return None


def clears_input(edit: ClearToolUses, name: object) -> bool:
    """True when ``edit`` also clears the inputs of ``name``'s calls."""
    return edit.clear_inputs is True or (
        isinstance(edit.clear_inputs, tuple) and name in edit.clear_inputs
    )


def _markable(message: Any, block: Any) -> bool:
    return (
        isinstance(message, Mapping)
        and message.get("role") in MARKABLE_ROLES
        and isinstance(block, Mapping)
        and block.get("type") not in UNMARKABLE
    )


def markable_before(messages: Sequence[Any], i: int, j: int) -> Position | None:
    """The last block before block ``j`` of message ``i`` that can carry a marker.

    >>> markable_before([{"role": "user", "content": "hi"}, {"role": "assistant",
    ...     "content": [{"type": "thinking"}, {"type": "text"}]}], 1, 1)
    ('messages', 0, 0)
    """
    for k in range(i, -1, -1):
        message = messages[k]
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            if k < i and message.get("role") in MARKABLE_ROLES and content.strip():
                return ("messages", k, 0)
            continue
        blocks = content if isinstance(content, list) else []
        for b in range((j if k == i else len(blocks)) - 1, -1, -1):
            if _markable(message, blocks[b]):
                return ("messages", k, b)
    return None


def clear_point(messages: Sequence[Any], edit: ClearToolUses) -> Position | None:
    """The last markable block before the first block the next clear would change, or
    ``None`` when no kept tool use (with a result) could be cleared next.

    >>> use = {"type": "tool_use", "id": "t1", "name": "read", "input": {}}
    >>> history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use]},
    ...     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}]
    >>> clear_point(history, ClearToolUses(keep=1))
    ('messages', 1, 0)
    """
    uses = _uses(messages)
    kept = uses[max(0, len(uses) - edit.keep) :] if edit.keep else []
    for i, j, use in kept:
        if use.get("name") in edit.exclude_tools:
            continue
        if clears_input(edit, use.get("name")):
            return markable_before(messages, i, j)
        result = _result_of(messages, use.get("id"), i)
        return markable_before(messages, *result) if result is not None else None
    return None


def clear_points(
    messages: Sequence[Any], edit: ClearToolUses, previous_end: int | None, over_trigger: bool
) -> ClearPoints:
    """This request's clear point, then the previous call's (``previous_end``: the index of
    that request's newest message) when it differs; ``over_trigger``: the request is estimated
    to pass the trigger, so a moved boundary leaves the previous newest message stale."""
    now = clear_point(messages, edit)
    before = clear_point(messages[: previous_end + 1], edit) if previous_end is not None else None
    points = tuple(dict.fromkeys(p for p in (now, before) if p is not None))
    return ClearPoints(points, previous_stale=over_trigger and before != now)
