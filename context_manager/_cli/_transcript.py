"""``context-manager transcript``: read an agent's transcript, its notices, or its reasoning.

Read-only: the database (and sidecar) are checked before opening and never written; an agent or
branch that is not there is an error listing the ones that are. Messages are read in chunks, so
a long transcript streams. Reasoning text is untrusted model output: it is read from
``UntrustedText.value`` on purpose, escaped, and marked as untrusted wherever it is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from context_manager._manager import ContextManager
from context_manager._model._content import (
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
)
from context_manager._model._diagnostics import verdict_counts
from context_manager._model._editing import CallEdits
from context_manager._model._messages import StoredMessage
from context_manager._model._usage import USAGE_KEY, CallUsage, usage_from
from context_manager._reasoning._audit import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PARTS,
    ReasoningPart,
    read_reasoning,
)
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._protocol import BranchRecord, Store

from ._db import (
    CliError,
    is_postgres,
    open_for_reading,
    open_postgres,
    open_sidecar,
    sidecar_path,
)
from ._format import (
    BOLD_YELLOW,
    DIM,
    clean,
    format_message,
    message_record,
    message_text,
    style,
    table,
)

READ_CHUNK = 500
"""Messages read per step: output starts at once and memory stays flat on long transcripts."""

UNTRUSTED = "untrusted"
"""How reasoning text is labelled: model output derived from untrusted input, never a prompt."""


def pick_agent(store: Store, wanted: str | None, path: str) -> str:
    """The agent to read: ``wanted``, or the only one in the file.

    Raises:
        CliError: no agents, several and none chosen, or ``wanted`` is not there (the message
            lists the agents that are).
    """
    agents = store.namespaces()
    listing = ", ".join(repr(a) for a in agents)
    if wanted is not None:
        if wanted not in agents:
            raise CliError(f"no agent {wanted!r} in {path}; agents: {listing or 'none'}")
        return wanted
    if not agents:
        raise CliError(f"{path} holds no agents yet")
    if len(agents) > 1:
        raise CliError(f"{path} holds several agents; pick one with --agent: {listing}")
    return agents[0]


def pick_branch(store: Store, agent: str, wanted: str | None) -> BranchRecord:
    """The branch to read: ``wanted``, or the agent's current one.

    Raises:
        CliError: ``wanted`` is not a live branch (the message lists the live ones).
    """
    live = store.branches(agent)
    name = wanted if wanted is not None else store.current_branch_name(agent)
    for record in live:
        if record.ref.name == name:
            return record
    if wanted is None and live:  # no current branch recorded: the agent's oldest
        return live[0]
    listing = ", ".join(repr(b.ref.name) for b in live) or "none"
    raise CliError(f"no branch {wanted!r} for agent {agent!r}; branches: {listing}")


def _messages(cm: ContextManager, branch: str, kind: str | None) -> Iterator[StoredMessage]:
    after: int | None = None
    while True:
        chunk = cm.messages(branch=branch, kind=kind, since=after, limit=READ_CHUNK)
        yield from chunk
        if len(chunk) < READ_CHUNK:
            return
        after = chunk[-1].sequence


@contextlib.contextmanager
def _opened(path: str) -> Iterator[Store]:
    """The database to read: a file, or a ``postgresql://`` server; never written."""
    if not is_postgres(path):
        with open_for_reading(path) as sqlite:
            yield sqlite
        return
    postgres = open_postgres(path, writing=False)
    try:
        yield postgres
    finally:
        postgres.close()


