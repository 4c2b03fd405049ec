"""Pressure, server-side context editing (provider rule 29): the first budget step.

With ``ContextEditing.clear_tool_uses`` the API clears old tool results in its own copy of the
request, so the later passes (fold, shed, jump) act only on what the edited request still needs:
``pressure_tokens`` is the rendered window's size minus what the server will clear. The estimate
follows the documented edit on the rendered messages: once the window reaches ``trigger_tokens``,
the results (and, with ``clear_inputs``, the inputs) of every tool use but the newest ``keep`` and
those of ``exclude_tools`` are cleared, unless that clears less than ``clear_at_least``. It is a
lower bound: the trigger is compared with the messages alone (the API counts the head too), so
the library never counts on a clear the server will not make. Pure; O(rendered messages), run
only when editing is on and the window reaches the trigger. With an estimator that counts
requests (``ApiTokenCounter``) the measure is the API's own edited count instead (``count_tokens``
with ``context_management`` answers it; the thinking clear included), at no extra call when no
later pass changes the window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from context_manager._model._editing import ClearToolUses, ContextEditing

from ._clear_cache import clears_input
from ._editing import finish_editing
from ._run import Draft, Run
from ._stage_finish import request_body

CLEARED_ESTIMATE = {"type": "text", "text": "[This tool result was cleared to save context.]"}
"""What a cleared result is estimated to hold (the provider's placeholder is one short line)."""


def _uses(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        block
        for message in messages
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]


def server_cleared(
    messages: Sequence[Mapping[str, Any]],
    edit: ClearToolUses,
    estimate: Callable[[Any], int],
    total: int,
) -> int:
    """Tokens ``edit`` clears from ``messages`` whose size is ``total`` (0 below its trigger).

    >>> use = {"type": "tool_use", "id": "t1", "name": "read", "input": {}}
    >>> result = {"type": "tool_result", "tool_use_id": "t1", "content": "x" * 400}
    >>> history = [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    >>> size = lambda value: len(str(value))
    >>> server_cleared(history, ClearToolUses(trigger_tokens=10, keep=0), size, 500) > 0
    True
    """
    if total < edit.trigger_tokens:
        return 0
    uses = _uses(messages)
    older = uses[: max(0, len(uses) - edit.keep)]
    chosen = {str(u.get("id")): u for u in older if u.get("name") not in edit.exclude_tools}
    if not chosen:
        return 0
    cleared = 0
    for use in chosen.values():
        if clears_input(edit, use.get("name")):
            cleared += max(0, estimate(dict(use)) - estimate({**use, "input": {}}))
    for message in messages:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, Mapping) and block.get("tool_use_id") in chosen:
                emptied = {**block, "content": [CLEARED_ESTIMATE]}
                cleared += max(0, estimate(dict(block)) - estimate(emptied))
    return cleared if cleared >= max(edit.clear_at_least or 0, 1) else 0


def exact_cleared(run: Run, draft: Draft) -> int | None:
    """What the server's edits remove from the draft's request by the estimator's own count
    (``ApiTokenCounter.count_edited``: ``count_tokens`` with ``context_management``), or
    ``None`` when the estimator does not count requests or the endpoint failed. The body is
    the one the finish stage sends when no later pass changes the window, so the report's
    count of it is answered from the counter's cache (no second call)."""
    m = run.engine.manager
    count_edited = getattr(m.estimator, "count_edited", None)
    count_sent = getattr(m.estimator, "count_request", None)
    if not callable(count_edited) or not callable(count_sent):
        return None
    body = finish_editing(request_body(m.binding, draft.head, draft.state)[0], m.editing)
    edited, sent = count_edited(body), count_sent(body)
    if not isinstance(edited, int) or not isinstance(sent, int):
        return None
    return max(0, sent - edited)


def pressure_tokens(run: Run, draft: Draft) -> int:
    """The rendered window's size as the API will see it after its context edits: the exact
    edited count when the estimator counts requests (``exact_cleared``), else the documented
    tool-use clear applied to the character estimate (``server_cleared``)."""
    total = draft.state.total_tokens
    editing: ContextEditing | None = run.engine.manager.editing
    if editing is None or not editing.enabled:
        return total
    exact = exact_cleared(run, draft)
    if exact is not None:
        return total - min(exact, total)
    edit = editing.clear_tool_uses
    if edit is None or total < edit.trigger_tokens:
        return total
    estimate = run.engine.manager.estimator
    return total - server_cleared(draft.state.messages, edit, estimate, total)
