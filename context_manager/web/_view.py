"""The console's view of a transcript: stored messages turned into lines, rounds and turns.

Pure functions. Invariants: a thinking block becomes a ``Marker`` (its kind, whether it is
signed, the last characters of its signature, whether its text was omitted, whether the branch
leaves it out or released it), never its text; a tool round is the reply that called tools and
the results that answered it, open while unanswered; every turn's usage is summed from the
usage its replies recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import attrs

from context_manager._model._content import (
    Block,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)
from context_manager._model._messages import (
    ASKER_KEY,
    DROPPED_KEY,
    HEAD_CHANGE_KIND,
    REASONING_LOSS_KIND,
    STRIP_KEY,
    MessageId,
    StoredMessage,
)
from context_manager._model._usage import USAGE_KEY, CallUsage
from context_manager._reasoning._capture import reasoning_record
from context_manager._store._protocol import Release

SIGNATURE_TAIL = 4
"""Signature characters a marker shows: enough to tell blocks apart, too few to reuse one."""

SHORT_CHARS = 160
"""Tool inputs and results are cut to this on the page."""

SUMMARY_KIND = "summary"
"""``metadata.kind`` of a fold's summary message."""

COMPACTION_TYPES = frozenset({"compaction"})
"""Block types that are a server compaction's summary."""


@attrs.frozen
class Marker:
    """A thinking block as the console shows it. ``state``: ``"left out"``, ``"released"`` or
    ``None`` (sent while the reasons hold)."""

    kind: str
    signed: bool
    tail: str
    omitted: bool
    state: str | None
    dropped: str | None = None
    """The provider's reason when it dropped the block from a later request (``prefix``,
    ``model``, ``organization``, ``end_user``), else ``None``."""


Spot: TypeAlias = tuple[MessageId, int]
"""``(reply id, block index)``."""


@attrs.frozen
class Part:
    """One block on a line. ``what``: ``text``, ``thinking``, ``call``, ``result``,
    ``change`` or ``other``; ``text`` is what is shown (never thinking text)."""

    what: str
    text: str = ""
    marker: Marker | None = None
    error: bool = False


@attrs.frozen
class Line:
    """One stored message. ``form``: ``user``, ``assistant``, ``results``, ``reasoning``
    (a ``[reasoning]`` notice), ``head-change``, ``summary``, ``compaction``, ``notice`` or
    ``system``."""

    id: MessageId
    sequence: int
    form: str
    parts: tuple[Part, ...]
    asker: str | None = None
    readable: bool = False
    """A reply with reasoning text the audit reader may return (captured or inline)."""
    notice_form: str | None = None
    cause: str | None = None
    usage: CallUsage | None = None
    strip: str | None = None
    """What the compile that produced this reply newly left out, and why (the runtime records
    it), e.g. ``2 blocks of 2 replies, cause head (tools)``."""


@attrs.frozen
class Round:
    """A tool round: the reply that called tools and the results (``None`` while open)."""

    call: Line
    results: Line | None

    @property
    def open(self) -> bool:
        return self.results is None


@attrs.frozen
class TurnUsage:
    """One turn's calls and tokens; ``opener`` the sequence of the message that opened it."""

    number: int
    opener: int | None
    calls: int
    usage: CallUsage


Entry: TypeAlias = Line | Round


@attrs.frozen
class TranscriptView:
    entries: tuple[Entry, ...]
    turns: tuple[TurnUsage, ...]


def clean(text: str) -> str:
    """``text`` with control characters other than newline and tab shown as ``\\xNN``."""
    return "".join(
        ch if ch.isprintable() or ch in "\n\t" else f"\\x{ord(ch) & 0xFF:02x}" for ch in text
    )


def short(text: str, limit: int = SHORT_CHARS) -> str:
    folded = " ".join(clean(text).split())
    return folded if len(folded) <= limit else folded[: limit - 1] + "…"


def marker(
    message: StoredMessage,
    index: int,
    block: ThinkingBlock | RedactedThinkingBlock,
    left_out: frozenset[Spot],
    release: Release | None,
    dropped: Mapping[Spot, str] | None = None,
) -> Marker:
    """The marker of block ``index`` of ``message``."""
    record = reasoning_record(block)
    if isinstance(block, RedactedThinkingBlock):
        kind, signature, omitted = "redacted", block.data, False
    else:
        summary = record is not None and record.get("kind") == "summary"
        kind, signature = ("summary" if summary else "thinking"), block.signature
        omitted = (
            (record.get("omitted") is True or record.get("size") == 0)
            if record
            else (block.thinking == "")
        )
    state = None
    if release is not None and index >= release.from_block:
        state = "released"
    elif (message.id, index) in left_out:
        state = "left out"
    tail = clean(signature.rstrip("=")[-SIGNATURE_TAIL:]) if signature else ""
    reason = (dropped or {}).get((message.id, index))
    if reason is not None:
        reason = reason.removesuffix("_binding_mismatch")
    return Marker(kind, bool(signature), tail, omitted, state, reason)


def _readable(block: Block) -> bool:
    if not isinstance(block, ThinkingBlock):
        return False
    record = reasoning_record(block)
    if record is None:
        return bool(block.thinking)
    return isinstance(record.get("ref"), str)


def _result_text(block: ToolResultBlock) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    return " ".join(b.text if isinstance(b, TextBlock) else "⟨block⟩" for b in block.content)


def _unknown_part(block: UnknownBlock) -> Part:
    tool = block.raw.get("tool")
    if block.type in ("tool_addition", "tool_removal") and isinstance(tool, dict):
        name = tool.get("name") or (tool.get("definition") or {}).get("name") or "?"
        sign = "+" if block.type == "tool_addition" else "−"
        return Part("change", f"{block.type} {sign} {clean(str(name))}")
    if block.type in COMPACTION_TYPES:
        return Part("change", f"compaction: {short(str(block.raw.get('content', '')))}")
    return Part("other", f"⟨{clean(str(block.type))}⟩")


