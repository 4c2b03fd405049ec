"""One on-demand compaction, foreground (provider rules 23-25): ask, then store or skip.

``compaction_plan`` says whether a compaction can be asked now and builds its request: the
branch is at a boundary (a reply to ``sent``, the last committing compile, is stored after its
messages and no tool round is open), so the request is exactly ``sent.request`` with rule 23's
refusals removed. ``store_compaction`` stores the returned block byte-exact (``stop_reason ==
"compaction"``) or stores nothing (any other stop reason: the history stays as it was, log event
``compaction_skipped``; compact again after the next turn). Nothing here calls the network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from context_manager._model._content import ToolUseBlock, UnknownBlock
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import CompileResult

from ._compaction import compaction_meta, compaction_request
from ._host import CompileHost
from ._strategies import Compact

log = library_logger("context_manager.compile")


@attrs.frozen
class CompactionPlan:
    """A compaction to ask for: the request, and the newest stored sequence it covers."""

    request: dict[str, Any]
    covers_upto: int
    end_chain: bytes


def compaction_plan(
    m: CompileHost, sent: CompileResult | None, strategy: Compact
) -> CompactionPlan | None:
    """The compaction of ``sent``'s messages, or ``None`` when the branch is not at a boundary
    (nothing recorded after it, a tool round open, another branch)."""
    if sent is None or sent.dry or sent.branch != m.current_branch_key():
        return None
    after = m.store.read(m.namespace, m.lineage(), after=sent.last_sequence)
    replies = [msg for msg in after if msg.role == "assistant"]
    if not replies or any(isinstance(b, ToolUseBlock) for b in replies[-1].content):
        return None
    if replies[-1] is not after[-1] and after[-1].role == "user":
        return None  # a new turn has started: its request is the one to compact, later
    request = compaction_request(sent.request, strategy.instructions)
    return CompactionPlan(request, sent.last_sequence, sent._token.end_chain)


def store_compaction(m: CompileHost, plan: CompactionPlan, response: object) -> MessageId | None:
    """Store the block ``response`` returned (byte-exact, its usage in ``extra``), or nothing
    when it is no compaction (``compaction_skipped``)."""
    body = _as_dict(response)
    stop = body.get("stop_reason")
    content = body.get("content") or []
    blocks = [b for b in content if isinstance(b, Mapping) and b.get("type") == "compaction"]
    if stop != "compaction" or len(blocks) != 1:
        log.info(
            "compaction_skipped", namespace=m.namespace, branch=m.current_branch_key(), stop=stop
        )
        return None
    stored = m.store.append(
        m.namespace,
        m.current_branch_key(),
        "assistant",
        [UnknownBlock(dict(blocks[0]))],
        compaction_meta(plan.covers_upto, plan.end_chain, body.get("usage")),
    )
    log.info(
        "compacted",
        namespace=m.namespace,
        branch=stored.branch,
        message_id=stored.id,
        covers_upto=plan.covers_upto,
    )
    return stored.id


def _as_dict(response: object) -> dict[str, Any]:
    """An SDK message or a response body as a plain dict, fields left unset dropped (the
    block goes back byte-exact: ``citations: null`` would be refused, rule 24)."""
    dump = getattr(response, "model_dump", None)
    if callable(dump):
        value = dump(exclude_none=True, mode="json")
        return dict(value) if isinstance(value, Mapping) else {}
    return dict(response) if isinstance(response, Mapping) else {}
