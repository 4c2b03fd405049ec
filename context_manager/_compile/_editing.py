"""Finishing a compiled request with server-side context editing (provider rules 29, 23).

Pure function, one concern: a context with ``ContextEditing`` gets ``context_management`` and its
beta on every request, except one that carries a compaction block or asks for a compaction (the
API refuses context editing there, rule 23). A host's own ``context_management`` is kept as given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_manager._model._editing import EDITING_BETA, EDITING_KEY, ContextEditing

COMPACTION = "compaction"


def carries_compaction(request: Mapping[str, Any]) -> bool:
    """True when ``request`` asks for a compaction or sends a compaction block first."""
    if COMPACTION in request:
        return True
    messages = request.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    content = first.get("content") if isinstance(first, Mapping) else None
    return (
        isinstance(content, list)
        and bool(content)
        and isinstance(content[0], Mapping)
        and content[0].get("type") == COMPACTION
    )


def finish_editing(request: dict[str, Any], editing: ContextEditing | None) -> dict[str, Any]:
    """``request`` with ``context_management`` and its beta added when ``editing`` is on.

    >>> finish_editing({"messages": []}, ContextEditing())["betas"]
    ['context-management-2025-06-27']
    >>> "context_management" in finish_editing({"messages": []}, None)
    False
    """
    if editing is None or not editing.enabled or carries_compaction(request):
        return request
    if EDITING_KEY in request:
        return request
    betas = [str(b) for b in request.get("betas", ())]
    if EDITING_BETA not in betas:
        betas.append(EDITING_BETA)
    return {**request, EDITING_KEY: editing.to_wire(), "betas": betas}
