"""Server compaction (provider rules 23-25): the request, the stored block, its render.

Pure functions. A compaction request is a request already sent, unchanged but for what rule
23 refuses (removed) and the ``compaction`` field and beta (added), so the replies after it keep
their thinking (rule 25 b, c). The block is stored byte-exact as its own assistant message
(``metadata.kind == COMPACTION_KIND``) with the newest sequence it covers and the binding chain
at the end of the request it summarized; rendered FIRST, it restores that chain, so a kept
reply's stamp (sealed against the summarized range) verifies after the swap, and thinking made
after the block is sealed against the block's chain (rule 25: the checked prefix starts there).
A block made on a model without preserved thinking (one that does not run the prefix check,
``preserving: false``) restores no chain: the render continues from one derived from the
block alone, so no thinking produced before it verifies after it (rule 25 a) while thinking
made after it is bound to it as usual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from context_manager._model._content import UnknownBlock
from context_manager._model._messages import MessageMeta, StoredMessage
from context_manager._model._results import Source

from ._append import Sent
from ._render import RenderContext, RenderState, push_message

COMPACTION_KIND = "compaction"
"""``metadata.kind`` of a stored compaction block."""

COMPACTION_BETA = "compact-2026-09-04"

REFUSED_FIELDS = ("context_management", "stop_sequences")
"""Top-level fields a compaction request cannot carry (rule 23)."""


def compaction_request(request: Mapping[str, Any], instructions: str | None) -> dict[str, Any]:
    """``request`` (a request already sent) as a compaction request (rule 23)."""
    body = {k: v for k, v in request.items() if k not in REFUSED_FIELDS}
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
        del body["tool_choice"]
    config = body.get("output_config")
    if isinstance(config, Mapping):
        config = {k: v for k, v in config.items() if k != "format"}
        budget = config.get("task_budget")
        if isinstance(budget, Mapping):
            config["task_budget"] = {k: v for k, v in budget.items() if k != "remaining"}
        body["output_config"] = config
    compaction: dict[str, Any] = {"type": "summarize"}
    if instructions is not None:
        compaction["instructions"] = instructions
    body["compaction"] = compaction
    betas = [str(b) for b in body.get("betas", ())]
    if COMPACTION_BETA not in betas:
        betas.append(COMPACTION_BETA)
    body["betas"] = betas
    return body


def compaction_meta(
    covers_upto: int,
    chain: bytes,
    usage: Any,
    held: int = 0,
    *,
    preserving: bool = True,
    request: Mapping[str, Any] | None = None,
) -> MessageMeta:
    """The stored block's metadata: what it covers, the chain it continues, its cost (the
    provider's ``usage``, its ``iterations`` included), how many messages the compaction
    request held, whether its model preserves the kept turns' thinking (rule 25 a) and what
    is on offer after it (``sent_after``, from the compaction ``request``)."""
    extra: dict[str, Any] = {
        "covers_upto": covers_upto,
        "chain": chain.hex(),
        "usage": usage,
        "held": held,
        "preserving": preserving,
    }
    if request is not None:
        extra["sent"] = sent_after(request).to_json()
    return MessageMeta(kind=COMPACTION_KIND, extra=extra)


def sent_after(request: Mapping[str, Any]) -> Sent:
    """What is sent after a block made from ``request``: its ``system`` and ``tools``, each
    non-deferred tool on offer and none of the deferred ones. The changes appended inside the
    summarized range stop applying (rule 26), but ``tools`` stays as the compaction request
    had it, deferred definitions included (rule 25 c; a deferred tool once added is part of
    the kept thinking's prefix, rule 3), so a change still wanted is appended again."""
    head = {"system": unmarked(request.get("system")), "tools": unmarked(request.get("tools"))}
    return Sent.of_head({k: v for k, v in head.items() if v is not None})


def block_deferred(head: Mapping[str, Any], state: RenderState, read: Any) -> dict[str, Any]:
    """``head`` (``{"system", "tools"}``, a new anchor) with the deferred definitions of the
    compaction block ``state`` opens with added, each whose name ``head`` does not declare.

    A deferred tool a ``tool_addition`` once referenced is part of the prefix of the thinking
    made after it (rule 3), and the provider's binding carries that addition through the block
    (rule 25 c): every request under the block must keep its definition in ``tools``, or the
    kept turns' thinking and the thinking made since fail. The block's tools on offer are kept
    too, as deferred definitions: one may have been added by a change the block summarized, and
    a later change then adds it back by reference, not as a new deferred tool (which would bind
    every block since the compaction). ``read(message_id)`` reads the
    stored block. ``head`` unchanged when the render opens with no block."""
    first = state.messages[0].get("content") if state.messages else None
    if not (isinstance(first, list) and first and first[0].get("type") == COMPACTION_KIND):
        return dict(head)
    sources = state.provenance[0].sources
    stored = read(sources[0].message_id).metadata.extra.get("sent") if sources else None
    if not isinstance(stored, Mapping):
        return dict(head)
    sent = Sent.from_json(stored)
    offered = [{**sent.known[name], "defer_loading": True} for name in sent.active]
    tools = list(head.get("tools") or ())
    names = {t.get("name") for t in tools}
    kept = [dict(t) for t in (*sent.deferred, *offered) if t.get("name") not in names]
    return {**head, "tools": tools + kept} if kept else dict(head)


def unmarked(value: Any) -> Any:
    """``value`` without ``cache_control`` markers (placed by the caching stage, and not
    compared by the prefix check, rule 2)."""
    if isinstance(value, Mapping):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list | tuple):
        return [unmarked(v) for v in value]
    return value


_BROKEN_TAG = b"context-manager compaction without preserved thinking"


def block_chain(message: StoredMessage) -> bytes | None:
    """The chain a render continues from after the stored block ``message``: the one at the
    end of the request it summarized, or, when its model did not preserve thinking, one of
    the block alone (nothing sealed before it matches it), or ``None`` (no chain recorded)."""
    chain = message.metadata.extra.get("chain")
    if not isinstance(chain, str):
        return None
    if message.metadata.extra.get("preserving", True) is not False:
        return bytes.fromhex(chain)
    signature = "".join(
        str(b.raw.get("signature", "")) for b in message.content if isinstance(b, UnknownBlock)
    )
    return hashlib.sha256(_BROKEN_TAG + signature.encode()).digest()


def render_compaction(state: RenderState, ctx: RenderContext, message: StoredMessage) -> None:
    """Render the stored block first, as its own assistant message, and continue the chain
    from the end of the request it summarized (nothing before it is checked, rule 25)."""
    blocks = [dict(b.raw) for b in message.content if isinstance(b, UnknownBlock)]
    push_message(state, ctx, "assistant", blocks, Source(message.id, {0: 0}))
    state.last_sequence = max(state.last_sequence, message.sequence)
    chain = block_chain(message)
    if chain is not None:
        state.chain = chain
    sent = message.metadata.extra.get("sent")
    if isinstance(sent, Mapping) and ctx.appends and message.sequence > ctx.anchor_sequence:
        state.last_change = dict(sent)  # a head anchored since the block already says it
    covers = message.metadata.extra.get("covers_upto")
    state.kept_from = covers + 1 if isinstance(covers, int) else message.sequence
    state.last_kept = None
    state.betas.add(COMPACTION_BETA)
