"""The ``[reasoning]`` line's words (SPEC 9): pure functions, no I/O.

Invariant: every line is one line, starts with ``[reasoning] `` and holds that marker nowhere
else, and a quoted reply start never closes its own quotes, whatever the reply's text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Literal, TypeAlias

from context_manager import (
    Block,
    InvalidValue,
    StoredMessage,
    TextBlock,
    ToolUseBlock,
    UnknownBlock,
)

LineForm: TypeAlias = Literal["head", "count", "at_least"]
"""``head``: a head change; ``count``: a first compile, a fold, drops; ``at_least``: drops
with some blocks unplaced."""

LINE_FORMS: tuple[LineForm, ...] = ("head", "count", "at_least")

MARKER = "[reasoning]"
"""What every line starts with, and what no reply text may forge."""

QUOTE_LIMIT = 80
"""A quoted start is cut to this many characters: enough to recognise a reply, short enough
that the line stays one readable sentence."""

ELLIPSIS = "…"
"""Ends a cut start, inside the limit, so the reader sees the words go on."""

TOOL_NAME_LIMIT = 128
"""No tool name the Messages API accepts is longer, so only a forged name is ever cut."""

_SCAN_MARGIN = 16
"""Cleaned characters kept past the limit while scanning a long text in growing prefixes:
more than a defanged marker's length (13), so the first ``QUOTE_LIMIT`` never change."""

_REMOVED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
"""Control, format (bidi overrides, zero-width) and lone surrogate characters: removed, as
they can hide text or reorder what the reader sees. Control whitespace is folded instead."""

_FORGED_MARKER = re.compile(r"[\[［⟦【〔〖]\s?(reasoning)\s?[\]］⟧】〕〗]", re.IGNORECASE)
"""``[reasoning]`` inside reply text, in any case, spaced or with full-width brackets."""

_NOT_TOOL_NAME = re.compile(r"[^A-Za-z0-9_.:-]+")

_TOOL_CALL_TYPES = frozenset({"server_tool_use", "mcp_tool_use"})
"""Tool calls this library keeps as ``UnknownBlock``; their ``name`` names a reply too."""

_CAUSE_WORDS = {"system": "system text", "tools": "tools", "model": "model"}
"""What each bound head component is called in the cause clause, in the order it is listed.
``settings`` is absent: a settings change alone is left uncaused."""

_WORDS = "Their words are still here."
_REREAD_EARLIER = "Re-read before relying on an earlier decision."
_REREAD_SINCE = "Re-read before relying on a decision made since then."
_LOST = "Some of your earlier reasoning is no longer in your context:"


def reasoning_loss_line(
    agent: str,
    form: LineForm,
    *,
    reply: StoredMessage | Iterable[Block] | None = None,
    count: int = 1,
    this_turn: bool = False,
    changed: Sequence[str] = (),
) -> str:
    """The ``[reasoning]`` line for one loss, exactly as SPEC 9 words it.

    Args:
        agent: the agent's name (folded to one line like reply text).
        form: ``"head"`` names the newest reply lost; ``"count"`` counts replies and names
            the earliest; ``"at_least"`` bounds nothing and names nothing.
        reply: the reply to name (``name_reply``). ``None``, or a reply with neither text
            nor a tool call, gives the unnamed wording: ``your earlier replies`` in the head
            form, no ``the first being`` in the count form (then ``an earlier decision``).
        count: how many replies (count and at-least forms); ``1`` is written ``one``.
        this_turn: any reply lost is one of this turn's steps (head and count forms).
        changed: for the head form, ``ThinkingStrip.changed``; ``system``, ``tools`` and
            ``model`` make the cause clause, anything else (``settings``) none.

    Returns:
        One line, no newline.

    Raises:
        ValueError: an unknown form, a count below 1, or an option the form does not take
            (a reply or this_turn for at-least, a cause for count or at-least).
    """
    _check_line(form, count, changed, reply, this_turn)
    prefix = f"{MARKER} {_sanitize(agent)}: "
    name = name_reply(reply) if reply is not None else None
    if form == "head":
        turn = ", this turn's earlier steps among them," if this_turn else ""
        whose = f"your replies up to {name}" if name else "your earlier replies"
        return (
            f"{prefix}The reasoning behind {whose}{turn} is no longer in your context"
            f"{cause_clause(changed)}. {_WORDS} {_REREAD_EARLIER}"
        )
    if form == "at_least":
        body = f"the reasoning behind at least {_number(count)} of your replies."
        return f"{prefix}{_LOST} {body} {_WORDS} {_REREAD_EARLIER}"
    reread = _REREAD_SINCE if name else _REREAD_EARLIER
    return f"{prefix}{_LOST} {_count_body(count, name, this_turn)} {_WORDS} {reread}"


