"""Where a render starts: window anchors and fold cuts. Pure functions over token spans.

A window's start only ever moves forward, in jumps, and only to a clean start (a user message
answering no tool call), so a tool round is never cut and the prefix stays byte-stable between
jumps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._render import Span


def jump_anchor(spans: Sequence[Span], target_tokens: int) -> int | None:
    """The earliest clean span whose tail (itself to the end) fits ``target_tokens``.

    Falls back to the last clean span when none fits; ``None`` when there is no clean span.
    """
    tail = 0
    best: int | None = None
    last_clean: int | None = None
    for span in reversed(spans):
        tail += span.tokens
        if span.clean:
            if last_clean is None:
                last_clean = span.sequence
            if tail <= target_tokens:
                best = span.sequence
    return best if best is not None else last_clean


def required_tokens(spans: Sequence[Span]) -> int:
    """Tokens that must be sent: from the newest clean start to the end."""
    tail = 0
    for span in reversed(spans):
        tail += span.tokens
        if span.clean:
            return tail
    return tail


def fold_cut(
    spans: Sequence[Span], keep_tokens: int, sent: Callable[[Span], int] | None = None
) -> int | None:
    """The sequence the kept tail starts at after a fold (``None``: keep nothing); ``sent``
    gives what a span weighs once folded (its thinking stripped), ``span.tokens`` without it."""
    if keep_tokens <= 0:
        return None
    tail = 0
    cut: int | None = None
    for span in reversed(spans):
        tail += span.tokens if sent is None else sent(span)
        if tail > keep_tokens:
            break
        if span.clean:
            cut = span.sequence
    return cut
