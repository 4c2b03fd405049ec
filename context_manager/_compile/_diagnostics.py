"""Cache diagnostics (``Caching(diagnostics=True)``): the stage that asks, the check that judges.

The stage (``diagnose``, after the report): every request carries ``diagnostics``; it names the
provider response id of the branch's previous reply (the newest rendered, as recorded), or
``null`` when there is none (the documented opt-in), and the compile records what it knows
changed since that reply's request (``CacheCheck``): the model, ``system`` or ``tools`` sent
(a head change, a re-anchor), prompt settings, the window's start (a jump, a fold, a compaction),
and this compile's own shedding, strip and restored thinking. The check (``reply_extra``, at
``record_reply``): the response's verdict against that expectation, kept on the reply; a
divergence it did not expect is a ``cache_prefix_unexpected`` warning naming the reason.
Pure apart from the one store read of the previous reply and the log events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from context_manager._model._canonical import digest
from context_manager._model._diagnostics import (
    BASIS_KEY,
    DIAGNOSTICS_KEY,
    RESPONSE_ID_KEY,
    CacheCheck,
    CacheVerdict,
    judge,
    response_id,
)
from context_manager._model._errors import ContextManagerError
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import CompileResult

from ._host import CompileHost

log = library_logger("context_manager.caching")

UNEXPECTED_EVENT = "cache_prefix_unexpected"
"""The warning for a divergence the compiler did not expect (with its reason and why not)."""

DIAGNOSED_EVENT = "cache_diagnosed"
"""The info event for every other verdict (expected, none, pending, not found)."""


def request_basis(request: Mapping[str, Any], start: int) -> dict[str, Any]:
    """The shape of ``request`` the provider's comparison reads, as digests: the model, the
    ``system`` and ``tools`` sent, the prompt settings (``thinking`` mode and budget,
    ``tool_choice``) and where the window starts (``start``, a stored sequence)."""
    thinking = request.get("thinking")
    mode = (
        {k: thinking[k] for k in ("type", "budget_tokens") if k in thinking}
        if isinstance(thinking, Mapping)
        else None
    )
    return {
        "model": str(request.get("model", "")),
        "system": digest(request.get("system") or ""),
        "tools": digest(list(request.get("tools") or ())),
        "settings": digest({"thinking": mode, "tool_choice": request.get("tool_choice")}),
        "start": start,
    }


HEAD_WHY = {"model": "model switch", "system": "head change", "tools": "head change"}


def known_changes(
    previous: Mapping[str, Any],
    basis: Mapping[str, Any],
    result: CompileResult,
    reply: MessageId | None = None,
) -> tuple[tuple[str, str], ...]:
    """``(kind, why)`` of what changed since the request ``previous`` describes, the one that
    produced ``reply``: thinking shed, stripped or restored counts only on replies that request
    held (``reply`` itself was not in it: leaving its thinking out only appends less)."""
    changes = [(kind, why) for kind, why in HEAD_WHY.items() if previous.get(kind) != basis[kind]]
    if previous.get("settings") != basis["settings"]:
        changes.append(("settings", "settings change"))
    if result.compacted:
        changes.append(("messages", "compaction"))
    elif result.folded:
        changes.append(("messages", "fold"))
    elif previous.get("start") != basis["start"]:
        changes.append(("messages", "window jump"))
    strip = result.thinking_strip
    for why, replies in (
        ("shed thinking", result.shed),
        ("thinking left out", strip.replies if strip is not None else ()),
        ("thinking restored", result.restored),
    ):
        if any(r != reply for r in replies):
            changes.append(("messages", why))
    return tuple(changes)


def previous_reply(result: CompileResult) -> MessageId | None:
    """The newest stored reply the request renders (the branch's previous reply)."""
    messages = result.request.get("messages", [])
    for i in range(min(len(messages), len(result.provenance)) - 1, -1, -1):
        entry = result.provenance[i]
        if messages[i].get("role") == "assistant" and entry.sources:
            return entry.sources[-1].message_id
    return None


def _recorded(m: CompileHost, reply: MessageId) -> Mapping[str, Any]:
    """The previous reply's ``metadata.extra``; empty when it cannot be read (the request then
    opts in afresh: diagnostics never fail a compile)."""
    try:
        return m.store.get(m.namespace, reply).metadata.extra
    except ContextManagerError as err:
        log.info("cache_diagnostics_unread", namespace=m.namespace, reply=reply, error=repr(err))
        return {}


def diagnose(m: CompileHost, result: CompileResult) -> CompileResult:
    """The stage: ``result`` with ``diagnostics`` in its request and its ``cache_check``
    (unchanged when ``Caching(diagnostics=False)``)."""
    if not m.caching.diagnostics:
        return result
    basis = request_basis(result.request, result.start_sequence)
    reply = previous_reply(result)
    extra = _recorded(m, reply) if reply is not None else {}
    sent = extra.get(RESPONSE_ID_KEY)
    earlier = extra.get(BASIS_KEY)
    if not isinstance(sent, str) or not isinstance(earlier, Mapping):
        check = CacheCheck(None, None, basis)
    else:
        check = CacheCheck(reply, sent, basis, known_changes(earlier, basis, result, reply))
    request = {**result.request, "diagnostics": {"previous_message_id": check.previous_response}}
    return attrs.evolve(result, request=request, cache_check=check)


def reply_extra(
    result: CompileResult, message: object
) -> tuple[dict[str, Any], CacheVerdict | None]:
    """What a reply to ``result`` records (its response id, its request's shape and, when the
    request named an earlier response, the verdict), and the verdict."""
    check = result.cache_check
    found = response_id(message)
    if check is None or found is None:
        return {}, None
    extra: dict[str, Any] = {RESPONSE_ID_KEY: found, BASIS_KEY: dict(check.basis)}
    if check.previous_response is None:
        return extra, None
    verdict = judge(check, message)
    extra[DIAGNOSTICS_KEY] = verdict.to_json()
    return extra, verdict


def log_verdict(
    namespace: str, reply: MessageId, result: CompileResult, verdict: CacheVerdict
) -> None:
    """One ``cache_prefix_unexpected`` warning for an unexpected divergence, else one
    ``cache_diagnosed`` info event."""
    fields = {
        "namespace": namespace,
        "branch": result.branch,
        "compile_id": result.compile_id,
        "reply": reply,
        "previous": verdict.previous,
        "reason": verdict.reason,
        "missed_tokens": verdict.missed_tokens,
        "expected": verdict.expected,
        "why": list(verdict.why),
    }
    if verdict.unexpected:
        log.warning(UNEXPECTED_EVENT, **fields)
    else:
        log.info(DIAGNOSED_EVENT, **fields)