def show_transcript(args: argparse.Namespace, out: TextIO, *, color: bool) -> int:
    """The ``transcript`` command; returns 0.

    Raises:
        CliError: a bad database or sidecar, an unknown agent or branch.
    """
    if args.reasoning and args.kind is not None:
        raise CliError("--kind filters messages; --reasoning shows replies' reasoning: use one")
    if args.usage and (args.reasoning or args.kind is not None):
        raise CliError("--usage sums every reply's tokens per turn: drop --kind and --reasoning")
    with _opened(args.path) as store:
        agent = pick_agent(store, args.agent, args.path)
        record = pick_branch(store, agent, args.branch)
        sidecar = None
        if args.reasoning:
            explicit = args.sidecar is not None
            where = Path(args.sidecar) if explicit else sidecar_path(args.path)
            # a PostgreSQL transcript keeps its reasoning inline: no sidecar unless named
            if explicit or not is_postgres(args.path):
                sidecar = open_sidecar(where, create=False)
            if sidecar is None and explicit:
                raise CliError(f"{where}: no such reasoning sidecar")
        try:
            reasoning = ReasoningCapture(sidecar, capture=False) if sidecar is not None else None
            cm = ContextManager.open(store, namespace=agent, reasoning=reasoning)
            if args.reasoning:
                _show_reasoning(cm, record, out, json_lines=args.json, color=color)
            elif args.usage:
                _show_usage(cm, record, out, json_lines=args.json, color=color)
            else:
                _show_messages(cm, record, args.kind, out, json_lines=args.json, color=color)
        finally:
            if sidecar is not None:
                sidecar.close()
    return 0


def _show_messages(
    cm: ContextManager,
    record: BranchRecord,
    kind: str | None,
    out: TextIO,
    *,
    json_lines: bool,
    color: bool,
) -> None:
    names: dict[str, str] = {}

    def branch_name(key: str) -> str:
        if key not in names:
            names[key] = cm.store.branch_by_key(cm.namespace, key).ref.name
        return names[key]

    if not json_lines:
        print(style(_heading(cm, record, kind), DIM, color), file=out)
    matched = False
    for message in _messages(cm, record.ref.name, kind):
        matched = True
        if json_lines:
            line = json.dumps(message_record(message, branch_name(message.branch)))
            print(line, file=out)
        else:
            for text in format_message(message, color=color, clock=True):
                print(text, file=out)
    if not matched and not json_lines:
        what = f"of kind {kind!r} " if kind else ""
        print(f"no message {what}matched on branch {record.ref.name}", file=out)


USAGE_SNIPPET_CHARS = 40
"""How much of a turn's opening words ``--usage`` shows."""


def opens_turn(message: StoredMessage) -> bool:
    """True for a user message that starts a turn: the user's words, not a tool round's results,
    a notice or a fold summary."""
    return (
        message.role == "user"
        and not message.metadata.system_notice
        and message.metadata.kind is None
        and any(isinstance(b, TextBlock) for b in message.content)
        and not any(isinstance(b, ToolResultBlock) for b in message.content)
    )


def reply_usage(message: StoredMessage) -> CallUsage | None:
    """The usage a recorded reply keeps in ``metadata.extra["usage"]``, if any."""
    raw = message.metadata.extra.get(USAGE_KEY)
    return usage_from(raw) if isinstance(raw, dict) else None


def turn_usage(
    messages: Iterator[StoredMessage],
) -> Iterator[tuple[StoredMessage | None, int, CallUsage]]:
    """``(opening user message, calls, summed usage)`` per turn, oldest first; replies before
    the first user message form a turn opened by ``None``. Replies recorded without usage count
    as calls with zero tokens."""
    opener: StoredMessage | None = None
    calls, usage = 0, CallUsage()
    for message in messages:
        if opens_turn(message):
            if opener is not None or calls:
                yield opener, calls, usage
            opener, calls, usage = message, 0, CallUsage()
        elif message.role == "assistant":
            calls += 1
            usage = usage + (reply_usage(message) or CallUsage())
    if opener is not None or calls:
        yield opener, calls, usage


def reply_edits(message: StoredMessage) -> CallEdits:
    """What the server's context editing cleared on a recorded reply's call (zeros if none)."""
    return CallEdits.of(message.metadata.extra)


def turn_edits(messages: Iterator[StoredMessage]) -> list[list[CallEdits]]:
    """What the server's context editing cleared on each call, per turn (``turn_usage``'s
    turns)."""
    out: list[list[CallEdits]] = []
    calls: list[CallEdits] = []
    started = False
    for message in messages:
        if opens_turn(message):
            if started:
                out.append(calls)
            started, calls = True, []
        elif message.role == "assistant":
            started = True
            calls.append(reply_edits(message))
    if started:
        out.append(calls)
    return out


def _summed(calls: list[CallEdits]) -> CallEdits:
    return CallEdits(
        sum(e.cleared_tool_uses for e in calls),
        sum(e.cleared_thinking_turns for e in calls),
        sum(e.cleared_input_tokens for e in calls),
    )


