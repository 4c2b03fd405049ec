"""Stages 7 and 8, the in-flight round and the request: the open round's reply as recorded
(provider rule 6), then the request body (head, settings, betas, the round closed, cache
breakpoints, server-side context editing: ``_editing``). Pure apart from the in-flight read;
raises before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from context_manager._binding._chain import feed_block, is_wire_thinking, last_signature
from context_manager._model._editing import EDITING_KEY, ContextEditing
from context_manager._model._head import Head, ThinkingBinding

from ._caching import place_breakpoints, previous_request_end
from ._clear_cache import ClearPoints, clear_points
from ._editing import carries_compaction, finish_editing
from ._render import RenderState, close_tool_round, system_betas
from ._run import Draft, Run

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` when the head's settings give none (the API requires the field)."""

BINDING_BETA = "thinking-binding-controls-2026-08-01"
"""Needed for ``thinking.block_binding`` and for ``input_transformations`` in responses."""


def inflight_round(run: Run, draft: Draft) -> Draft:
    """The in-flight reply as recorded, when the rules would alter it.

    Raises:
        InFlightThinkingInvalid: it carries failing thinking and ``drop_block`` is off.
    """
    return attrs.evolve(draft, inflight=run.engine.inflight(run, draft.state))


def finish_request(run: Run, draft: Draft) -> Draft:
    """The request body and the chain at its end."""
    m = run.engine.manager
    body, end_chain = request_body(m.binding, draft.head, draft.state)
    if draft.inflight is not None:
        body["messages"][draft.inflight.index] = draft.inflight.message
    body = finish_editing(body, m.editing)
    clear = editing_breakpoints(body, m.editing, draft.state.total_tokens)
    return attrs.evolve(
        draft, body=place_breakpoints(body, m.caching, clear=clear), end_chain=end_chain
    )


def editing_breakpoints(
    body: Mapping[str, Any], editing: ContextEditing | None, tokens: int
) -> ClearPoints | None:
    """Where the server will clear tool uses in ``body`` (``_clear_cache``), when it carries
    the context's edits; ``tokens``, the window's estimate, says whether the trigger is met."""
    edit = editing.clear_tool_uses if editing is not None else None
    if edit is None or EDITING_KEY not in body or carries_compaction(body):
        return None
    previous = previous_request_end(body["messages"])
    return clear_points(body["messages"], edit, previous, tokens >= edit.trigger_tokens)


def end_predecessor(draft: Draft) -> str | None:
    """The signature digest of the request's last thinking block (what a reply follows)."""
    if draft.inflight is not None:
        return last_signature(draft.body["messages"])
    return draft.state.last_kept


def binding_controls(binding: ThinkingBinding, head: Head) -> dict[str, Any]:
    """The ``thinking`` setting with ``block_binding`` when the request asks the provider to
    drop failing blocks, else nothing. Observe mode sends none: an unenforced account then lets
    failing blocks through and reports them (provider rules 10, 14); setting it would opt in."""
    if not binding.drop_block or binding.enforcement != "enforce":
        return {}
    thinking = dict(head.settings["thinking"])
    thinking["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    return {"thinking": thinking}


def request_body(
    binding: ThinkingBinding, head: Head, state: RenderState
) -> tuple[dict[str, Any], bytes]:
    """``head`` and ``state`` as a request, with every beta it needs, and the chain at its end."""
    request: dict[str, Any] = {k: v for k, v in head.settings.items() if k != "betas"}
    request["model"] = head.model
    if head.system:
        request["system"] = (
            head.system if isinstance(head.system, str) else [dict(b) for b in head.system]
        )
    if head.tools:
        request["tools"] = [dict(t) for t in head.tools]
    request.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
    betas = [str(b) for b in head.settings.get("betas", ())]
    if binding.binds and head.thinking_enabled:
        if BINDING_BETA not in betas:
            betas.append(BINDING_BETA)
        request.update(binding_controls(binding, head))
    tail = close_tool_round(state)
    for beta in sorted(state.betas.union(*(system_betas(t) for t in tail))):
        if beta not in betas:
            betas.append(beta)
    if betas:
        request["betas"] = betas
    chain = state.chain
    for message in tail:
        for block in message["content"]:
            if not is_wire_thinking(block):
                chain = feed_block(chain, message["role"], block)
    request["messages"] = [*state.messages, *tail]
    return request, chain
