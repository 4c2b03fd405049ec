"""Stage 9, the report: what this compile newly leaves out (the strip), the replies it sends
again (``restored``), and the binding-record write and snapshot it wants; then the
``CompileResult``. Pure: reads the render and the branch's binding record as the last committing
compile left it."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import (
    CompileResult,
    ReplyToken,
    ThinkingStrip,
)

from ._branch import BindingRecord
from ._render import RenderState, StripEntry, closing_messages
from ._run import BindingWrite, Draft, Run
from ._stage_finish import end_predecessor
from ._tokens import request_tokens

log = library_logger("context_manager.compile")

SNAPSHOT_REFRESH_MESSAGES = 64
"""A compile that restored a snapshot this many or more messages behind saves a fresh one (a
render from the stored messages always saves one; a steady compile never does)."""


def report(run: Run, draft: Draft) -> Draft:
    """The strip, the restored replies and the effects on the binding record."""
    state, record = draft.state, run.record
    put_back = frozenset(draft.inflight.put_back) if draft.inflight is not None else frozenset()
    entries = [e for e in report_entries(state, record) if (e.message_id, e.block) not in put_back]
    strip = make_strip(
        [e for e in entries if not already_out(e, record)],
        record.first_compiled,
        run.key,
        run.compile_id,
    )
    left_out = frozenset(state.left_out) - put_back
    rendered = draft.rendered
    effects = attrs.evolve(
        draft.effects,
        binding=binding_write(
            record, state, entries, left_out, run.limit is not None, draft.effects.anchored_head
        ),
        left_out=left_out,
        snapshot=not put_back
        and not draft.deferred
        and not rendered.repeat
        and (not rendered.snapshot or rendered.extended >= SNAPSHOT_REFRESH_MESSAGES),
    )
    return attrs.evolve(
        draft,
        entries=tuple(entries),
        strip=strip,
        restored=restored_replies(state, record),
        effects=effects,
    )


def binding_write(
    record: BindingRecord,
    state: RenderState,
    entries: Sequence[StripEntry],
    left_out: frozenset[tuple[MessageId, int]],
    windowed: bool,
    anchored_head: object,
) -> BindingWrite | None:
    """What is permanent (new releases, reports), the left-out set and the window anchor, or
    ``None`` when the binding record already says it all."""
    releases: dict[MessageId, int] = {}
    reported: list[MessageId] = []
    for entry in entries:
        if entry.kind == "released":
            reported.append(entry.message_id)
        elif entry.kind == "release":
            prior = releases.get(entry.message_id)
            releases[entry.message_id] = entry.block if prior is None else min(prior, entry.block)
    anchor = state.start if windowed and state.start != record.anchor else None
    left_changed = left_out != record.left_out
    if (
        record.first_compiled
        and not releases
        and not reported
        and anchor is None
        and not left_changed
        and anchored_head is None
    ):
        return None
    return BindingWrite(
        releases=tuple(sorted(releases.items())),
        reported=tuple(reported),
        window_start=anchor,
        left_out=left_out if left_changed else None,
    )


def report_entries(state: RenderState, record: BindingRecord) -> list[StripEntry]:
    """What this compile newly leaves out, oldest first: released or covered blocks not yet
    reported, and blocks left out now that the last committing compile did not leave out."""
    seen: set[tuple[MessageId, int]] = set()
    entries: list[StripEntry] = []
    fresh = [e for spot, e in state.left_out.items() if spot not in record.left_out]
    for entry in [*state.unreported, *fresh]:
        spot = (entry.message_id, entry.block)
        if spot in seen or spot in state.kept_thinking:
            continue
        seen.add(spot)
        entries.append(entry)
    age = state.sequences
    return sorted(entries, key=lambda e: (age.get(e.message_id, -1), e.block))


def already_out(entry: StripEntry, record: BindingRecord) -> bool:
    """A block released or folded away now that the last committing compile had already left
    out (or sent knowing the model cannot read it): its loss was reported then, so the strip
    does not name it again (its release is recorded)."""
    return (
        entry.kind in ("released", "release", "covered")
        and (
            entry.message_id,
            entry.block,
        )
        in record.left_out
    )


def restored_replies(state: RenderState, record: BindingRecord) -> tuple[MessageId, ...]:
    """Replies whose thinking the last committing compile left out and this one sends."""
    back = record.left_out & state.kept_thinking
    if not back:
        return ()
    age = state.sequences
    return tuple(
        dict.fromkeys(mid for mid, _ in sorted(back, key=lambda s: (age.get(s[0], -1), s[1])))
    )


def make_strip(
    entries: Sequence[StripEntry], first_compiled: bool, key: str, compile_id: str
) -> ThinkingStrip | None:
    """The strip of ``entries`` (its cause read at the first), or ``None`` for none."""
    if not entries:
        return None
    first = entries[0]
    if first.reason == "head":
        cause, changed = "head", first.changed
    elif not first_compiled:
        cause, changed = "first", ()
    else:
        cause, changed = "messages", ()
    replies = tuple(dict.fromkeys(entry.message_id for entry in entries))
    return ThinkingStrip(
        cause=cause,  # type: ignore[arg-type]
        changed=changed,
        replies=replies,
        blocks=len(entries),
        branch=key,
        compile_id=compile_id,
    )


def compile_result(run: Run, draft: Draft, appended: tuple[MessageId, ...]) -> CompileResult:
    """The compile's result (and, for a committing compile that strips, its log event)."""
    m, state, body = run.engine.manager, draft.state, draft.body
    provenance = list(state.provenance)
    if draft.inflight is not None:
        provenance[draft.inflight.index] = draft.inflight.entry
    strip = draft.strip
    if strip is not None and not run.dry_run:
        log.info(
            "thinking_stripped",
            namespace=m.namespace,
            branch=run.key,
            compile_id=run.compile_id,
            cause=strip.cause,
            changed=list(strip.changed),
            replies=len(strip.replies),
            blocks=strip.blocks,
        )
    return CompileResult(
        request=body,
        provenance=(*provenance, *(entry for _, entry in closing_messages(state))),
        thinking_strip=strip,
        compile_id=run.compile_id,
        dry=run.dry_run,
        tokens=request_tokens(m.estimator, body)
        or state.total_tokens
        + int(m.estimator({"system": draft.head.system, "tools": list(draft.head.tools)})),
        branch=run.key,
        namespace=m.namespace,
        token=ReplyToken(
            manager_token=m.token,
            head_digests=dict(draft.head.digests),
            end_chain=draft.end_chain,
            end_predecessor=end_predecessor(draft),
            start_sequence=state.start,
        ),
        last_sequence=state.last_sequence,
        restored=draft.restored,
        appended=appended,
        unreadable=tuple(state.unread.values()),
        put_back=draft.inflight.paths if draft.inflight is not None else (),
        predicted_mismatches=tuple(state.predicted.values()),
        shed=tuple(dict.fromkeys(e.message_id for e in draft.entries if e.reason == "shed")),
        folded=len(draft.effects.fold.covered) if draft.effects.fold is not None else 0,
    )
