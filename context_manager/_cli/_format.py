"""How the command line shows messages: pure functions from stored records to text and JSON.

Invariant: nothing printed here carries a control character from stored text (an escape sequence
in a reply can neither restyle the terminal nor fake a line), and a thinking block is shown only as
a short marker, never with its text or whole signature.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

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
    REASONING_LOSS_KIND,
    StoredMessage,
)
from context_manager._model._messages import (
    LineForm as LineForm,  # re-exported: the command line's tally reads it from here
)
from context_manager._model._messages import (
    line_form as line_form,
)

SIGNATURE_TAIL = 4
"""Signature characters a marker shows: enough to tell blocks apart, far too few to reuse one."""

PREVIEW_CHARS = 120
"""Tool inputs and results are cut to this in readable output; ``--json`` keeps text whole."""

ELLIPSIS = "…"

BOLD_YELLOW = "1;33"
DIM = "2"
CYAN = "36"

_CAUSE = re.compile(r", because your (.+?) changed\.")


def clean(text: str) -> str:
    """``text`` with every control character but newline shown as an escape (``\\x1b``)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append("    ")
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line (whitespace runs folded), cut to ``limit`` with an ellipsis."""
    folded = " ".join(clean(text).split())
    return folded if len(folded) <= limit else folded[: limit - 1] + ELLIPSIS


def plural(count: int, word: str) -> str:
    """``1 reply``, ``2 replies``, ``0 tool calls``."""
    if count == 1:
        return f"1 {word}"
    if word.endswith("y") and word[-2] not in "aeiou":
        return f"{count} {word[:-1]}ies"
    return f"{count} {word}s"


def style(text: str, code: str, color: bool) -> str:
    """``text`` wrapped in the ANSI ``code`` when ``color`` (stdout is a terminal), else as is."""
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def thinking_marker(block: ThinkingBlock | RedactedThinkingBlock) -> str:
    """``⟨thinking, signed …a1b2⟩``: the block's kind and its signature's last characters."""
    if isinstance(block, RedactedThinkingBlock):
        kind, signature = "redacted thinking", block.data
    else:
        kind, signature = "thinking", block.signature
    if not signature:
        return f"⟨{kind}, unsigned⟩"
    tail = signature.rstrip("=")[-SIGNATURE_TAIL:]  # base64 padding tells no blocks apart
    return f"⟨{kind}, signed {ELLIPSIS}{clean(tail)}⟩"


def describe_block(block: Block) -> str:
    """One block as readable text (a text block whole, anything else as a short marker)."""
    if isinstance(block, TextBlock):
        return clean(block.text)
    if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
        return thinking_marker(block)
    if isinstance(block, ToolUseBlock):
        arguments = json.dumps(block.input, ensure_ascii=False, separators=(",", ":"))
        return f"→ {clean(block.name)}({preview(arguments)})"
    if isinstance(block, ToolResultBlock):
        return f"← {'error: ' if block.is_error else ''}{preview(_result_text(block))}"
    if isinstance(block, ImageBlock):
        return "⟨image⟩"
    if isinstance(block, UnknownBlock):
        return _unknown(block)
    return f"⟨{type(block).__name__}⟩"  # pragma: no cover - every block type is listed above


def _unknown(block: UnknownBlock) -> str:
    """A block this library does not model; a tool change names its tool (``+ grep``)."""
    tool = block.raw.get("tool")
    if block.type in ("tool_addition", "tool_removal") and isinstance(tool, dict):
        name = tool.get("name") or (tool.get("definition") or {}).get("name") or "?"
        sign = "+" if block.type == "tool_addition" else "-"
        inline = ", inline" if tool.get("type") == "tool_definition" else ""
        return f"⟨{block.type} {sign} {clean(str(name))}{inline}⟩"
    return f"⟨{clean(str(block.type))}⟩"


def _result_text(block: ToolResultBlock) -> str:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    return " ".join(
        b.text if isinstance(b, TextBlock) else describe_block(b) for b in block.content
    )


def role_label(message: StoredMessage) -> str:
    """The role column: ``user``, ``assistant``, ``system``, or what a notice or summary is."""
    kind = message.metadata.kind
    if kind == REASONING_LOSS_KIND:
        return "notice"
    if kind == "summary":
        return "summary"
    if message.metadata.system_notice:
        return "notice"
    return message.role


def format_message(
    message: StoredMessage, *, color: bool, clock: bool = False, max_lines: int | None = None
) -> list[str]:
    """A message as readable lines: ``#seq role  content``, continuation lines indented.

    ``[reasoning]`` notices are bold yellow when ``color``; ``clock`` adds the time stored;
    ``max_lines`` cuts a long message, saying how many lines were left out.
    """
    when = f"{message.created_at:%Y-%m-%d %H:%M:%S} " if clock else ""
    head = f"#{message.sequence:<4} {when}{role_label(message):<9} "
    body = _body(message)
    lines = body.split("\n")
    if max_lines is not None and len(lines) > max_lines:
        left_out = len(lines) - max_lines + 1
        lines = [*lines[: max_lines - 1], f"{ELLIPSIS} ({left_out} more lines)"]
    if message.metadata.kind == REASONING_LOSS_KIND:
        lines = [style(line, BOLD_YELLOW, color) for line in lines]
    indent = " " * len(head)
    return [style(head, DIM, color) + lines[0], *(indent + line for line in lines[1:])]


def _body(message: StoredMessage) -> str:
    """The message's blocks described; a compaction block as a marker with its coverage."""
    covers = message.metadata.extra.get("covers_upto")
    if message.metadata.kind == "compaction" and isinstance(covers, int):
        return f"⟨compaction: a server summary of everything up to #{covers}⟩"
    return " ".join(describe_block(b) for b in message.content) or "⟨empty⟩"


