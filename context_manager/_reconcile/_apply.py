"""Reconcile: a framework's own message list for one call, turned into this library's request.

Invariants: what the framework sends new at the end is stored, once (a retried call with the same
list stores nothing); the framework's copy of a recorded reply is matched to the recorded reply,
whose bytes are what goes out; library-owned messages never take part in the matching; an edit is
stored as an edit (the compile strips what it must, with its cause; an edited reply keeps the
recorded thinking the framework sent back with it, and the strip reports the recorded thinking its
copy left out); a framework that drops old messages or writes its own summary is followed as a host
fold (a stored summary; the replies it covers are released, and the strip reports them with the
kept turns' thinking the cut invalidated), unless the library manages the window (then the
framework's truncation is ignored); a framework that sends fewer messages than it sent before
rewinds: a new branch starts at the last message it still sends, and the old one keeps everything.
Every decision is a function of the stored transcript and the parameters, so the same framework
list after a restart reconciles to the same request (the key cache only saves work).
A dry reconcile stores nothing. The framework's ``cache_control`` markers are not stored (nor
appended by a dry reconcile); a framework's system message keeps its ``clear_at`` and
``output_config`` (stored in ``metadata.extra``, sent on it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from context_manager._compile._fold import SUMMARY_KIND, covers_upto
from context_manager._compile._render import SYSTEM_FIELDS
from context_manager._model._branch_names import numbered_branch
from context_manager._model._canonical import strip_cache_control
from context_manager._model._content import Block, UnknownBlock, is_thinking, to_blocks
from context_manager._model._head import Head
from context_manager._model._log import library_logger
from context_manager._model._messages import (
    MessageId,
    MessageMeta,
    Role,
    StoredMessage,
    check_role,
)
from context_manager._model._results import CompileResult, ThinkingStrip
from context_manager._store._protocol import BranchRef

from ._align import Entry, Plan, plan
from ._normal import edited_reply, message_key, stored_key, user_key, wire_content
from ._params import FrameworkCall, split_params, with_betas

log = library_logger("context_manager.reconcile")

HOST_FOLD = "host_fold"
"""``metadata.extra`` flag of a summary stored for a host fold the library followed."""

HOST_FOLD_MARK = "context_manager_host_fold"
"""The block type of a followed host fold's summary when the framework wrote none (never sent)."""

FRAMEWORK_MESSAGES = "framework_messages"
"""``metadata.extra`` key: the framework messages a followed host fold stands for."""


@attrs.frozen
class Reconciliation:
    """What one reconcile did to the store.

    Attributes:
        stored: the framework's new messages, as stored (oldest first).
        edited: stored messages the framework edited.
        host_fold: the summary stored for a host fold the library followed, or ``None``.
        rewound_to: the branch a rewind started (the framework sent fewer messages), or ``None``.
        ignored: framework messages not stored: its own summary or dropped messages when the
            library manages the window.
        covered: the replies whose thinking the host fold took (released: never sent again
            on this branch), oldest first; the compile's strip reports them.
        covered_blocks: how many thinking blocks they carry.
        edit_lost: the edited replies whose framework copy left out (some of) their recorded
            thinking, stored without it; the compile's strip reports them.
        edit_lost_blocks: how many recorded thinking blocks those edits left out.
    """

    stored: tuple[MessageId, ...] = ()
    edited: tuple[MessageId, ...] = ()
    host_fold: MessageId | None = None
    rewound_to: str | None = None
    ignored: int = 0
    covered: tuple[MessageId, ...] = ()
    covered_blocks: int = 0
    edit_lost: tuple[MessageId, ...] = ()
    edit_lost_blocks: int = 0


