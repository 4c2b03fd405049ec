"""The prompt-cache session (issue 19): how much of a resident agent's input is read from cache.

One seeded 200-turn session with tool loops (about five calls a turn, some calls fanning out to
many parallel tool calls), a ``Window``, two tool changes and one fold, driven through the real
SDK client against the simulator's cache model, three times: with the compiler's breakpoints,
with none, and with the naive policy (one breakpoint on the newest message). Each run is the
same conversation (the simulator's replies follow a seeded plan); only the markers differ. The
figure is the share of all input tokens the simulator reports as read from the cache.

Replies that call tools carry their reasoning as text, and only a turn's final answer carries a
signed thinking block: a ``Window`` that jumps in the middle of a tool loop still strips the
in-flight reply's thinking, which the API refuses (provider rule 6) until binding v2 lands. The
cache figures do not depend on which blocks are thinking.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from context_manager import (
    Caching,
    ContextManager,
    Fold,
    Head,
    SQLiteStore,
    ThinkingBinding,
    ToolResultBlock,
    Window,
)
from context_manager.simulator import Simulator

from ._history import TOOLS, Words

MODEL = "claude-opus-5-5"
"""A current model (the SDK warns about deprecated ones when a call names them)."""

POLICIES = ("compiler", "naive", "none")
"""Breakpoints by the compiler (``Caching()``), on the newest message only, or none at all."""

SYSTEM_WORDS = 1_400
"""The system prompt's length in words: a resident agent's instructions (above the minimum the
cache stores)."""

EXTRA_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "grep",
        "description": "Search the repository.",
        "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}},
    },
    {
        "name": "deploy_status",
        "description": "Read the deploy pipeline's status.",
        "input_schema": {"type": "object", "properties": {"service": {"type": "string"}}},
    },
)
"""Tools the two tool changes add, one each."""

SECONDS_PER_CALL = 6.0
SECONDS_BETWEEN_TURNS = 45.0
"""The simulated clock: a call takes seconds, a user answers within a minute (under the 5m TTL)."""


@attrs.frozen
class CacheConfig:
    """The session.

    Attributes:
        turns: user turns.
        mean_calls: model calls per turn on average (each but the last calls tools).
        window_tokens: the ``Window``'s ``max_tokens``.
        tool_changes: turns at whose start a tool is added to the head.
        fold_at: the turn at whose start the history is folded once.
        fan_out_share: share of tool-calling replies that call ``fan_out`` tools at once.
        fan_out: parallel tool calls in a fanned-out reply.
        seed: fixes the conversation.
    """

    turns: int = 200
    mean_calls: int = 5
    window_tokens: int = 24_000
    tool_changes: tuple[int, ...] = (60, 140)
    fold_at: int = 100
    fan_out_share: float = 0.1
    fan_out: int = 12
    seed: int = 20_261_119

    @classmethod
    def tiny(cls) -> CacheConfig:
        """The smoke run's session: every event on a toy scale."""
        return cls(turns=12, window_tokens=6_000, tool_changes=(3, 8), fold_at=6)


@attrs.define
class _Plan:
    """What the simulated model answers next (set by the driver before each call)."""

    thinking: str = ""
    calls: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    answer: str = ""

    def script(self, request: dict[str, Any]) -> list[Any]:
        if self.calls:
            lead: list[Any] = [self.thinking]
            return lead + [{"type": "tool_use", "name": n, "input": i} for n, i in self.calls]
        return [{"type": "thinking", "thinking": self.thinking}, self.answer]


@attrs.frozen
class SessionUsage:
    """Input tokens over a session, by how the simulator processed them."""

    calls: int
    read: int
    written: int
    uncached: int
    fan_outs: int

    @property
    def total(self) -> int:
        return self.read + self.written + self.uncached

    @property
    def read_share(self) -> float:
        return self.read / self.total if self.total else 0.0


