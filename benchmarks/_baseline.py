"""The full-recompile baseline (the upstream approach): rebuild every request from the whole store.

Reads every stored message, re-renders and re-hashes each, then renders the window from nothing:
the compiler's request from the same start, without its per-branch cache.
"""

from __future__ import annotations

import hashlib
from typing import Any

from context_manager import ContextManager, Head, block_to_wire
from context_manager._binding._chain import CHAIN_SEED, block_bytes
from context_manager._compile._message import render_message
from context_manager._compile._render import (
    RenderContext,
    RenderState,
    Span,
    close_tool_round,
    is_clean_start,
)
from context_manager._compile._selection import jump_anchor
from context_manager._model._content import is_thinking


def full_recompile(cm: ContextManager, head: Head, *, window_tokens: int) -> list[dict[str, Any]]:
    """Build ``head``'s request for ``cm``'s current branch from the whole stored history.

    Cost: O(history) reads, decodes and hashes on every call, whatever changed.

    Args:
        cm: the agent (its store, namespace, binding and estimator are used; its cache is not).
        head: the head to compile under.
        window_tokens: the ``Window``'s ``max_tokens``; the render starts at the branch's stored
            window anchor when it has one (as the compiler does), else at the earliest clean
            start whose tail fits.

    Returns:
        The request's ``messages``: what the compiler sends from the same start.
    """
    store, namespace = cm.store, cm.namespace
    history = store.read(namespace, cm.lineage())
    found = store.stamps(
        namespace,
        [m.id for m in history if m.role == "assistant" and any(map(is_thinking, m.content))],
    )
    stamps = {k: s for k, s in found.items() if s is not None}
    spans: list[Span] = []
    digests: list[bytes] = []
    for message in history:
        wire = [block_to_wire(block) for block in message.content]
        digests.append(hashlib.sha256(b"".join(block_bytes(b) for b in wire)).digest())
        tokens = cm.estimator({"role": message.role, "content": wire})
        spans.append(Span(message.sequence, tokens, is_clean_start(message)))
    record = store.binding_record(namespace, cm.current_branch_key())
    start = record.anchor
    if start is None:
        start = jump_anchor(spans, window_tokens) or 0
    ctx = RenderContext(
        binds=cm.binding.binds,
        system_notices=cm.binding.system_role(head.model),
        digests=head.digests,
        bound=cm.binding.bound_components(),
        releases=record.releases,
        stamps=stamps,
        estimator=cm.estimator,
        resolve=cm.resolve_reasoning,
        model=head.model,
        reads=cm.binding.reads,
    )
    state = RenderState(chain=CHAIN_SEED, start=start)
    for message in history:
        if message.sequence >= start:
            render_message(state, ctx, message)
    return [*state.messages, *close_tool_round(state)]
