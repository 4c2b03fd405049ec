"""Server compaction (provider rules 23-25): the request, the stored block, its render.

Pure functions. A compaction request is a request already sent, unchanged but for what rule
23 refuses (removed) and the ``compaction`` field and beta (added), so the replies after it keep
their thinking (rule 25 b, c). The block is stored byte-exact as its own assistant message
(``metadata.kind == COMPACTION_KIND``) with the newest sequence it covers and the binding chain
at the end of the request it summarized; rendered FIRST, it restores that chain, so a kept
reply's stamp (sealed against the summarized range) verifies after the swap, and thinking made
after the block is sealed against the block's chain (rule 25: the checked prefix starts there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_manager._model._content import UnknownBlock
from context_manager._model._messages import MessageMeta, StoredMessage
from context_manager._model._results import Source

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


def compaction_meta(covers_upto: int, chain: bytes, usage: Any, held: int = 0) -> MessageMeta:
    """The stored block's metadata: what it covers, the chain it continues, its cost (the
    provider's ``usage``, its ``iterations`` included) and how many messages the compaction
    request held."""
    return MessageMeta(
        kind=COMPACTION_KIND,
        extra={"covers_upto": covers_upto, "chain": chain.hex(), "usage": usage, "held": held},
    )


def render_compaction(state: RenderState, ctx: RenderContext, message: StoredMessage) -> None:
    """Render the stored block first, as its own assistant message, and continue the chain
    from the end of the request it summarized (nothing before it is checked, rule 25)."""
    blocks = [dict(b.raw) for b in message.content if isinstance(b, UnknownBlock)]
    push_message(state, ctx, "assistant", blocks, Source(message.id, {0: 0}))
    state.last_sequence = max(state.last_sequence, message.sequence)
    chain = message.metadata.extra.get("chain")
    if isinstance(chain, str):
        state.chain = bytes.fromhex(chain)
    state.last_kept = None
    state.betas.add(COMPACTION_BETA)