def _naive(request: dict[str, Any]) -> dict[str, Any]:
    """The request with one breakpoint on the newest message's last block (no other marker)."""
    messages = list(request["messages"])
    last = dict(messages[-1])
    blocks = list(last["content"])
    for j in range(len(blocks) - 1, -1, -1):
        if blocks[j].get("type") not in ("thinking", "redacted_thinking"):
            blocks[j] = {**blocks[j], "cache_control": {"type": "ephemeral"}}
            break
    last["content"] = blocks
    messages[-1] = last
    return {**request, "messages": messages}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_session(policy: str, config: CacheConfig, path: Path) -> SessionUsage:
    """Run the whole session under ``policy`` (one of ``POLICIES``) with its store at ``path``."""
    rng = random.Random(config.seed)
    words = Words(config.seed).text
    plan = _Plan()
    clock = _Clock()
    sim = Simulator(script=plan.script, clock=clock)
    client = sim.sync_client()
    store = SQLiteStore(path)
    window = Window(max_tokens=config.window_tokens)
    cm = ContextManager.open(
        store,
        namespace="ada",
        binding=ThinkingBinding(binds=True, drop_block=True),
        strategy=window,
        caching=Caching(enabled=policy == "compiler"),
    )
    tools = list(TOOLS)
    head = _head(words(SYSTEM_WORDS, SYSTEM_WORDS), tools)
    fan_outs = 0
    for turn in range(config.turns):
        if turn in config.tool_changes:
            tools.append(EXTRA_TOOLS[config.tool_changes.index(turn) % len(EXTRA_TOOLS)])
            head = attrs.evolve(head, tools=list(tools))
        cm.add_message("user", f"Turn {turn}: {words(8, 60)}")
        if turn == config.fold_at:
            cm.strategy = Fold(
                lambda covered: f"Summary of {len(covered)} messages: {words(80, 120)}",
                trigger_tokens=1,
                keep_tokens=config.window_tokens // 4,
            )
        calls = max(1, round(rng.expovariate(1 / config.mean_calls))) if config.mean_calls else 1
        for call in range(calls):
            last = call == calls - 1
            plan.thinking = words(20, 80)
            plan.answer = words(10, 60)
            width = config.fan_out if rng.random() < config.fan_out_share else rng.randint(1, 2)
            plan.calls = (
                []
                if last
                else [(rng.choice(tools)["name"], {"query": words(2, 6)}) for _ in range(width)]
            )
            fan_outs += not last and width == config.fan_out
            result = cm.compile(head)
            cm.strategy = window
            request = _naive(result.request) if policy == "naive" else result.request
            message = client.beta.messages.create(**request)
            clock.now += SECONDS_PER_CALL
            cm.record_reply(message, result)
            cm.place_drops(message, result)
            uses = [block.id for block in message.content if block.type == "tool_use"]
            if uses:
                cm.add_message(
                    "user",
                    [ToolResultBlock(tool_use_id=u, content=words(20, 120)) for u in uses],
                )
        clock.now += SECONDS_BETWEEN_TURNS
    store.close()
    usage = [call.response["usage"] for call in sim.calls]
    return SessionUsage(
        calls=len(usage),
        read=sum(u["cache_read_input_tokens"] for u in usage),
        written=sum(u["cache_creation_input_tokens"] for u in usage),
        uncached=sum(u["input_tokens"] for u in usage),
        fan_outs=fan_outs,
    )


def _head(instructions: str, tools: list[dict[str, Any]]) -> Head:
    return Head(
        model=MODEL,
        system=f"You are Ada, the on-call agent. {instructions}",
        tools=list(tools),
        settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
    )


Progress = Callable[[str], None]


def cache_sessions(
    config: CacheConfig, workdir: Path, progress: Progress | None = None
) -> dict[str, SessionUsage]:
    """The session under every policy, each on its own store in ``workdir``."""
    out: dict[str, SessionUsage] = {}
    for policy in POLICIES:
        if progress is not None:
            progress(f"prompt cache: {config.turns}-turn session, breakpoints: {policy}")
        out[policy] = run_session(policy, config, workdir / f"cache-{policy}.db")
    return out
