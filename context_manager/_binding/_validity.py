"""Whether a stamped thinking block may be sent, by the documented rules; pure functions.

A block is sent only when (provider rules 1, 4, 8, 9) its prefix (``system`` and bound
``tools``) and its seal (the non-thinking content before it) match, and it is in order: no
thinking block has been kept before it in this request, or the nearest kept one is the block it
recorded as its predecessor. So leaving out the OLDEST blocks never costs a later one. The model
check stands apart (provider rule 8): a block valid but for it is still sent (``unread``: the
provider drops it without an error, and it stays in the request, so the blocks made meanwhile
stay in order and a switch back to a model that reads it reads them all), and it is reported
as lost for this request. A model that does not run the prefix check (provider rule 10) is
judged by the model check alone (``judge_unchecked``): nothing before a block can stop it.
The judges take parsed stamps (``_model._stamps.Stamp``, ``LegacyStamp``), never stored JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from context_manager._model._head import HEAD_COMPONENTS
from context_manager._model._readability import Readability
from context_manager._model._stamps import AnyStamp, LegacyStamp, Stamp

Verdict = Literal["keep", "unread", "head", "prefix", "gap", "unstamped"]
"""``unread``: valid, but the requested model cannot read it (sent; lost for this request);
``head``: a bound head component differs (or the model cannot read it and it fails as well);
``prefix``: the content before it changed; ``gap``: out of order; ``unstamped``: no readable
stamp."""

PREFIX_COMPONENTS = ("system", "tools", "settings")
"""Head components that can belong to a block's prefix (``settings`` only when bound)."""


@attrs.frozen
class Judgement:
    """A verdict and, for ``head``, the differing components (system, tools, model, settings)."""

    verdict: Verdict
    changed: tuple[str, ...] = ()


KEEP = Judgement("keep")


def in_order(last_kept: str | None, predecessor: str | None) -> bool:
    """The order rule (provider rule 4) on signature digests.

    >>> in_order(None, "a"), in_order("a", "a"), in_order("b", "a"), in_order("b", None)
    (True, True, False, False)
    """
    return last_kept is None or last_kept == predecessor


def head_changes(
    stamped: Mapping[str, str],
    digests: Mapping[str, str],
    bound: tuple[str, ...],
    *,
    readable: bool,
) -> tuple[str, ...]:
    """What of the head stops a block, or ``()`` when nothing does.

    A block is stopped when a bound prefix component (``system``, ``tools``, ``settings`` when
    bound) differs or the requested model cannot read it; it then reports every differing
    component, in the order system, tools, model, settings (``model`` always when unreadable).
    """
    differing = [name for name in HEAD_COMPONENTS if stamped.get(name) != digests.get(name)]
    stopped = not readable or any(name in bound for name in differing if name in PREFIX_COMPONENTS)
    if not stopped:
        return ()
    if not readable and "model" not in differing:
        differing.append("model")
    return tuple(name for name in HEAD_COMPONENTS if name in differing)


def producer_readable(stamp: AnyStamp, reader: str, reader_digest: str, reads: Readability) -> bool:
    """The model check: a stamp naming its model asks ``reads``; an older stamp (model digest
    only) is readable only by the same model."""
    if stamp.model is not None:
        return reads(reader, stamp.model)
    return stamp.head.get("model") == reader_digest


def judge_legacy(
    stamp: LegacyStamp,
    index: int,
    legacy_seal: str,
    *,
    reader: str,
    digests: Mapping[str, str],
    bound: tuple[str, ...],
    reads: Readability,
) -> Judgement:
    """Judge thinking block ``index`` of a reply with a version-1 stamp.

    A version-1 seal binds every block sent before the block, earlier thinking included
    (``legacy_seal``: that seal over what is rendered before it now). When it matches, the
    non-thinking content before the block is as it was (provider rules 1, 5) and so is the
    thinking block nearest before it (the order rule, provider rule 4): the block is valid. When
    it does not (oldest thinking shed, say) validity cannot be read from the stamp and the block
    is left out (the conservative reading). The model check reads the model digest only: the
    same model.
    """
    readable = producer_readable(stamp, reader, digests.get("model", ""), reads)
    changed = head_changes(stamp.head, digests, bound, readable=readable)
    if changed:
        return Judgement("head", changed)
    if stamp.seals.get(index) != legacy_seal:
        return Judgement("prefix")
    return KEEP


