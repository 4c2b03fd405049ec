"""Shedding without a re-render: the kept render with the shed replies' thinking taken out.

Shedding releases a leading run of replies' thinking (``_shed.plan_shed``). Thinking never
enters the chain, and with nothing kept before the first block still sent every later block is
judged as before (``_validity.in_order``), so a render of the window under the shed releases
differs from the render at hand only in the shed replies: their thinking from the release on is
not sent, each such block is an unreported ``released`` entry, and their messages' tokens and
spans shrink. ``patched`` builds exactly that render from the one at hand in O(window
references + shed replies), where a re-render re-judges and re-attaches every message.

Invariant: ``patched`` returns a render equal to ``full_render`` under the shed releases (the
same messages, provenance, tokens, spans, strips and chain), or ``None`` wherever that is not
certain (a shed reply whose message would change shape, a version-1 chain, a reasoning sidecar,
observe mode, previews, a release in the window not yet reported, a left-out block that the
shed could put in order): the caller then re-renders. ``tests/compile/test_shed_patch.py``
compiles the same histories both ways. Pure apart from the ``window`` reader it is given (the
caller's store read); the render at hand is never modified (a new state is returned).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from context_manager._model._content import THINKING_TYPES
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ProvenanceEntry, Source

from ._judge import judge_thinking
from ._render import (
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    _blank_wire,
    releases_reported,
    reported,
)
from ._resident import paused_collector
from ._shed import first_kept_sequence, first_signed

ENABLED = True
"""Patch the render in place of a re-render (tests turn it off to compare the two)."""


@paused_collector
def patched(
    state: RenderState,
    ctx: RenderContext,
    shed: Mapping[MessageId, int],
    window: Callable[[], Sequence[StoredMessage]],
    pending: Sequence[StoredMessage],
    *,
    sidecar: bool,
) -> RenderState | None:
    """The render of ``state``'s window under ``ctx`` (whose releases hold the shed ones),
    or ``None`` when a re-render is needed (see the module docstring). ``window``: gives the
    stored messages the render was made from, oldest first, as far as the newest shed reply
    (asked only once the patch is possible); ``sidecar``: thinking text is resolved through
    a reasoning sidecar (it may be erased since the render at hand judged it, so only a
    re-render knows)."""
    if not _patchable(state, ctx, shed, pending, sidecar):
        return None
    found = _shed_messages(state, shed)
    if found is None:
        return None
    again = state.copy()
    for i, sources in found.items():
        if not _patch_message(again, ctx, i, sources):
            return None
    entries = _entries(ctx, shed, window(), state.sequences)
    if entries is None:
        return None
    again.unreported = entries
    if again.judged is not None:  # those reported since are skipped by a re-render
        again.judged = [
            site for site in again.judged if not reported(ctx.releases, site[0], site[1])
        ]
    if state.last_kept in _dropped_digests(state, found, ctx):
        again.last_kept = _last_kept(again)
    if again.messages and any(maybe_marked(state.messages[i]) for i in found):
        # ``_caching`` reuses its scan of a list whose first message is the same object
        again.messages[0] = dict(again.messages[0])
    again.signed_from = first_signed(again, state.signed_from)  # the shed took signatures out
    return again


def _patchable(
    state: RenderState,
    ctx: RenderContext,
    shed: Mapping[MessageId, int],
    pending: Sequence[StoredMessage],
    sidecar: bool,
) -> bool:
    """What a patch needs: a plain render (no previews, version-1 chain, sidecar or observe
    mode), every other release in it reported, and no block left out at the first reply
    still sent (the shed could put it in order)."""
    if not ENABLED or sidecar or pending or state.legacy_chain is not None:
        return False
    if ctx.observe or not ctx.binds:
        return False
    if not releases_reported(state, ctx.releases, skip=shed):
        return False  # a re-render reports it again: not what the render at hand holds
    kept_from = first_kept_sequence(state, shed)
    for message_id, _ in state.left_out:
        if message_id not in shed and state.sequences.get(message_id) == kept_from:
            return False
    return True


def _shed_messages(
    state: RenderState, shed: Mapping[MessageId, int]
) -> dict[int, list[Source]] | None:
    """Each rendered message holding a shed reply, with the shed reply's sources in it;
    ``None`` when a shed reply is not a plain ``message`` source of the render. Looked for
    from ``signed_from`` on (where the replies with sent thinking are), and from the start
    when one is not there (a reply whose thinking was all left out may be earlier)."""
    if state.signed_from:
        found = _find_sources(state, shed, state.signed_from)
        if found is not None:
            return found
    return _find_sources(state, shed, 0)


def _find_sources(
    state: RenderState, shed: Mapping[MessageId, int], start: int
) -> dict[int, list[Source]] | None:
    """``_shed_messages`` looked for in the rendered messages from ``start`` on."""
    found: dict[int, list[Source]] = {}
    missing = set(shed)
    provenance = state.provenance
    for i in range(start, len(provenance)):
        entry = provenance[i]
        for source in entry.sources:
            if source.message_id in missing:
                if entry.kind != "message":
                    return None
                found.setdefault(i, []).append(source)
                missing.discard(source.message_id)
        if not missing:
            return found
    return None


def _from_block(ctx: RenderContext, message_id: MessageId) -> int:
    """Where a shed reply's release starts under ``ctx`` (the shed ones included)."""
    return ctx.releases[message_id].from_block


def _dropped_digests(
    state: RenderState, found: Mapping[int, list[Source]], ctx: RenderContext
) -> set[str]:
    """The signature digests of the thinking the shed takes out of ``state``."""
    return {
        digest
        for sources in found.values()
        for source in sources
        for j, digest in source.signatures.items()
        if source.blocks.get(j, -1) >= _from_block(ctx, source.message_id)
    }


