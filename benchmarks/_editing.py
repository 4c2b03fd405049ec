"""Server-side context editing against client clearing (issue #30): a tool-heavy resident session.

One seeded session: each turn a user message, a few tool calls (results of 2-20 kB, drawn
log-uniformly) and an answer; every reply carries a signed thinking block. It runs twice through
the real SDK client against the simulator (prompt cache and rule 29 on), with a ``Fold`` as the
client's own clearing, until that fold first runs (or ``max_turns``):

- ``client``: the ``Fold`` alone: the window fills with tool results and folds early, and the
  replies it folds lose their thinking;
- ``editing``: the same ``Fold`` plus ``ContextEditing(ClearToolUses(...))``: the server clears
  old results in its own copy, the compiler measures the window as edited (so it folds much
  later) and places its breakpoints at the clear points.

Figures: ``editing_kept_share``, thinking blocks still sent (and accepted) on each call whose
clear grew, over those sent on the call before (target 1.0); ``editing_turns_ratio``, turns
before the first fold with editing over without (target >= 3; a lower bound when the editing run
reaches ``max_turns`` first); ``cache_read_share_editing``, the editing run's input read from the
cache (target >= 0.85). ``client_kept_share`` is the same share at the client's fold (no target).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from context_manager import (
    ClearToolUses,
    ContextEditing,
    ContextManager,
    Fold,
    Head,
    SQLiteStore,
    ThinkingBinding,
    ToolResultBlock,
)
from context_manager.simulator import Simulator

from ._history import TOOLS, Words

MODEL = "claude-opus-5-5"
"""A model on which server-side context management never invalidates thinking (rule 29)."""

EDITING_KEYS = ("editing_kept_share", "editing_turns_ratio", "cache_read_share_editing")
"""The report's top-level keys this session adds (issue #30)."""

KEPT_SHARE_TARGET = 1.0
TURNS_RATIO_MIN = 3.0
READ_SHARE_MIN = 0.85


@attrs.frozen
class EditingConfig:
    """The session.

    Attributes:
        fold_tokens: the ``Fold``'s trigger (the window it may reach before folding).
        trigger_tokens: ``ClearToolUses.trigger_tokens``.
        keep: ``ClearToolUses.keep``: tool uses whose results stay.
        clear_at_least: ``ClearToolUses.clear_at_least``.
        mean_calls: tool calls a turn on average (then one answer).
        result_bytes: the smallest and largest tool result.
        system_words: the system prompt's length (a resident agent's instructions).
        max_turns: the editing run stops here if it has not folded yet.
        stop_at_target: stop the editing run at ``TURNS_RATIO_MIN`` times the client's turns.
        seed: fixes the conversation.
    """

    fold_tokens: int = 24_000
    trigger_tokens: int = 10_000
    keep: int = 1
    clear_at_least: int = 4_000
    mean_calls: int = 4
    result_bytes: tuple[int, int] = (2_000, 20_000)
    system_words: int = 2_500
    max_turns: int = 60
    stop_at_target: bool = False
    seed: int = 20_261_202

    @classmethod
    def quick(cls) -> EditingConfig:
        """``--quick``: the editing run stops once it has run ``TURNS_RATIO_MIN`` times the
        client's turns (the ratio is then a lower bound)."""
        return cls(stop_at_target=True)

    @classmethod
    def tiny(cls) -> EditingConfig:
        """The smoke run: toy sizes (figures meaningless)."""
        return cls(
            fold_tokens=6_000,
            trigger_tokens=3_000,
            clear_at_least=500,
            result_bytes=(400, 2_000),
            system_words=200,
            max_turns=6,
            stop_at_target=True,
        )


@attrs.frozen
class RunFigures:
    """One run: the turn of its first fold (``None``: none by ``max_turns``), the kept share
    over its clears (or its fold), and its cache usage."""

    turns: int
    folded: bool
    """The run ended at its first fold (else at ``max_turns``)."""
    kept: int
    before: int
    read: int
    total: int
    calls: int

    @property
    def kept_share(self) -> float:
        return self.kept / self.before if self.before else 1.0

    @property
    def read_share(self) -> float:
        return self.read / self.total if self.total else 0.0