def _check_line(
    form: str,
    count: object,
    changed: Sequence[str],
    reply: object,
    this_turn: bool,
) -> None:
    """Raise ``InvalidValue`` for options ``reasoning_loss_line``'s form does not take."""
    if form not in LINE_FORMS:
        raise InvalidValue(f"unknown line form {form!r}; expected one of {', '.join(LINE_FORMS)}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidValue(f"count must be an int of at least 1, got {count!r}")
    if form != "head" and changed:
        raise InvalidValue(f"a cause is named only in the head form, got changed={changed!r}")
    if form == "at_least" and (reply is not None or this_turn):
        raise InvalidValue("the at-least form names no reply and has no this-turn clause")


def _count_body(count: int, name: str | None, this_turn: bool) -> str:
    """The count form's middle: how many replies, the first named, this turn's clause."""
    if count == 1:
        turn = ", one of this turn's steps" if this_turn else ""
        named = f", {name}" if name else ""
        return f"the reasoning behind one of your replies{named}{turn}."
    turn = ", this turn's earlier steps among them" if this_turn else ""
    named = f", the first being {name}" if name else ""
    return f"the reasoning behind {count} of your replies{named}{turn}."


def cause_clause(changed: Sequence[str]) -> str:
    """``, because your X changed`` for the bound components in ``changed``, else ``""``.

    ``X`` lists ``system text``, ``tools``, ``model`` in that order, joined ``A and B`` or
    ``A, B and C``; ``settings`` and unknown names add nothing.
    """
    words = [word for part, word in _CAUSE_WORDS.items() if part in changed]
    if not words:
        return ""
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return f", because your {listed} changed"


def name_reply(message: StoredMessage | Iterable[Block]) -> str | None:
    """How a line names a reply, or ``None`` when it has neither text nor a tool call.

    ``the one beginning "Q"`` with ``Q`` its first text (see ``quoted_start``), else
    ``the one that called NAME`` with its first tool call's name limited to
    ``[A-Za-z0-9_.:-]``.

    Args:
        message: a stored reply, or its blocks.
    """
    blocks = message.content if isinstance(message, StoredMessage) else tuple(message)
    for block in blocks:
        if isinstance(block, TextBlock):
            start = quoted_start(block.text)
            if start:
                return f'the one beginning "{start}"'
    for block in blocks:
        tool = _tool_name(block)
        if tool:
            return f"the one that called {tool}"
    return None


def quoted_start(text: str) -> str:
    """``text`` made safe to quote in a line.

    Control and format characters removed, whitespace runs (line breaks included) folded to
    one space, ``"`` replaced by ``'``, a ``[reasoning]`` marker defanged to ``(reasoning)``,
    and cut to ``QUOTE_LIMIT`` characters, a cut ending with ``…``. Reads only as much of a
    long text as it needs.
    """
    size = 4 * QUOTE_LIMIT
    while True:
        cleaned = _sanitize(text[:size])
        if len(cleaned) > QUOTE_LIMIT + _SCAN_MARGIN or size >= len(text):
            break
        size *= 4
    if len(cleaned) > QUOTE_LIMIT:
        cleaned = cleaned[: QUOTE_LIMIT - len(ELLIPSIS)] + ELLIPSIS
    return cleaned


def _sanitize(text: str) -> str:
    if not text.isprintable():
        text = "".join(
            ch
            for ch in text
            if ch.isprintable()
            or ch.isspace()
            or unicodedata.category(ch) not in _REMOVED_CATEGORIES
        )
    folded = " ".join(text.split()).replace('"', "'")
    return _FORGED_MARKER.sub(r"(\1)", folded)


def _tool_name(block: Block) -> str:
    if isinstance(block, ToolUseBlock):
        raw: object = block.name
    elif isinstance(block, UnknownBlock) and block.type in _TOOL_CALL_TYPES:
        raw = block.raw.get("name")
    else:
        return ""
    if not isinstance(raw, str):
        return ""
    return _NOT_TOOL_NAME.sub("", raw)[:TOOL_NAME_LIMIT]


def _number(count: int) -> str:
    return "one" if count == 1 else str(count)