def _patch_message(state: RenderState, ctx: RenderContext, i: int, sources: list[Source]) -> bool:
    """Take the shed thinking out of rendered message ``i`` (its provenance, tokens, the
    shed replies' spans and the thinking sets); ``False``: its shape would change."""
    message = state.messages[i]
    if message.keys() != {"role", "content"} or message["role"] != "assistant":
        return False
    content: list[dict[str, Any]] = message["content"]
    drop = {
        j
        for source in sources
        for j in source.signatures
        if source.blocks.get(j, -1) >= _from_block(ctx, source.message_id)
    }
    kept = [block for j, block in enumerate(content) if j not in drop]
    moved = _positions(len(content), drop)
    entry = state.provenance[i]
    new_sources = tuple(_moved(source, moved) for source in entry.sources)
    shed = {source.message_id for source in sources}
    new_message = {"role": "assistant", "content": kept}
    tokens = ctx.estimator(new_message)
    for old, new in zip(entry.sources, new_sources, strict=True):
        if old.message_id not in shed:
            continue
        own = [kept[j] for j in sorted(new.blocks)]
        if not own or _blank_wire(own):
            return False  # the reply's message would go or change: re-render
        alone = len(own) == len(kept)  # the whole message: estimated the same
        own_tokens = tokens if alone else ctx.estimator({"role": "assistant", "content": own})
        if not _respan(state, old.message_id, own_tokens):
            return False
        _forget_thinking(state, old, _from_block(ctx, old.message_id))
    state.total_tokens += tokens - state.message_tokens[i]
    state.message_tokens[i] = tokens
    state.messages[i] = new_message
    state.provenance[i] = ProvenanceEntry(entry.kind, new_sources)
    return True


def maybe_marked(message: Mapping[str, Any]) -> bool:
    """Whether a block of ``message`` may carry a cache marker (moved by the patch)."""
    return any(
        "cache_control" in block or block.get("type") == "tool_result"
        for block in message["content"]
    )


def _positions(size: int, drop: set[int]) -> dict[int, int]:
    """Each position kept of ``size``, to its position once ``drop`` is taken out."""
    moved: dict[int, int] = {}
    for j in range(size):
        if j not in drop:
            moved[j] = len(moved)
    return moved


def _moved(source: Source, moved: Mapping[int, int]) -> Source:
    """``source`` with its positions moved (those taken out left out)."""
    return Source(
        source.message_id,
        {moved[j]: b for j, b in source.blocks.items() if j in moved},
        {moved[j]: s for j, s in source.signatures.items() if j in moved},
    )


def _forget_thinking(state: RenderState, source: Source, from_block: int) -> None:
    """The shed reply's blocks from ``from_block`` on are neither sent nor left out now."""
    message_id = source.message_id
    for spot in [s for s in state.left_out if s[0] == message_id and s[1] >= from_block]:
        del state.left_out[spot]
    for block in source.blocks.values():
        if block >= from_block:
            state.kept_thinking.discard((message_id, block))
            state.unread.pop((message_id, block), None)


def _respan(state: RenderState, message_id: MessageId, tokens: int) -> bool:
    """The shed reply's span, with its tokens as now sent; ``False``: not found."""
    sequence = state.sequences[message_id]
    k = bisect.bisect_left(state.spans, sequence, key=lambda span: span.sequence)
    if k == len(state.spans) or state.spans[k].sequence != sequence:
        return False
    state.spans[k] = Span(sequence, tokens, state.spans[k].clean)
    return True


def _entries(
    ctx: RenderContext,
    shed: Mapping[MessageId, int],
    window: Sequence[StoredMessage],
    sequences: Mapping[MessageId, int],
) -> list[StripEntry] | None:
    """The ``released`` entries a re-render finds: every thinking block of a shed reply from
    its release on, oldest reply first (``_message._Message.thinking``); ``None``: a shed
    reply is not in ``window``."""
    entries: list[StripEntry] = []
    for message_id in sorted(shed, key=lambda mid: sequences.get(mid, -1)):
        reply = _find(window, sequences.get(message_id), message_id)
        release = ctx.releases.get(message_id)
        if reply is None or release is None:
            return None
        for index, block in enumerate(reply.content):
            if not isinstance(block, THINKING_TYPES) or index < release.from_block:
                continue
            if release.reported_at(index):
                continue  # never asked again (``_Message.thinking``)
            resolved = block if ctx.resolve is None else ctx.resolve(block)
            if resolved is None:  # its text is gone for good (``_Message.thinking``)
                entries.append(StripEntry(message_id, index, "unstamped", kind="release"))
                continue
            verdict, changed = judge_thinking(ctx, reply, index, resolved, {}, b"", None)
            if verdict == "keep" or verdict == "unread":
                return None  # never, for a released block: re-render to be sure
            if verdict != "hidden":
                entries.append(StripEntry(message_id, index, verdict, changed, kind="released"))
    return entries


def _find(
    window: Sequence[StoredMessage], sequence: int | None, message_id: MessageId
) -> StoredMessage | None:
    """The stored message ``message_id`` at ``sequence`` in ``window`` (oldest first)."""
    if sequence is None:
        return None
    k = bisect.bisect_left(window, sequence, key=lambda message: message.sequence)
    if k < len(window) and window[k].id == message_id:
        return window[k]
    return None


def _last_kept(state: RenderState) -> str | None:
    """The signature digest of the newest thinking block still sent (the order rule); none is
    before ``signed_from``."""
    provenance = state.provenance
    for i in range(len(provenance) - 1, state.signed_from - 1, -1):
        for source in reversed(provenance[i].sources):
            if source.signatures:
                return source.signatures[max(source.signatures)]
    return None
