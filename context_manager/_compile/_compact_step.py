"""One on-demand compaction, foreground (provider rules 23-25): ask, then store or skip.

``compaction_plan`` says whether a compaction can be asked now and builds its request: the
branch is at a boundary (a reply to the last committing compile is stored after its messages
and no tool round is open), and the request is exactly a request already sent (the one whose
reply starts the ``keep_turns`` kept replies) with rule 23's refusals removed. A head change
summarized stops applying (rule 26), so a plan never keeps a head change after one it
summarizes: the kept one would be read against another head (a tool added twice: a 400); it
keeps fewer turns instead, and a background compaction over which one was appended is abandoned.
``store_compaction`` stores the returned block byte-exact (``stop_reason == "compaction"``)
or stores nothing (any other stop reason: the history stays as it was, log event
``compaction_skipped``; compact again after the next turn). Nothing here calls the network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_manager._model._content import ToolUseBlock, UnknownBlock
from context_manager._model._log import library_logger
from context_manager._model._messages import HEAD_CHANGE_KIND, MessageId
from context_manager._model._results import CompileResult

from ._compaction import COMPACTION_KIND, compaction_meta, compaction_request, unmarked
from ._fold import SUMMARY_KIND
from ._host import CompileHost
from ._strategies import Compact

log = library_logger("context_manager.compile")


@attrs.frozen
class CompactionPlan:
    """A compaction to ask for: the request, the newest stored sequence it covers, the chain
    at its end, and how many messages it holds (rule 27: exactly those are swapped out)."""

    request: dict[str, Any]
    covers_upto: int
    end_chain: bytes
    branch: str = ""
    kept: int = 1
    """How many recorded replies follow the covered range (``Compact.keep_turns`` or fewer)."""
    summarizes_changes: bool = False
    """Whether the request carries a head change (SPEC 7b): none may be kept after it."""

    @property
    def messages(self) -> int:
        """How many messages the compaction request holds."""
        return len(self.request.get("messages") or ())


def compaction_plan(
    m: CompileHost, sent: Sequence[CompileResult], strategy: Compact
) -> CompactionPlan | None:
    """The compaction that keeps the ``strategy.keep_turns`` newest replies, or ``None`` when
    the branch is not at a boundary (nothing recorded after the newest request, a tool round
    open, another branch).

    ``sent`` are the branch's last committing compiles, oldest first. The request compacted is
    the newest of them whose reply starts the kept range: the ``keep_turns``-th newest, or a
    newer one when an older request is no longer the start of the newest (its messages were
    rendered otherwise since: a strip, a jump), so the kept turns are always sent unchanged
    after the block (rule 25 b, c)."""
    newest = sent[-1] if sent else None
    if newest is None or newest.dry or newest.branch != m.current_branch_key():
        return None
    after = m.store.read(m.namespace, m.lineage(), after=newest.last_sequence)
    replies = [msg for msg in after if msg.role == "assistant"]
    if not replies or any(isinstance(b, ToolUseBlock) for b in replies[-1].content):
        return None
    if replies[-1] is not after[-1] and after[-1].role == "user":
        return None  # a new turn has started: its request is the one to compact, later
    wanted = max(1, strategy.keep_turns)
    window = list(sent[-wanted:])
    for at, candidate in enumerate(window):
        if candidate is not newest and not starts(candidate.request, newest.request):
            continue
        changes = carries_head_change(m, candidate)
        if changes and candidate is not newest and changed_after(m, candidate.last_sequence):
            continue  # a kept head change after a summarized one (rule 26): keep fewer
        kept = len(window) - at
        if kept < wanted:
            log.info("compaction_keeps_fewer", namespace=m.namespace, kept=kept, asked=wanted)
        request = compaction_request(candidate.request, strategy.instructions)
        end = candidate._token.end_chain
        return CompactionPlan(
            request, candidate.last_sequence, end, candidate.branch, kept, changes
        )
    return None  # pragma: no cover - the newest always starts itself


def carries_head_change(m: CompileHost, result: CompileResult) -> bool:
    """Whether ``result``'s request sends a stored head change (a system message SPEC 7b
    appended for a system or tools change), the one it ends with included (its provenance
    names it, ``_render.closing_messages``)."""
    messages = result.request.get("messages") or ()
    for entry, message in zip(result.provenance, messages, strict=False):
        if message.get("role") != "system":
            continue
        for source in entry.sources:
            if m.store.get(m.namespace, source.message_id).metadata.kind == HEAD_CHANGE_KIND:
                return True
    return False


def changed_after(m: CompileHost, sequence: int) -> bool:
    """Whether a head change is stored on the branch after ``sequence``."""
    after = m.store.read(m.namespace, m.lineage(), after=sequence)
    return any(msg.metadata.kind == HEAD_CHANGE_KIND for msg in after)


def opened_after(m: CompileHost, sequence: int) -> bool:
    """Whether a compaction block or a fold's summary is stored on the branch after
    ``sequence`` (another process's or host's: one of this manager's own ends its pending
    compaction first). O(1) reads: the newest of each kind."""
    lineage = m.lineage()
    for kind in (COMPACTION_KIND, SUMMARY_KIND):
        newest = m.store.read(m.namespace, lineage, kind=kind, limit=1, newest_first=True)
        if newest and newest[0].sequence > sequence:
            return True
    return False


def starts(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``new`` is ``old`` with messages appended: the same model, ``system`` and
    ``tools``, and ``old``'s messages first, unchanged (cache markers aside, rule 2)."""
    if any(unmarked(old.get(k)) != unmarked(new.get(k)) for k in ("model", "system", "tools")):
        return False
    before, now = old.get("messages") or [], new.get("messages") or []
    return len(before) < len(now) and unmarked(before) == unmarked(now[: len(before)])


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
        compaction_meta(
            plan.covers_upto,
            plan.end_chain,
            body.get("usage"),
            plan.messages,
            preserving=m.binding.prefix_check(str(plan.request.get("model", ""))),
            request=plan.request,
        ),
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