@attrs.define
class _Plan:
    """What the simulated model answers next (the driver sets it before each call)."""

    thinking: str = ""
    call: tuple[str, dict[str, Any]] | None = None
    answer: str = ""

    def script(self, _: dict[str, Any]) -> list[Any]:
        lead = {"type": "thinking", "thinking": self.thinking}
        if self.call is not None:
            return [lead, {"type": "tool_use", "name": self.call[0], "input": self.call[1]}]
        return [lead, self.answer]


def _signatures(call: Any) -> set[str]:
    """Signatures of the thinking blocks a call sent and the simulator kept."""
    dropped = {tuple(check.path) for check in call.dropped}
    return {
        str(block["signature"])
        for i, message in enumerate(call.request["messages"])
        if isinstance(message["content"], list)
        for j, block in enumerate(message["content"])
        if block.get("type") == "thinking" and (i, j) not in dropped
    }


def _result_text(rng: random.Random, words: Words, low: int, high: int) -> str:
    size = int(math.exp(rng.uniform(math.log(low), math.log(high))))
    text = words.text(40, 60)
    return (text + " ") * max(1, size // (len(text) + 1))


def _cleared(call: Any) -> int:
    edits = (call.response.get("context_management") or {}).get("applied_edits") or []
    return sum(int(edit.get("cleared_tool_uses", 0)) for edit in edits)


def run_editing_session(
    config: EditingConfig, path: Path, *, editing: bool, max_turns: int
) -> RunFigures:
    """The session until its first fold (or ``max_turns``), with or without context editing."""
    rng = random.Random(config.seed)
    words = Words(config.seed)
    plan = _Plan()
    sim = Simulator(script=plan.script)
    client = sim.sync_client()
    store = SQLiteStore(path)
    fold = Fold(
        lambda covered: f"Summary of {len(covered)} messages: {words.text(80, 120)}",
        trigger_tokens=config.fold_tokens,
    )
    edits = (
        ContextEditing(
            ClearToolUses(
                trigger_tokens=config.trigger_tokens,
                keep=config.keep,
                clear_at_least=config.clear_at_least,
            )
        )
        if editing
        else None
    )
    cm = ContextManager.open(
        store,
        namespace="ada",
        binding=ThinkingBinding(binds=True, drop_block=True),
        strategy=fold,
        editing=edits,
    )
    head = Head(
        model=MODEL,
        system="You are Ada, the on-call agent. "
        + words.text(config.system_words, config.system_words),
        tools=list(TOOLS),
        settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
    )
    folded_at: int | None = None
    fold_call: int | None = None
    turn = 0
    while turn < max_turns and folded_at is None:
        cm.add_message("user", f"Turn {turn}: {words.text(8, 60)}")
        calls = max(1, round(rng.expovariate(1 / config.mean_calls)))
        for call in range(calls + 1):
            plan.thinking = words.text(20, 80)
            plan.answer = words.text(10, 60)
            plan.call = (
                None
                if call == calls
                else (str(rng.choice(TOOLS)["name"]), {"query": words.text(2, 6)})
            )
            result = cm.compile(head)
            if result.folded and folded_at is None:
                folded_at, fold_call = turn, len(sim.calls)
            message = client.beta.messages.create(**result.request)
            cm.record_reply(message, result)
            cm.place_drops(message, result)
            uses = [block.id for block in message.content if block.type == "tool_use"]
            if uses:
                low, high = config.result_bytes
                cm.add_message(
                    "user",
                    [
                        ToolResultBlock(tool_use_id=u, content=_result_text(rng, words, low, high))
                        for u in uses
                    ],
                )
        turn += 1
    store.close()
    # the editing run's kept share is over its clears alone: its fold ends the run
    return _figures(
        sim,
        turn if folded_at is None else folded_at,
        folded_at is not None,
        fold_call if not editing else None,
    )


def _figures(sim: Simulator, turns: int, folded: bool, fold_call: int | None) -> RunFigures:
    """Kept share over the calls whose clear grew (and, for the client, its fold's call)."""
    calls = sim.calls
    kept = before = 0
    for k in range(1, len(calls)):
        previous, call = calls[k - 1], calls[k]
        if _cleared(call) > _cleared(previous) or k == fold_call:
            sent_before = _signatures(previous)
            kept += len(sent_before & _signatures(call))
            before += len(sent_before)
    usage = [c.response["usage"] for c in calls if c.status == 200]
    read = sum(u["cache_read_input_tokens"] for u in usage)
    total = read + sum(u["cache_creation_input_tokens"] + u["input_tokens"] for u in usage)
    return RunFigures(turns, folded, kept, before, read, total, len(usage))


def editing_figures(config: EditingConfig, workdir: Path) -> dict[str, Any]:
    """Both runs and the figures (the report's ``editing`` part)."""
    client = run_editing_session(
        config, workdir / "editing-client.db", editing=False, max_turns=config.max_turns
    )
    cap = config.max_turns
    if config.stop_at_target and client.folded:
        cap = min(cap, math.ceil(TURNS_RATIO_MIN * client.turns))
    editing = run_editing_session(
        config, workdir / "editing-server.db", editing=True, max_turns=cap
    )
    ratio = editing.turns / client.turns if client.turns else 0.0
    return {
        "editing_kept_share": editing.kept_share,
        "editing_turns_ratio": ratio,
        "cache_read_share_editing": editing.read_share,
        "client_kept_share": client.kept_share,
        "cache_read_share_client": client.read_share,
        "turns_before_fold": {"editing": editing.turns, "client": client.turns},
        "editing_folded": editing.folded,
        "calls": {"editing": editing.calls, "client": client.calls},
        "config": attrs.asdict(config),
    }


def add_editing(report: dict[str, Any], figures: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` with the editing figures as top-level keys and in ``targets``."""
    report["editing_kept_share"] = figures["editing_kept_share"]
    report["editing_turns_ratio"] = figures["editing_turns_ratio"]
    report["cache_read_share_editing"] = figures["cache_read_share_editing"]
    targets = report.setdefault("targets", {})
    targets["editing_kept_share"] = {
        "limit": f"== {KEPT_SHARE_TARGET}",
        "met": figures["editing_kept_share"] == KEPT_SHARE_TARGET,
    }
    targets["editing_turns_ratio"] = {
        "limit": f">= {TURNS_RATIO_MIN:g}",
        "met": figures["editing_turns_ratio"] >= TURNS_RATIO_MIN,
    }
    targets["cache_read_share_editing"] = {
        "limit": f">= {READ_SHARE_MIN:g}",
        "met": figures["cache_read_share_editing"] >= READ_SHARE_MIN,
    }
    report.setdefault("details", {})["editing"] = dict(figures)
    return report


def editing_rows(report: Mapping[str, Any]) -> str:
    """The editing figures as a Markdown table (printed after the main one)."""
    details = report["details"]["editing"]
    turns = details["turns_before_fold"]
    bound = "" if details["editing_folded"] else " (at least: no fold yet)"
    rows = [
        ("`editing_kept_share`", f"{report['editing_kept_share']:.2f}", "editing_kept_share"),
        (
            f"`editing_turns_ratio` ({turns['editing']} / {turns['client']} turns){bound}",
            f"{report['editing_turns_ratio']:.2f}",
            "editing_turns_ratio",
        ),
        (
            "`cache_read_share_editing`",
            f"{report['cache_read_share_editing']:.1%}",
            "cache_read_share_editing",
        ),
    ]
    lines = ["| Context editing | Measured | Target | Met |", "|---|---:|---|---|"]
    for label, value, key in rows:
        target = report["targets"][key]
        met = "yes" if target["met"] else "**no**"
        lines.append(f"| {label} | {value} | {target['limit']} | {met} |")
    lines.append(
        f"| client clearing (`Fold` alone): kept share at its fold | "
        f"{details['client_kept_share']:.2f} | (none) | |"
    )
    return "\n".join(lines)