def message_text(message: StoredMessage) -> str:
    """The message's text blocks joined by newlines (``""`` when it has none)."""
    return "\n".join(b.text for b in message.content if isinstance(b, TextBlock))


def message_record(message: StoredMessage, branch: str) -> dict[str, Any]:
    """The ``transcript --json`` object for one message (``branch``: where it was written).

    ``text`` is the message's text blocks, joined (``""`` when it has none: nothing is made up
    for a tool call); ``summary`` describes the tool calls and results of a message with no
    text (``None`` otherwise).
    """
    return {
        "id": message.id,
        "sequence": message.sequence,
        "branch": branch,
        "role": message.role,
        "kind": message.metadata.kind,
        "target": message.metadata.target,
        "text": message_text(message),
        "summary": None if message_text(message) else (_described(message) or None),
        "blocks": [block_type(b) for b in message.content],
        "created_at": message.created_at.isoformat(),
    }


def _described(message: StoredMessage) -> str:
    """A message with no text, described in short: its tool calls and results (``--json``)."""
    parts = []
    for block in message.content:
        if isinstance(block, ToolUseBlock):
            parts.append(f"called {clean(block.name)}")
        elif isinstance(block, ToolResultBlock):
            label = "error result" if block.is_error else "result"
            parts.append(f"{label}: {preview(_result_text(block))}")
    return "; ".join(parts)


def block_type(block: Block) -> str:
    """The block's wire ``type``."""
    if isinstance(block, UnknownBlock):
        return str(block.type)
    names: dict[type, str] = {
        TextBlock: "text",
        ThinkingBlock: "thinking",
        RedactedThinkingBlock: "redacted_thinking",
        ToolUseBlock: "tool_use",
        ToolResultBlock: "tool_result",
        ImageBlock: "image",
    }
    return names.get(type(block), type(block).__name__)


def line_cause(text: str) -> str | None:
    """The cause a head-form line names (``tools``, ``system text and model``...), if any."""
    found = _CAUSE.search(text)
    return found[1] if found else None


def table(rows: Iterable[tuple[str, ...]], header: tuple[str, ...]) -> list[str]:
    """Rows as aligned columns under ``header`` (the last column right-aligned)."""
    body = [header, *rows]
    widths = [max(len(row[i]) for row in body) for i in range(len(header))]
    lines = []
    for row in body:
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, row[-1].rjust(widths[-1])]))
    return lines


SUMMARY_QUOTES = 3
"""User requests a command-line fold summary quotes: the latest few say what the work is."""


def fold_summary(messages: Iterable[StoredMessage]) -> str:
    """The command line's ``Fold`` summarizer: counts, and the latest user requests quoted."""
    covered = list(messages)
    asked = [
        preview(text, 80)
        for m in covered
        if m.role == "user" and not m.metadata.system_notice and m.metadata.kind is None
        for text in [message_text(m)]
        if text
    ]
    replies = sum(1 for m in covered if m.role == "assistant")
    calls = sum(1 for m in covered for b in m.content if isinstance(b, ToolUseBlock))
    quoted = "; ".join(f'"{q}"' for q in asked[-SUMMARY_QUOTES:]) or "nothing in words"
    return (
        f"{plural(len(covered), 'earlier message')} ({plural(replies, 'reply')}, "
        f"{plural(calls, 'tool call')}) folded. "
        f"The latest requests: {quoted}."
    )