def _edits_json(calls: list[CallEdits]) -> dict[str, Any]:
    """The per-turn JSON fields of a turn whose calls the server edited (none otherwise): the
    turn's sums and ``cleared_by_call``, one entry per call of the turn."""
    edits = _summed(calls)
    if edits == CallEdits():
        return {}
    return {
        "cleared_tool_uses": edits.cleared_tool_uses,
        "cleared_thinking_turns": edits.cleared_thinking_turns,
        "cleared_input_tokens": edits.cleared_input_tokens,
        "cleared_by_call": [
            {
                "cleared_tool_uses": e.cleared_tool_uses,
                "cleared_thinking_turns": e.cleared_thinking_turns,
                "cleared_input_tokens": e.cleared_input_tokens,
            }
            for e in calls
        ],
    }


def _show_usage(
    cm: ContextManager, record: BranchRecord, out: TextIO, *, json_lines: bool, color: bool
) -> None:
    """Tokens per turn (uncached input, cache reads, cache writes, output) and the total; what
    server-side context editing cleared, when it cleared anything."""
    turns = list(turn_usage(_messages(cm, record.ref.name, None)))
    edits = turn_edits(_messages(cm, record.ref.name, None))
    edits += [[] for _ in range(len(turns) - len(edits))]
    total = CallUsage.total(usage for _, _, usage in turns)
    calls = sum(n for _, n, _ in turns)
    share = total.cache_read_input_tokens / total.total_input if total.total_input else 0.0
    diagnosed = verdict_counts(
        m.metadata.extra for m in _messages(cm, record.ref.name, None) if m.role == "assistant"
    )
    if json_lines:
        for number, (opener, n, usage) in enumerate(turns, start=1):
            entry: dict[str, Any] = {
                "turn": number,
                "sequence": opener.sequence if opener is not None else None,
                "text": message_text(opener)[:USAGE_SNIPPET_CHARS] if opener else None,
                "calls": n,
                **usage.to_json(),
                **_edits_json(edits[number - 1]),
            }
            print(json.dumps(entry), file=out)
        summed: dict[str, Any] = {"calls": calls, **total.to_json(), "cache_read_share": share}
        if diagnosed["compared"]:
            summed["cache_diagnostics"] = diagnosed
        print(json.dumps({"total": summed}), file=out)
        return
    print(style(f"agent {cm.namespace}, branch {record.ref.name}: usage", DIM, color), file=out)
    header = ("turn", "#seq", "opened by", "calls", "input", "cache read", "cache write", "output")
    rows = [
        (
            str(number),
            f"#{opener.sequence}" if opener is not None else "-",
            _snippet(opener),
            str(n),
            *(str(value) for value in usage.as_tuple()),
        )
        for number, (opener, n, usage) in enumerate(turns, start=1)
    ]
    rows.append(("all", "", "", str(calls), *(str(value) for value in total.as_tuple())))
    for line in table(rows, header):
        print(line, file=out)
    print(f"cache read share: {share:.1%} of {total.total_input} input tokens", file=out)
    if diagnosed["compared"]:
        print(divergence_line(diagnosed), file=out)
    _show_edits(edits, out)


def _show_edits(edits: list[list[CallEdits]], out: TextIO) -> None:
    """One line per turn the server's context editing cleared something on, per call too."""
    for number, calls_edits in enumerate(edits, start=1):
        e = _summed(calls_edits)
        if e == CallEdits():
            continue
        per_call = ", ".join(
            f"{c.cleared_tool_uses} uses / {c.cleared_input_tokens} tokens" for c in calls_edits
        )
        print(
            f"turn {number}: the server cleared {e.cleared_tool_uses} tool uses and "
            f"{e.cleared_thinking_turns} thinking turns ({e.cleared_input_tokens} input tokens); "
            f"per call: {per_call}",
            file=out,
        )


