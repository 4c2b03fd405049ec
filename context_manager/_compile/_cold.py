"""Finding a window's start from the newest message backwards (a cold render), O(window).

Pure apart from its store reads: where the newest reply's window started when that still fits,
else a jump (``jump_anchor``) from the newest spans.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_manager._model._content import ToolUseBlock, block_to_wire
from context_manager._model._messages import StoredMessage
from context_manager._model._stamps import Stamp
from context_manager._store._protocol import Lineage

from ._fold import SUMMARY_KIND, answers_tools
from ._host import CompileHost
from ._render import Span, is_clean_start
from ._selection import jump_anchor
from ._strategies import Window

READ_CHUNK = 512
"""Messages read per step when finding a window's start from the newest backwards."""


def cold_anchor(m: CompileHost, lineage: Lineage, base: int, limit: tuple[int, int]) -> int:
    """A window start found from the newest message backwards, reading O(window).

    ``limit`` is the compile's ``(target, cap)`` (a ``Window``'s, a budget's, or the lower);
    a history from ``base`` that fits the cap starts at ``base``. A stored summary is not a
    start: what it does not cover starts at ``base``. Otherwise the window starts where the
    newest reply's window started when that still fits (``_made_at``), else it jumps.
    """
    cap = max(limit[1], 1)
    spans: list[Span] = []
    tail = 0
    upto: int | None = None
    newest_reply: StoredMessage | None = None
    answered = True  # every message after the newest reply answers its tool calls
    while tail <= cap:
        chunk = m.store.read(m.namespace, lineage, upto=upto, limit=READ_CHUNK, newest_first=True)
        chunk = [msg for msg in chunk if msg.sequence >= base]
        if not chunk:
            break
        upto = chunk[-1].sequence - 1
        for msg in chunk:
            if newest_reply is None:
                if msg.role == "assistant":
                    newest_reply = msg
                elif msg.role == "user":
                    answered = answered and answers_tools(msg)
            tokens = m.estimator(
                {"role": msg.role, "content": [block_to_wire(b) for b in msg.content]}
            )
            tail += tokens
            if msg.metadata.kind == SUMMARY_KIND:
                continue  # rendered first whatever the start: never a start itself
            spans.append(Span(msg.sequence, tokens, is_clean_start(msg)))
        if len(chunk) < READ_CHUNK:
            break
    if tail <= cap:
        return base
    started = made_at(m, newest_reply, spans, base, _start_cap(m, newest_reply, answered, cap))
    if started is not None:
        return started
    anchor = jump_anchor(spans[::-1], limit[0])
    return anchor if anchor is not None else base


def _start_cap(
    m: CompileHost, newest_reply: StoredMessage | None, answered: bool, cap: int
) -> int | None:
    """The cap a start where the newest reply was made must fit: none for an open round (it
    goes out as recorded) or when the compile sheds before jumping (SPEC 7: start where the
    newest reply was made, as the branch that made it would, shed, and jump only if that is
    not enough; issue 28 item 2)."""
    open_round = (
        newest_reply is not None
        and answered
        and any(isinstance(b, ToolUseBlock) for b in newest_reply.content)
    )
    return None if open_round or sheds(m) else cap


def sheds(m: CompileHost) -> bool:
    """Whether pressure may shed thinking (binding on, and the strategy allows it)."""
    strategy = m.strategy
    return m.binding.binds and (not isinstance(strategy, Window) or strategy.shed_thinking)


def open_round_start(m: CompileHost, lineage: Lineage, base: int) -> int | None:
    """Where the newest reply's window started when its tool round is open, else ``None``.
    One small read and one stamp read."""
    newest = m.store.read(m.namespace, lineage, limit=READ_CHUNK, newest_first=True)
    answered = True
    for message in newest:
        if message.sequence < base:
            break
        if message.role == "assistant":
            if answered and any(isinstance(b, ToolUseBlock) for b in message.content):
                return made_at(m, message, (), base, None)
            return None
        if message.role == "user":
            answered = answered and answers_tools(message)
    return None


def made_at(
    m: CompileHost, reply: StoredMessage | None, spans: Sequence[Span], base: int, cap: int | None
) -> int | None:
    """Where ``reply``'s window started (its stamp's ``start``), when that is a clean
    start at or after ``base`` and the tail from it fits ``cap`` (``None``: an open round's
    reply, which goes out as recorded, provider rule 6: a window does not jump mid-round,
    so it starts where the reply was made whatever the cap; shedding still applies). A
    branch with no window start of its own (made at an earlier point, ``branch_at``) then
    starts where its newest reply was made, so that reply's thinking stays valid.
    ``spans``: newest first. One stamp read."""
    if reply is None:
        return None
    stamp = m.store.stamps(m.namespace, [reply.id]).get(reply.id)
    start = stamp.start if isinstance(stamp, Stamp) else None
    if start is None or not base <= start <= reply.sequence:
        return None
    if cap is None:
        return start
    tail = 0
    for span in spans:
        if span.sequence < start:
            break
        tail += span.tokens
    clean = any(span.sequence == start and span.clean for span in spans)
    return start if clean and tail <= cap else None