def judge(
    stamp: Stamp | None,
    index: int,
    seal_now: str,
    *,
    reader: str,
    digests: Mapping[str, str],
    bound: tuple[str, ...],
    reads: Readability,
    last_kept: str | None,
) -> Judgement:
    """Judge thinking block ``index`` of a reply stamped ``stamp``.

    Args:
        stamp: the reply's stamp (version 2), or ``None``.
        index: the block's index in the stored reply.
        seal_now: ``seal(chain, block)`` over what is rendered before it, thinking left out.
        reader: the requested model; ``digests``: the current head's component digests.
        bound: the head components blocks are bound to (``ThinkingBinding.bound_components``).
        reads: the model check ``(reader, producer) -> bool``.
        last_kept: the signature digest of the nearest thinking block kept before it, if any.
    """
    if stamp is None:
        return Judgement("unstamped")
    head, blocks = stamp.head, stamp.blocks
    # the head and the model check come first: they hold for every block of the reply, so
    # they are the cause even where the block's own seal can no longer be found
    readable = producer_readable(stamp, reader, digests.get("model", ""), reads)
    changed = head_changes(head, digests, bound, readable=readable)
    if changed and (readable or head_changes(head, digests, bound, readable=True)):
        return Judgement("head", changed)
    entry = blocks.get(index)
    if entry is None or entry.seal != seal_now:
        # an edit that removed an earlier thinking block of the reply shifts the indexes; the
        # seal binds the block itself, so the block is found by its seal
        entry = next((b for b in blocks.values() if b.seal == seal_now), entry)
    failed: Verdict | None = None
    if entry is None:
        failed = "unstamped"
    elif entry.seal != seal_now:
        failed = "prefix"
    elif not in_order(last_kept, entry.pred):
        failed = "gap"
    if changed:  # only the model check stops it
        return Judgement("head" if failed else "unread", changed)
    return KEEP if failed is None else Judgement(failed)


def judge_unchecked(
    stamp: AnyStamp | None,
    own_now: str,
    *,
    reader: str,
    digests: Mapping[str, str],
    reads: Readability,
    original: bool = False,
) -> Judgement | None:
    """Judge a block for a model that does not run the prefix check (provider rule 10): its
    prefix, its order and the head are not compared; the block itself must be as it was made
    (an edited block is refused by every model, provider rule 12) and the model check decides
    (provider rule 8).

    ``stamp``: the reply's stamp, or ``None`` (``unstamped``: the producer is unknown).
    ``own_now``: ``own_digest`` of the block as rendered. ``original``: the stored reply is
    known never to have been edited, so its blocks are as they were made even when the stamp
    predates per-block digests (a version-1 stamp, or a version-2 one written before them).
    Returns ``None`` when the stamp has no per-block digests and the reply may have been
    edited: the caller then judges it as on a model that checks (the conservative reading).

    >>> from context_manager._model._stamps import BlockStamp
    >>> same = lambda reader, producer: reader == producer
    >>> def made_by(model, own=True):
    ...     return Stamp(model, {}, {0: BlockStamp("s", None, "d" if own else None)}, own)
    >>> judge_unchecked(made_by("a"), "d", reader="a", digests={}, reads=same)
    Judgement(verdict='keep', changed=())
    >>> judge_unchecked(made_by("b"), "d", reader="a", digests={}, reads=same)
    Judgement(verdict='unread', changed=('model',))
    >>> judge_unchecked(made_by("a"), "e", reader="a", digests={}, reads=same)
    Judgement(verdict='prefix', changed=())
    >>> judge_unchecked(made_by("b"), "e", reader="a", digests={}, reads=same)
    Judgement(verdict='head', changed=('model',))
    >>> judge_unchecked(made_by("a", own=False), "d", reader="a", digests={}, reads=same) is None
    True
    >>> judge_unchecked(made_by("a", False), "d", reader="a", digests={}, reads=same, original=True)
    Judgement(verdict='keep', changed=())
    """
    if stamp is None:
        return Judgement("unstamped")
    owns = isinstance(stamp, Stamp) and stamp.owns
    if not owns and not original:
        return None
    readable = producer_readable(stamp, reader, digests.get("model", ""), reads)
    if owns and not made_as(stamp, own_now):
        # the block itself changed: never sent; the model check comes first, as in ``judge``,
        # so it is the cause where it fails too
        return Judgement("prefix") if readable else Judgement("head", ("model",))
    return KEEP if readable else Judgement("unread", ("model",))


def made_as(stamp: AnyStamp, own_now: str) -> bool:
    """Whether a block whose own digest is ``own_now`` is one of ``stamp``'s blocks as made
    (``False`` for a stamp with no per-block digests)."""
    return isinstance(stamp, Stamp) and any(b.own == own_now for b in stamp.blocks.values())
