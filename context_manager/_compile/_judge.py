"""Judging one thinking block while rendering: sent, left out (and why), or hidden.

Pure: a function of the render context (releases, stamps, the head's digests, the model
check), the block and the chain rendered before it. The rules are ``_binding._validity``'s;
this module picks which applies (a release, a model without the prefix check, a version-1
stamp, a current stamp) and maps a system or tools difference while changes are appended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from context_manager._binding._chain import block_bytes, own_digest, seal_bytes
from context_manager._binding._validity import (
    head_changes,
    judge,
    judge_legacy,
    judge_unchecked,
    producer_readable,
)
from context_manager._model._content import Block, signature_of
from context_manager._model._messages import StoredMessage
from context_manager._model._stamps import AnyStamp, LegacyStamp, Stamp
from context_manager._store._protocol import Release

from ._render import RenderContext, StripReason

Verdict = tuple[StripReason | Literal["keep", "unread", "hidden"], tuple[str, ...]]
"""What is done with a block, and the head components that changed (for a ``head`` cause)."""


def judge_thinking(
    ctx: RenderContext,
    message: StoredMessage,
    index: int,
    block: Block,
    wire: Mapping[str, Any],
    chain: bytes,
    last_kept: str | None,
    canonical: bytes | None = None,
    legacy_chain: bytes | None = None,
) -> Verdict:
    """Whether a thinking block is sent, and if not why (``_binding._validity.judge``).

    ``"unread"``: sent, but the requested model cannot read it (reported as a ``head`` loss).
    ``"hidden"``: left out and never reported (released earlier and already reported, or never
    sendable because unsigned). ``canonical``: ``block_bytes(wire)`` when already at hand.
    """
    release = ctx.releases.get(message.id)
    found = ctx.stamps.get(message.id)
    stamp = found if isinstance(found, Stamp) else None
    if release is not None and index >= release.from_block:
        return _released(ctx, release, index, stamp)
    if not signature_of(block):
        return "hidden", ()
    if not ctx.binds:
        return "keep", ()
    if canonical is None:
        canonical = block_bytes(wire)
    old = found if isinstance(found, LegacyStamp) else None
    return _stamped(ctx, message, index, stamp or old, canonical, chain, last_kept, legacy_chain)


def _released(ctx: RenderContext, release: Release, index: int, stamp: Stamp | None) -> Verdict:
    """A released block: hidden once reported; a released block whose head also changed
    reports the head (the strip's cause is read at its first block, and a head change must
    not pass as a message change, SPEC 7)."""
    if release.reported_at(index):
        return "hidden", ()
    if not ctx.binds:
        return "released", ()
    if stamp is None:
        return "released", ()
    readable = producer_readable(stamp, ctx.model, ctx.digests["model"], ctx.reads)
    if not ctx.checks_prefix:
        if not readable:
            return "head", ("model",)
    else:
        changed = head_changes(stamp.head, ctx.digests, ctx.bound, readable=readable)
        if changed:
            verdict, changed = appended_cause(ctx, "head", changed, stamp)
            if verdict == "head":
                return "head", changed
    return "released", ()


def _stamped(
    ctx: RenderContext,
    message: StoredMessage,
    index: int,
    found: AnyStamp | None,
    canonical: bytes,
    chain: bytes,
    last_kept: str | None,
    legacy_chain: bytes | None,
) -> Verdict:
    """A signed block under binding: judged by its stamp (current or version 1)."""
    if not ctx.checks_prefix and found is not None:
        unchecked = judge_unchecked(
            found,
            own_digest(canonical),
            reader=ctx.model,
            digests=ctx.digests,
            reads=ctx.reads,
            original=message.sequence < ctx.unedited_below,
        )
        if unchecked is not None:
            return unchecked.verdict, unchecked.changed
    if isinstance(found, LegacyStamp):
        if legacy_chain is None:
            return appended_cause(ctx, "unstamped", (), None)
        legacy = judge_legacy(
            found,
            index,
            seal_bytes(legacy_chain, canonical),
            reader=ctx.model,
            digests=ctx.digests,
            bound=ctx.bound,
            reads=ctx.reads,
        )
        return appended_cause(ctx, legacy.verdict, legacy.changed, found)
    seal_now = seal_bytes(chain, canonical)
    judgement = judge(
        found,
        index,
        seal_now,
        reader=ctx.model,
        digests=ctx.digests,
        bound=ctx.bound,
        reads=ctx.reads,
        last_kept=last_kept,
    )
    # only a head verdict asks whether the prefix is intact (``appended_cause``): a kept block,
    # the common case, is not looked up again
    intact = judgement.verdict == "head" and found is not None and _sealed(found, index, seal_now)
    return appended_cause(ctx, judgement.verdict, judgement.changed, found, intact=intact)


def _sealed(stamp: Stamp, index: int, seal_now: str) -> bool:
    """Whether a block's seal still matches what is rendered before it (found by its seal, as
    ``judge`` finds it): nothing in the messages before it changed."""
    entry = stamp.blocks.get(index)
    if entry is not None and entry.seal == seal_now:
        return True
    return any(b.seal == seal_now for b in stamp.blocks.values())


def appended_cause(
    ctx: RenderContext,
    verdict: StripReason | Literal["keep", "unread"],
    changed: tuple[str, ...],
    stamp: AnyStamp | None,
    *,
    intact: bool = False,
) -> tuple[StripReason | Literal["keep", "unread"], tuple[str, ...]]:
    """While changes are appended (SPEC 7b) a system or tools difference is no head cause: the
    request's head is the anchored one, so a block bound to an earlier anchor lost its prefix
    to the re-render that re-anchored (a fold, a window jump), a message change. Only the model
    check failing (for ``stamp``'s producer), bound settings, a head this compile rewrites, or
    a block whose own seal still matches (``intact``: nothing before it changed, so the head it
    was made under is all that stops it, as after a compile on a model without system messages
    re-anchored the head) keep the cause ``head``."""
    if not ctx.appends or ctx.head_changed or verdict != "head" or intact:
        return verdict, changed
    kept = tuple(c for c in changed if c not in ("system", "tools"))
    unreadable = stamp is not None and not producer_readable(
        stamp, ctx.model, ctx.digests.get("model", ""), ctx.reads
    )
    if not unreadable and not any(c != "model" and c in ctx.bound for c in kept):
        return "prefix", ()
    return "head", kept