def divergence_line(counts: Mapping[str, Any]) -> str:
    """The ``--usage`` line summing cache diagnostics' verdicts (``verdict_counts``).

    >>> print(divergence_line({"compared": 4, "expected": 2, "unexpected": 1, "pending": 0,
    ...     "previous_message_not_found": 1, "unexpected_reasons": {"messages_changed": 1}}))
    ... # doctest: +NORMALIZE_WHITESPACE
    cache diagnostics: 4 requests compared, 2 divergences expected, 1 unexpected
    (messages_changed 1), 1 previous request not found
    """
    expected = counts["expected"]
    line = (
        f"cache diagnostics: {counts['compared']} requests compared, {expected} "
        f"{'divergence' if expected == 1 else 'divergences'} expected, "
        f"{counts['unexpected']} unexpected"
    )
    reasons = ", ".join(f"{r} {n}" for r, n in counts["unexpected_reasons"].items())
    line += f" ({reasons})" if reasons else ""
    if counts["pending"]:
        line += f", {counts['pending']} pending"
    if counts["previous_message_not_found"]:
        line += f", {counts['previous_message_not_found']} previous request not found"
    return line


def _snippet(message: StoredMessage | None) -> str:
    if message is None:
        return "(before the first user message)"
    text = clean(" ".join(message_text(message).split()))
    return text if len(text) <= USAGE_SNIPPET_CHARS else text[: USAGE_SNIPPET_CHARS - 1] + "…"


def _heading(cm: ContextManager, record: BranchRecord, kind: str | None) -> str:
    others = [b.name for b in cm.list_branches() if b.name != record.ref.name]
    also = f" (other branches: {', '.join(others)})" if others else ""
    only = f", kind {kind}" if kind else ""
    return f"agent {cm.namespace}, branch {record.ref.name}{only}{also}"


def _show_reasoning(
    cm: ContextManager, record: BranchRecord, out: TextIO, *, json_lines: bool, color: bool
) -> None:
    """Each reply's reasoning parts on the branch, as ``read_reasoning`` returns them.

    Read reply by reply (``read_reasoning`` reads the manager's current branch, and switching
    would write), with the reader's bounds shared across the replies.
    """
    parts_left, bytes_left = DEFAULT_MAX_PARTS, DEFAULT_MAX_BYTES
    if not json_lines:
        print(
            style(f"agent {cm.namespace}, branch {record.ref.name}: reasoning", DIM, color),
            file=out,
        )
    shown = 0
    for message in _messages(cm, record.ref.name, None):
        if message.role != "assistant" or not any(
            isinstance(b, ThinkingBlock | RedactedThinkingBlock) for b in message.content
        ):
            continue
        if parts_left <= 0 or bytes_left <= 0:
            _truncated(out, json_lines=json_lines)
            return
        try:
            found = read_reasoning(
                cm, message_id=message.id, max_parts=parts_left, max_bytes=bytes_left
            )
        except ValueError as err:
            raise CliError(f"{err}; pass --sidecar PATH") from err
        for part in found.parts:
            _print_part(message, part, out, json_lines=json_lines, color=color)
            shown += 1
        parts_left -= len(found.parts)
        bytes_left -= found.bytes
        if found.truncated:
            _truncated(out, json_lines=json_lines)
            return
    if shown == 0 and not json_lines:
        print("no reasoning on this branch", file=out)


def _truncated(out: TextIO, *, json_lines: bool) -> None:
    if json_lines:
        print(json.dumps({"truncated": True}), file=out)
    else:
        print(
            "(truncated: the audit reader's bound was reached; later parts are not shown)", file=out
        )


def _print_part(
    message: StoredMessage, part: ReasoningPart, out: TextIO, *, json_lines: bool, color: bool
) -> None:
    text = part.text.value if part.text is not None else None  # deliberately: untrusted
    if json_lines:
        record: dict[str, Any] = {
            "message_id": part.message_id,
            "sequence": message.sequence,
            "block": part.block,
            "kind": part.kind,
            "status": part.status,
            "ref": part.ref,
            "digest": part.digest,
            "size": part.size,
            "untrusted_text": text,
        }
        print(json.dumps(record), file=out)
        return
    digest = f" {part.digest[:12]}…" if part.digest else ""
    status = part.status if part.status == "ok" else style(part.status, BOLD_YELLOW, color)
    size = f"{part.size} bytes{digest}"
    print(f"#{message.sequence:<4} block {part.block}  {status}  {part.kind}  {size}", file=out)
    if text is None:
        return
    marker = style(f"  {UNTRUSTED} ┆ ", DIM, color)
    for line in clean(text).split("\n") if text else ["(empty: display omitted)"]:
        print(f"{marker}{line}", file=out)
