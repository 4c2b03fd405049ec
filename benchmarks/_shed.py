"""Shedding versus the jump-only window: thinking kept under a budget (issue 15).

A thinking-heavy history is grown turn by turn under a ``Window`` whose budget is a third of the
whole history's tokens, once shedding the oldest thinking first (the default) and once with
plain jumps (``shed_thinking=False``). Each grows with a committing compile per turn, as an
agent would; the figures are read from the last compile.
"""

from __future__ import annotations

from typing import Any

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    MemoryStore,
    Window,
    estimate_tokens,
)

THINK_CHARS = 1_600
"""Characters of thinking per reply: thinking dominates the history's tokens."""

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
)

NEWEST = 50
"""``shed_newest_50`` is the share of this many newest replies whose thinking is still sent."""


def _turn(n: int) -> tuple[str, list[dict[str, Any]]]:
    user = f"Question {n}: what does step {n} change?"
    reply = [
        {"type": "thinking", "thinking": f"{n:06d} " + "t" * THINK_CHARS, "signature": f"s{n}"},
        {"type": "text", "text": f"Step {n} changes the parser configuration."},
    ]
    return user, reply


def history_tokens(messages: int) -> int:
    """Tokens of the whole history as rendered with every thinking block."""
    total = 0
    for n in range(messages // 2):
        user, reply = _turn(n)
        total += estimate_tokens({"role": "user", "content": [{"type": "text", "text": user}]})
        total += estimate_tokens({"role": "assistant", "content": reply})
    return total


def _grow(messages: int, window: Window) -> tuple[ContextManager, CompileResult, list[str]]:
    cm = ContextManager.open(MemoryStore(), namespace="shed", strategy=window)
    replies: list[str] = []
    for n in range(messages // 2):
        user, reply = _turn(n)
        cm.add_message("user", user)
        replies.append(cm.record_reply(reply, cm.compile(HEAD)))
    cm.add_message("user", "And now?")
    return cm, cm.compile(HEAD), replies


def _kept(result: CompileResult) -> set[str]:
    return {
        source.message_id
        for entry in result.provenance
        for source in entry.sources
        if source.signatures
    }


def shedding(messages: int = 10_000) -> dict[str, Any]:
    """``shed_kept_blocks``, ``jump_kept_blocks``, ``shed_newest_50`` and ``shed_vs_jump``."""
    budget = history_tokens(messages) // 3
    _, shed, replies = _grow(messages, Window(budget))
    _, jump, _ = _grow(messages, Window(budget, shed_thinking=False))
    shed_kept, jump_kept = _kept(shed), _kept(jump)
    newest = replies[-NEWEST:]
    return {
        "messages": messages,
        "budget_tokens": budget,
        "shed_kept_blocks": len(shed_kept),
        "jump_kept_blocks": len(jump_kept),
        "shed_newest_50": sum(r in shed_kept for r in newest) / len(newest),
        "shed_vs_jump": len(shed_kept) / max(len(jump_kept), 1),
        "shed_tokens": shed.tokens,
        "jump_tokens": jump.tokens,
    }