class ReconcileHost(Protocol):
    """What reconcile needs of the facade (``ContextManager``)."""

    def messages(
        self,
        branch: str | None = None,
        kind: str | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[StoredMessage]: ...

    def add_message(
        self, role: Role, content: object, metadata: MessageMeta | dict[str, Any] | None = None
    ) -> MessageId: ...

    def edit_message(self, message_id: MessageId, content: object) -> StoredMessage: ...

    def release_thinking(self, message_id: MessageId, from_block: int = 0) -> None: ...

    def branch_at(self, message_id: MessageId, name: str) -> BranchRef: ...

    def switch_branch(self, name: str) -> BranchRef: ...

    def current_branch(self) -> BranchRef: ...

    def list_branches(self) -> list[BranchRef]: ...


def unmarked(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A framework's blocks without its ``cache_control`` markers, as stored: the compiler places
    the breakpoints, and a framework's markers (moved to its newest message on every call) would
    pile up past the API's limit of four. Markers are never bound (provider rule 2)."""
    return [strip_cache_control(dict(block)) for block in blocks]


@attrs.frozen
class _Side:
    """The stored side of the alignment: entries, and the stored message behind each."""

    entries: tuple[Entry, ...]
    sources: tuple[StoredMessage | None, ...]
    last_sequence: int
    fold: StoredMessage | None = None


def library_owned(message: StoredMessage) -> bool:
    """True for messages this library wrote itself (notices, head changes, summaries, ...)."""
    return message.metadata.kind is not None or message.metadata.system_notice


KeyCache: TypeAlias = dict[MessageId, tuple[tuple[Block, ...], str]]
"""A stored message's comparison key with the content it was taken over (an edit changes it)."""


def _stored_key(message: StoredMessage, cache: KeyCache | None) -> str:
    found = cache.get(message.id) if cache is not None else None
    if found is not None and found[0] == message.content:
        return found[1]
    key = stored_key(message.role, message.content)
    if cache is not None:
        cache[message.id] = (message.content, key)
    return key


def stored_side(messages: Sequence[StoredMessage], cache: KeyCache | None = None) -> _Side:
    """The alignable stored messages: a followed host fold's framework messages, then every
    framework message stored after what it covers. ``cache`` keeps the keys between calls
    (what this call does not read leaves it, so it holds one branch's messages at most)."""
    summary = next((m for m in reversed(messages) if m.metadata.kind == SUMMARY_KIND), None)
    entries: list[Entry] = []
    sources: list[StoredMessage | None] = []
    floor = -1
    if summary is not None and not summary.metadata.extra.get(HOST_FOLD):
        summary = None
    if summary is not None:
        floor = covers_upto(summary)
        for item in summary.metadata.extra.get(FRAMEWORK_MESSAGES) or ():
            role = str(item.get("role"))
            entries.append(Entry(role, message_key(role, item.get("content", [])), virtual=True))
            sources.append(None)
    for message in messages:
        if message.sequence > floor and not library_owned(message):
            entries.append(Entry(message.role, _stored_key(message, cache)))
            sources.append(message)
    if cache is not None:
        kept = {m.id for m in sources if m is not None}
        for stale in [mid for mid in cache if mid not in kept]:
            del cache[stale]
    last = messages[-1].sequence if messages else 0
    return _Side(tuple(entries), tuple(sources), last, summary)


def framework_entries(messages: Sequence[Mapping[str, Any]]) -> tuple[Entry, ...]:
    """The comparison entries of the framework's messages."""
    return tuple(Entry(str(m["role"]), message_key(str(m["role"]), m["content"])) for m in messages)


def _extends(side: _Side, framework: Sequence[Mapping[str, Any]]) -> Callable[[int, int], bool]:
    def extends(s: int, f: int) -> bool:
        source = side.sources[s]
        message = framework[f]
        if source is None or source.role != "user" or message["role"] != "user":
            return False
        mine = wire_content(source.content)
        theirs = wire_content(message["content"])
        return len(theirs) > len(mine) and user_key("user", theirs[: len(mine)]) == user_key(
            "user", mine
        )

    return extends


Compile: TypeAlias = Callable[[Head, bool], CompileResult]
"""``compile(head, dry_run)``: the facade's compile, before its observers hear the strip (the
facade tells them the strip reconcile returns, host fold included)."""


def reconcile(
    host: ReconcileHost,
    params: Mapping[str, Any],
    *,
    compile: Compile,
    follow_window: bool,
    dry_run: bool = False,
    boundary: Callable[[Reconciliation], None] | None = None,
    keys: KeyCache | None = None,
) -> tuple[Reconciliation, CompileResult]:
    """Store what the framework's call adds or changes, then compile (see the module docstring).

    ``boundary(done)`` runs after the framework's messages are stored and before the compile
    (where notices waiting for the agent's next boundary are stored); ``keys`` keeps the stored
    messages' comparison keys from call to call (the facade's own). A dry reconcile stores
    nothing: it compiles dry and appends the framework's new messages to the request as they
    came.

    Raises:
        FrameworkParamsInvalid: ``params`` has no model, no messages list, or a ``thread``.
    """
    call = split_params(params)
    side = stored_side(host.messages(), keys)
    framework = call.messages
    steps = plan(
        framework_entries(framework),
        side.entries,
        follow_window=follow_window,
        extends=_extends(side, framework),
    )
    if dry_run:
        return _dry(compile, call, steps)
    done = _apply(host, call, side, steps, follow_window=follow_window)
    if boundary is not None:
        boundary(done)
    result = with_covered(compile(call.head, False), done)
    if done != Reconciliation():
        log.info(
            "framework_reconciled",
            branch=result.branch,
            stored=len(done.stored),
            edited=len(done.edited),
            host_fold=done.host_fold is not None,
            rewound_to=done.rewound_to,
            ignored=done.ignored,
            compile_id=result.compile_id,
        )
    return done, attrs.evolve(result, request=with_betas(result.request, call.betas))


def with_covered(result: CompileResult, done: Reconciliation) -> CompileResult:
    """``result`` whose strip also reports the replies a host fold took and the thinking an
    edit of a reply left out (a fold's replies are the oldest and an edit is a change of the
    messages, so the cause, read at the first stripped block, is ``messages``)."""
    if not done.covered and not done.edit_lost:
        return result
    strip = result.thinking_strip
    replies = done.covered + done.edit_lost + (strip.replies if strip is not None else ())
    blocks = (
        done.covered_blocks + done.edit_lost_blocks + (strip.blocks if strip is not None else 0)
    )
    merged = ThinkingStrip(
        cause="messages",
        changed=(),
        replies=tuple(dict.fromkeys(replies)),
        blocks=blocks,
        branch=result.branch,
        compile_id=result.compile_id,
    )
    return attrs.evolve(result, thinking_strip=merged)


def _dry(
    compile: Compile, call: FrameworkCall, steps: Plan
) -> tuple[Reconciliation, CompileResult]:
    result = compile(call.head, True)
    request = dict(result.request)
    extra = [
        {**as_sent(m), "role": m["role"], "content": unmarked(wire_content(m["content"]))}
        for m in call.messages[steps.new_from :]
    ]
    request["messages"] = [*request.get("messages", []), *extra]
    return Reconciliation(), attrs.evolve(result, request=with_betas(request, call.betas))


def as_sent(message: Mapping[str, Any]) -> dict[str, Any]:
    """A framework's system message's own fields (``clear_at``, ``output_config``: provider
    rules 18-19), which go out on it as the framework set them; ``{}`` for any other message."""
    if message["role"] != "system":
        return {}
    return {name: message[name] for name in SYSTEM_FIELDS if name in message}


def _system_fields(message: Mapping[str, Any]) -> MessageMeta | None:
    """The metadata a framework's message is stored with: its system fields, where the render
    reads them (``metadata.extra``), or ``None``. Any other field (an OpenAI-style ``name``,
    which the API refuses) is not stored, and that is logged."""
    fields = as_sent(message)
    dropped = sorted(set(message) - {"role", "content"} - set(fields))
    if dropped:
        log.info("framework_message_fields_dropped", role=message["role"], fields=dropped)
    return MessageMeta(extra=fields) if fields else None


def _apply(
    host: ReconcileHost, call: FrameworkCall, side: _Side, steps: Plan, *, follow_window: bool
) -> Reconciliation:
    framework = call.messages
    rewound = _rewind(host, side, steps) if steps.rewind_after is not None else None
    if rewound is not None:
        _carry_fold(host, side, steps)
    fold: _Fold | None = None
    if steps.fold_lead is not None:
        fold = _host_fold(host, side, framework[: steps.fold_lead], steps.fold_from)
    elif rewound is None and steps.rewind_after is not None and follow_window:
        fold = _host_fold(host, side, (), len(side.entries))  # nothing common is kept
    edits = [_edit(host, side, framework, s, f) for s, f in steps.edits]
    edited = tuple(message_id for message_id, _ in edits)
    lost = tuple(message_id for message_id, n in edits if n)
    lost_blocks = sum(n for _, n in edits)
    stored: list[MessageId] = []
    if steps.extend is not None:
        s, f = steps.extend
        source = side.sources[s]
        assert source is not None  # extends() only accepts stored messages
        blocks = wire_content(framework[f]["content"])[len(source.content) :]
        stored.append(host.add_message("user", unmarked(blocks)))
    for message in framework[steps.new_from :]:
        role = check_role(message["role"])
        content = unmarked(wire_content(message["content"]))
        stored.append(host.add_message(role, content, metadata=_system_fields(message)))
    ignored = 0 if follow_window else steps.lead
    done = Reconciliation(
        tuple(stored), edited, None, rewound, ignored, edit_lost=lost, edit_lost_blocks=lost_blocks
    )
    if fold is None:
        return done
    return attrs.evolve(
        done, host_fold=fold.summary, covered=fold.covered, covered_blocks=fold.blocks
    )


def _edit(
    host: ReconcileHost,
    side: _Side,
    framework: Sequence[Mapping[str, Any]],
    s: int,
    f: int,
) -> tuple[MessageId, int]:
    """Store the framework's edit of a stored message; its id and the recorded thinking blocks
    the edit left out (a reply's own, sent back as recorded, are kept: ``edited_reply``)."""
    source = side.sources[s]
    assert source is not None  # the plan edits stored messages only
    content, lost = wire_content(framework[f]["content"]), 0
    if source.role == "assistant":
        content, lost = edited_reply(source.content, content)
    host.edit_message(source.id, unmarked(content))
    log.info("framework_edit_stored", message_id=source.id, role=source.role, thinking_lost=lost)
    return source.id, lost


def _rewind(host: ReconcileHost, side: _Side, steps: Plan) -> str | None:
    """Start a new branch after the last stored message the framework still sends."""
    at = steps.rewind_after
    source = side.sources[at] if at is not None and at >= 0 else None
    if source is None:
        return None
    names = {ref.name for ref in host.list_branches()}
    base = host.current_branch().name
    made = numbered_branch(
        lambda name: host.branch_at(source.id, name), lambda n: f"{base}~{n}", names
    )
    name = made.name
    host.switch_branch(name)
    log.info("framework_rewound", branch=name, at=source.id)
    return name


def _carry_fold(host: ReconcileHost, side: _Side, steps: Plan) -> None:
    """After a rewind, store again on the new branch the followed host fold that was stored
    after the rewind's message but covers only messages before it: the framework's window still
    starts where it did, so what it dropped stays out of the request."""
    fold, at = side.fold, steps.rewind_after
    source = side.sources[at] if at is not None and at >= 0 else None
    if fold is None or source is None or fold.sequence < source.sequence:
        return
    if covers_upto(fold) >= source.sequence:
        return
    host.add_message("user", fold.content, metadata=fold.metadata)
    log.info("host_fold_carried", summary=fold.id, covers_upto=covers_upto(fold))


@attrs.frozen
class _Fold:
    summary: MessageId
    covered: tuple[MessageId, ...]
    blocks: int


def _host_fold(
    host: ReconcileHost,
    side: _Side,
    lead: Sequence[Mapping[str, Any]],
    keep_from: int,
) -> _Fold:
    """Store the summary of a host fold: it covers every stored message before ``keep_from``."""
    kept = side.sources[keep_from] if keep_from < len(side.sources) else None
    upto = kept.sequence - 1 if kept is not None else side.last_sequence
    lead_wire = [{"role": m["role"], "content": wire_content(m["content"])} for m in lead]
    texts = [
        str(block.get("text"))
        for m in lead_wire
        for block in m["content"]
        if block.get("type") == "text" and str(block.get("text", "")).strip()
    ]
    # A window with no summary of the framework's own still needs a stored message: a marker
    # block, which the summary's render (its text only) never sends.
    content: list[Block] = (
        list(to_blocks("\n\n".join(texts))) if texts else [UnknownBlock({"type": HOST_FOLD_MARK})]
    )
    meta = MessageMeta(
        kind=SUMMARY_KIND,
        extra={"covers_upto": upto, HOST_FOLD: True, FRAMEWORK_MESSAGES: lead_wire},
    )
    summary = host.add_message("user", content, metadata=meta)
    covered = [
        m
        for m in side.sources[:keep_from]
        if m is not None and m.role == "assistant" and any(is_thinking(b) for b in m.content)
    ]
    for reply in covered:  # never sent again on this branch: the next strip reports them
        host.release_thinking(reply.id)
    blocks = sum(1 for m in covered for b in m.content if is_thinking(b))
    log.info(
        "host_fold_followed",
        summary=summary,
        covers_upto=upto,
        lead=len(lead_wire),
        released=len(covered),
    )
    return _Fold(summary, tuple(m.id for m in covered), blocks)
