"""Compile scenarios, each a series of repetitions over a ``History``; medians are taken later.

Only ``cm.compile`` (or the baseline's rebuild) is inside the clock; storing the user message,
the reply and the tool results around it is not. Every scenario leaves the history usable for
the next (worst cases are dry compiles, so they change nothing stored).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_manager import CompileResult, Fold, Head, StoredMessage
from context_manager._compile._fold import SUMMARY_HEADING

from ._baseline import full_recompile
from ._history import History
from ._timing import settle, timed

WARMUP = 1
"""Untimed repetitions before each series (first-use caches, lazy imports)."""

SUMMARY_TEXT = "The on-call work so far: the deploy was rolled back and the queue drained."
"""What the fold scenario's summarizer returns (a real host would call a model here)."""


def stored_in_window(result: CompileResult) -> int:
    """How many stored messages a compile rendered (merged messages counted one by one)."""
    return sum(len(entry.sources) for entry in result.provenance)


def steady_step(history: History) -> float:
    """One steady compile: exactly one new user message since the last compile.

    Stores a user message, times the compile, records a reply to it and compiles once more
    untimed, so the next step's compile again sees one new message.
    """
    history.user()
    seconds, result = timed(lambda: history.cm.compile(history.head))
    history.reply(result, tool=False)
    history.cm.compile(history.head)
    return seconds


def tool_loop_turn(history: History, *, calls: int) -> float:
    """Total compile time of one turn of ``calls`` model calls.

    A turn: a user message, then per call: compile (timed), record a reply calling a tool,
    store its result; the last call answers without a tool and ends the turn.
    """
    history.user()
    total = 0.0
    for call in range(calls):
        seconds, result = timed(lambda: history.cm.compile(history.head))
        total += seconds
        last = call == calls - 1
        called = history.reply(result, tool=not last)
        if not last:
            history.results(called)
    return total


def steady_and_tool_loop(
    probes: Mapping[int, History],
    repeats: int,
    *,
    loop_size: int,
    loop_repeats: int,
    calls: int,
) -> tuple[dict[int, list[float]], list[float]]:
    """Steady compiles at every size, and tool-loop turns at ``loop_size``, interleaved.

    Each round takes one steady step at every size (in rotating order), and every few rounds a
    tool-loop turn, so a change in the machine's load during the run falls on every size and on
    both sides of each ratio alike.

    Returns:
        ``({size: steady samples}, tool-loop turn samples)``.
    """
    sizes = sorted(probes)
    for size in sizes:
        for _ in range(WARMUP):
            steady_step(probes[size])
    tool_loop_turn(probes[loop_size], calls=calls)
    settle()
    steady: dict[int, list[float]] = {size: [] for size in sizes}
    turns: list[float] = []
    stride = max(1, repeats // max(1, loop_repeats))
    for index in range(repeats):
        shift = index % len(sizes)
        for size in sizes[shift:] + sizes[:shift]:
            steady[size].append(steady_step(probes[size]))
        if index % stride == 0 and len(turns) < loop_repeats:
            turns.append(tool_loop_turn(probes[loop_size], calls=calls))
    while len(turns) < loop_repeats:
        turns.append(tool_loop_turn(probes[loop_size], calls=calls))
    return steady, turns


def baseline_compile(history: History, repeats: int, *, window_tokens: int) -> list[float]:
    """The full-recompile baseline's time on the same history, same window, same head."""
    settle()
    samples: list[float] = []
    for _ in range(repeats):
        seconds, _ = timed(
            lambda: full_recompile(history.cm, history.head, window_tokens=window_tokens)
        )
        samples.append(seconds)
    return samples


def changed_head(head: Head) -> Head:
    """``head`` with one more tool: every block signed under ``head`` no longer verifies."""
    extra = {
        "name": "page_oncall",
        "description": "Page the on-call engineer.",
        "input_schema": {"type": "object", "properties": {"why": {"type": "string"}}},
    }
    return attrs.evolve(head, tools=[*head.tools, extra])


def head_change_compile(history: History, repeats: int) -> list[float]:
    """A compile under a changed head: every reply's thinking in the window judged again.

    Dry compiles, so every repetition starts from the same state; a committing one does the
    same work plus one transaction writing the releases.
    """
    settle()
    other = changed_head(history.head)
    samples: list[float] = []
    for index in range(WARMUP + repeats):
        seconds, result = timed(lambda: history.cm.compile(other, dry_run=True))
        if result.thinking_strip is not None and result.thinking_strip.cause != "head":
            raise RuntimeError(f"a head change stripped for {result.thinking_strip.cause!r}")
        if index >= WARMUP:
            samples.append(seconds)
    return samples


def fold_compile(history: History, repeats: int, *, keep_tokens: int) -> list[float]:
    """A compile that folds: the whole rendered tail is re-rendered, summarised and re-chained.

    ``history`` should hold about a window of messages under a non-folding strategy; the
    strategy is switched to a ``Fold`` that triggers at once. Dry, like the head change.
    """

    def summarize(covered: Sequence[StoredMessage]) -> str:
        return SUMMARY_TEXT

    settle()
    history.cm.strategy = Fold(summarize, trigger_tokens=1, keep_tokens=keep_tokens)
    samples: list[float] = []
    for index in range(WARMUP + repeats):
        seconds, result = timed(lambda: history.cm.compile(history.head, dry_run=True))
        if index >= WARMUP:
            samples.append(seconds)
    opening = result.request["messages"][0]["content"][0].get("text", "")
    if not opening.startswith(SUMMARY_HEADING):
        raise RuntimeError("the fold scenario's compile did not fold; give it a longer history")
    return samples


def window_size(history: History) -> dict[str, Any]:
    """The window a steady compile renders now: stored messages and request messages."""
    result = history.cm.compile(history.head, dry_run=True)
    return {
        "stored_messages": stored_in_window(result),
        "request_messages": len(result.request["messages"]),
        "tokens": result.tokens,
    }


def evicted_compile(history: History, repeats: int) -> list[float]:
    """The first compile after the branch's cached render was dropped: the window re-rendered.

    Each repetition drops the manager's cache for the branch (as the per-process bound does for
    an idle branch), then times one committing compile with nothing new stored.
    """
    settle()
    cm = history.cm
    samples: list[float] = []
    for index in range(WARMUP + repeats):
        cm.forget_cache(cm.current_branch_key())
        seconds, _ = timed(lambda: cm.compile(history.head))
        if index >= WARMUP:
            samples.append(seconds)
    return samples