def part_of(
    message: StoredMessage,
    index: int,
    block: Block,
    left_out: frozenset[Spot],
    release: Release | None,
    dropped: Mapping[Spot, str] | None = None,
) -> Part:
    """One block as the console shows it."""
    if isinstance(block, TextBlock):
        return Part("text", clean(block.text))
    if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
        found = marker(message, index, block, left_out, release, dropped)
        return Part("thinking", marker=found)
    if isinstance(block, ToolUseBlock):
        arguments = json.dumps(block.input, ensure_ascii=False, separators=(",", ":"))
        return Part("call", f"{clean(block.name)}({short(arguments)})")
    if isinstance(block, ToolResultBlock):
        return Part("result", short(_result_text(block)), error=bool(block.is_error))
    if isinstance(block, ImageBlock):
        return Part("other", "⟨image⟩")
    if isinstance(block, UnknownBlock):
        return _unknown_part(block)
    return Part("other", f"⟨{type(block).__name__}⟩")  # pragma: no cover - all listed above


def notice_form(text: str) -> tuple[str | None, str | None]:
    """``(form, cause)`` of a ``[reasoning]`` line (SPEC 9): ``head`` / ``count`` /
    ``at least``, and the cause a head form names."""
    if not text.startswith("[reasoning] "):
        return None, None
    if "the reasoning behind at least " in text:
        return "at least", None
    if "Some of your earlier reasoning is no longer in your context:" in text:
        return "count", None
    marker_at = text.find(", because your ")
    if marker_at < 0:
        return "head", None
    end = text.find(" changed.", marker_at)
    return "head", text[marker_at + len(", because your ") : end] if end > 0 else None


def form_of(message: StoredMessage) -> str:
    """Which line form a message takes."""
    meta = message.metadata
    if meta.kind == REASONING_LOSS_KIND:
        return "reasoning"
    if meta.kind == HEAD_CHANGE_KIND:
        return "head-change"
    if meta.kind == SUMMARY_KIND:
        return "summary"
    if any(isinstance(b, UnknownBlock) and b.type in COMPACTION_TYPES for b in message.content):
        return "compaction"
    if meta.system_notice:
        return "notice"
    if message.role == "user":
        results = any(isinstance(b, ToolResultBlock) for b in message.content)
        return "results" if results else "user"
    return str(message.role)


def dropped_spots(messages: Iterable[StoredMessage]) -> dict[Spot, str]:
    """The blocks the provider dropped, by reason, from what the replies recorded."""
    spots: dict[Spot, str] = {}
    for message in messages:
        for entry in message.metadata.extra.get(DROPPED_KEY) or ():
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[1], int):
                spots[(str(entry[0]), entry[1])] = str(entry[2])
    return spots


def strip_text(raw: object) -> str | None:
    """A recorded strip in words, or ``None`` when there is none (or it is malformed)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("blocks"), int):
        return None
    listed = raw.get("replies")
    replies: list[object] = listed if isinstance(listed, list) else []
    named = raw.get("changed")
    changed = [c for c in named if isinstance(c, str)] if isinstance(named, list) else []
    cause = clean(str(raw.get("cause")))
    because = f" ({', '.join(changed)})" if changed else ""
    count = raw["blocks"]
    return (
        f"{count} block{'s' if count != 1 else ''} of {len(replies)} "
        f"repl{'ies' if len(replies) != 1 else 'y'} left out, cause {cause}{because}"
    )


def line_of(
    message: StoredMessage,
    left_out: frozenset[Spot],
    releases: Mapping[MessageId, Release],
    dropped: Mapping[Spot, str] | None = None,
) -> Line:
    """One message as a ``Line``."""
    release = releases.get(message.id)
    parts = tuple(
        part_of(message, i, block, left_out, release, dropped)
        for i, block in enumerate(message.content)
    )
    form = form_of(message)
    asker = message.metadata.extra.get(ASKER_KEY)
    texts = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    found, cause = notice_form(texts) if form == "reasoning" else (None, None)
    raw = message.metadata.extra.get(USAGE_KEY)
    return Line(
        message.id,
        message.sequence,
        form,
        parts,
        asker=asker if isinstance(asker, str) else None,
        readable=any(_readable(b) for b in message.content),
        notice_form=found,
        cause=cause,
        usage=CallUsage.from_json(raw) if isinstance(raw, dict) else None,
        strip=strip_text(message.metadata.extra.get(STRIP_KEY)),
    )


def _calls(line: Line) -> bool:
    return line.form == "assistant" and any(p.what == "call" for p in line.parts)


def build_view(lines: Iterable[Line]) -> TranscriptView:
    """Group lines into entries (a tool round joined to its results) and sum each turn."""
    entries: list[Entry] = []
    turns: list[TurnUsage] = []
    opener: int | None = None
    calls, usage = 0, CallUsage()
    for line in lines:
        if line.form == "user":
            if opener is not None or calls:
                turns.append(TurnUsage(len(turns) + 1, opener, calls, usage))
            opener, calls, usage = line.sequence, 0, CallUsage()
        if line.form == "assistant":
            calls += 1
            usage = usage + (line.usage or CallUsage())
        last = entries[-1] if entries else None
        if line.form == "results" and isinstance(last, Round) and last.open:
            entries[-1] = Round(last.call, line)
        elif _calls(line):
            entries.append(Round(line, None))
        else:
            entries.append(line)
    if opener is not None or calls:
        turns.append(TurnUsage(len(turns) + 1, opener, calls, usage))
    return TranscriptView(tuple(entries), tuple(turns))
