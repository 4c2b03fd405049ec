"""The open tool loop (provider rule 6): the latest assistant message's thinking must come back as
the simulator produced it.

``IssuedReplies`` remembers, per tool-use id, the signed blocks of the replies that made the call
(bounded, oldest forgotten first; an id a later round uses again keeps its last ``PER_ID`` replies,
so a request checked afterwards, ``Simulator.verify``, is judged against the reply it answered). A
request whose last conversational message is a user message answering tool calls of the assistant
turn right before it is checked: one remembered reply's signed blocks per answered call must
appear in that turn unchanged, in order and together. Not thread-safe on its own: ``Simulator``
holds its lock around every use. Invariant (``_check``): at most ``capacity`` ids, each with one
to ``PER_ID`` non-empty replies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._api import SIGNED_TYPES
from ._errors import InvalidRequest
from ._verify import content_blocks, signature_of

DEFAULT_CAPACITY = 10_000
"""Tool-use ids remembered; a reply older than that is no longer checked."""

PER_ID = 8
"""Replies remembered under one tool-use id (a history may reuse an id round after round)."""

Signed = tuple[str, str]
"""A signed block as compared: its type and signature (or redacted ``data``)."""


def modified(i: int, j: int) -> InvalidRequest:
    """The API's 400 for altered thinking in the latest assistant message (provider rule 6)."""
    return InvalidRequest(
        f"messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest "
        "assistant message cannot be modified. These blocks must remain as they were in the "
        "original response."
    )


def _signed(blocks: Iterable[Any]) -> tuple[Signed, ...]:
    return tuple(
        (str(b["type"]), signature_of(b))
        for b in blocks
        if isinstance(b, Mapping) and b.get("type") in SIGNED_TYPES
    )


def _open_turn(messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], set[str]] | None:
    """The latest assistant turn's message indices and the tool-use ids the final user message
    answers, when the conversation is in an open tool loop; else ``None``."""
    conversational = [i for i, m in enumerate(messages) if m.get("role") != "system"]
    if not conversational or messages[conversational[-1]].get("role") != "user":
        return None
    last_user = conversational[-1]
    answered = {
        str(b.get("tool_use_id"))
        for b in content_blocks(messages[last_user].get("content"))
        if isinstance(b, Mapping) and b.get("type") == "tool_result"
    }
    if not answered:
        return None
    turn: list[int] = []
    for i in reversed(conversational[:-1]):
        if messages[i].get("role") != "assistant":
            break
        turn.insert(0, i)
    return (turn, answered) if turn else None


@attrs.define
class IssuedReplies:
    """The signed blocks of recent replies that called tools, by tool-use id."""

    capacity: int = DEFAULT_CAPACITY
    _by_tool: dict[str, tuple[tuple[Signed, ...], ...]] = attrs.field(factory=dict)

    def remember(self, content: Sequence[Mapping[str, Any]]) -> None:
        """Record a reply the simulator produced (only replies that call tools matter)."""
        signed = _signed(content)
        if not signed:
            return
        for block in content:
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                earlier = self._by_tool.pop(block["id"], ())
                kept = tuple(reply for reply in earlier if reply != signed)
                self._by_tool[block["id"]] = (*kept, signed)[-PER_ID:]
        while len(self._by_tool) > self.capacity:
            del self._by_tool[next(iter(self._by_tool))]

    def check(self, body: Mapping[str, Any]) -> None:
        """Refuse a request whose open tool loop's assistant turn had its thinking altered.

        Raises:
            InvalidRequest: a remembered block is missing, edited or out of place; the path
                names the assistant message and the place it was expected.
        """
        messages = body.get("messages")
        if not isinstance(messages, list):
            return
        found = _open_turn(messages)
        if found is None:
            return
        turn, answered = found
        located = [
            (i, j, (str(b["type"]), signature_of(b)))
            for i in turn
            for j, b in enumerate(content_blocks(messages[i].get("content")))
            if isinstance(b, Mapping) and b.get("type") in SIGNED_TYPES
        ]
        sent = [signed for _, _, signed in located]
        for i in turn:
            for block in content_blocks(messages[i].get("content")):
                if not isinstance(block, Mapping) or block.get("type") != "tool_use":
                    continue
                tool_id = block.get("id")
                if tool_id not in answered:
                    continue
                replies = self._by_tool.get(str(tool_id))
                if not replies or any(_sent_whole(sent, reply) for reply in replies):
                    continue
                start = _start(sent, replies[-1])
                at = located[max(start, 0)][:2] if located else (i, 0)
                raise modified(*at)

    def _check(self) -> None:
        assert len(self._by_tool) <= self.capacity
        assert all(0 < len(replies) <= PER_ID for replies in self._by_tool.values())
        assert all(all(reply) for replies in self._by_tool.values() for reply in replies)


def _start(sent: Sequence[Signed], reply: Sequence[Signed]) -> int:
    """Where ``reply``'s first signed block stands in ``sent`` (-1: nowhere)."""
    return sent.index(reply[0]) if reply[0] in sent else -1


def _sent_whole(sent: Sequence[Signed], reply: Sequence[Signed]) -> bool:
    """Whether ``reply``'s signed blocks stand in ``sent`` unchanged, in order and together."""
    start = _start(sent, reply)
    return start >= 0 and tuple(sent[start : start + len(reply)]) == tuple(reply)
