"""Selection strategies: which stored messages a compile renders. Frozen configuration only.

``Passthrough`` renders everything; ``Window`` a tail whose start moves in coarse jumps (so the
prefix stays byte-stable between jumps); ``Fold`` replaces older ranges by a stored summary.
The compiler (``_compile``) applies them; these classes hold no state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import attrs

from context_manager._model._checks import attrs_count, attrs_fraction, attrs_positive_int
from context_manager._model._errors import InvalidValue
from context_manager._model._messages import StoredMessage

CHARS_PER_TOKEN = 4
"""The default estimator's ratio: about four characters of JSON per token."""

MESSAGE_OVERHEAD_TOKENS = 4
"""Role and framing per message."""


def estimate_tokens(wire_message: Any) -> int:
    """A fast character-based token estimate of one wire message dict."""
    return _chars(wire_message) // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS


def estimate_from_chars(role: str, block_chars: int) -> int:
    """``estimate_tokens({"role": role, "content": blocks})`` given ``block_chars``, the sum of
    ``wire_chars`` over ``blocks`` (the count is additive: a render keeps each block's)."""
    return (len(role) + len("rolecontent") + block_chars) // CHARS_PER_TOKEN + (
        MESSAGE_OVERHEAD_TOKENS
    )


def wire_chars(value: Any) -> int:
    """The characters ``estimate_tokens`` counts in ``value`` (keys and leaves)."""
    if type(value) is dict and len(value) == 2 and value.get("type") == "text":
        text = value.get("text")
        if type(text) is str:  # the commonest block: "type", "text", "text" and the text
            return _TEXT_BLOCK_CHARS + len(text)
    return _chars(value)


_TEXT_BLOCK_CHARS = len("type") + len("text") + len("text")


def _chars(value: Any) -> int:
    # loops with strings counted inline: most leaves are text (a re-render counts every block)
    if isinstance(value, str):
        return len(value)
    total = 0
    if isinstance(value, dict):
        for k, v in value.items():
            total += len(k) + (len(v) if type(v) is str else _chars(v))
        return total
    if isinstance(value, list | tuple):
        for v in value:
            total += len(v) if type(v) is str else _chars(v)
        return total
    return len(str(value))


Summarizer: TypeAlias = Callable[[Sequence[StoredMessage]], "str | Awaitable[str]"]
"""Turns the messages a fold covers into summary text; sync or async."""


@attrs.frozen
class Passthrough:
    """Render every stored message on the branch."""


@attrs.frozen
class Window:
    """Render a tail of at most ``max_tokens``.

    The start stays put until the tail outgrows ``max_tokens``. With ``shed_thinking`` (the
    default) the oldest sent thinking is then left out first (whole replies, oldest first: every
    later block stays valid, provider rule 4) until the tail is about ``reanchor * max_tokens``;
    only if that is not enough does the start jump forward, at a clean user message (never
    inside a tool round). ``shed_thinking=False`` restores plain jumps.
    """

    max_tokens: int = attrs.field(validator=attrs_positive_int)
    reanchor: float = attrs.field(default=0.5, validator=attrs_fraction)
    shed_thinking: bool = True


@attrs.frozen
class Fold:
    """Replace older messages by a summary once the rendered tail exceeds ``trigger_tokens``.

    The kept tail is whole turns, at most ``keep_tokens`` as sent, and never starts inside a
    tool round; its thinking is stripped (its prefix changed, provider rule 20), so each kept
    reply is weighed without it. A fold made mid-round while thinking is still carried keeps the
    same tail before the open turn and sends that turn's rounds (the in-flight call's results
    among them, each labelled with its call) as text in the turn's user message, so no call
    goes back without its thinking (rule 6). When no whole turn before the open one fits, it
    uses the simple shape: one user message with the summary and the in-flight round's results
    as text, nothing older replayed.
    """

    summarizer: Summarizer
    trigger_tokens: int = attrs.field(validator=attrs_positive_int)
    keep_tokens: int = attrs.field(default=0, validator=attrs_count)


KEEP_TURNS_LIMIT = 64
"""The most replies ``Compact(keep_turns=...)`` keeps after the block."""


def _keep_turns(instance: Any, attribute: Any, value: Any) -> None:
    """1 to ``KEEP_TURNS_LIMIT``: a compaction request is a request already sent, so at least
    its reply is kept (to keep none, fold instead: ``Fold`` summarizes everything)."""
    attrs_positive_int(instance, attribute, value)
    if value > KEEP_TURNS_LIMIT:
        raise InvalidValue(
            f"keep_turns={value}: at most {KEEP_TURNS_LIMIT} replies are kept after a compaction"
            " block; use a smaller keep_turns"
        )


@attrs.frozen
class Compact:
    """On-demand server compaction (provider rules 23-27) once the rendered window passes
    ``trigger_tokens``.

    The compaction request is exactly the ``messages`` of a request already sent, with the
    same anchored ``system`` and ``tools`` and the same model, so the turns after it keep their
    thinking valid (rule 25). ``keep_turns`` is how many of the newest replies (each with the
    tool results and messages after it) stay after the block: the request compacted is the
    one the ``keep_turns``-th newest reply answered, or a newer one when that request no
    longer starts the newest (``compaction_keeps_fewer``); at most 64. The returned block is
    stored byte-exact as its own message (``metadata.kind == "compaction"``) and rendered
    first on every later request. ``instructions`` go to the provider as
    ``compaction.instructions``. ``fallback`` (a ``Fold`` or a ``Window``) is used after a
    model that cannot compact or repeated failures. ``background=True`` (rule 27): the
    runtime sends the compaction request at a turn's end and goes on with the next turns on
    the full history; the block is swapped in before the first call after it arrives.
    """

    trigger_tokens: int = attrs.field(validator=attrs_positive_int)
    keep_turns: int = attrs.field(default=1, validator=_keep_turns, kw_only=True)
    instructions: str | None = attrs.field(default=None, kw_only=True)
    background: bool = attrs.field(default=False, kw_only=True)
    fallback: Window | Fold | None = attrs.field(default=None, kw_only=True)


Strategy: TypeAlias = Passthrough | Window | Fold | Compact
