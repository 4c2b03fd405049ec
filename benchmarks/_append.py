"""Append-only head changes versus head changes (issue 16): thinking kept, lines told.

A 200-turn tool-loop session (each turn: a user message, a reply that calls a tool, its result,
a closing reply) whose tool menu changes every 10 turns (a skill activated, then dropped) and
whose system text changes twice, run once with ``append_changes`` on and once off. Figures: the
thinking blocks the last request sends, the ``[reasoning]`` lines a teller tells, and the share
of the blocks the off run stripped at head changes that the on run still sends.
"""

from __future__ import annotations

from typing import Any

from context_manager import ContextManager, Head, MemoryStore, ThinkingBinding
from notices import ReasoningLossTeller

TURNS = 200
CHANGE_EVERY = 10
SYSTEM_CHANGES = (70, 140)

BASE_TOOLS = [
    {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
]
SKILL = {"name": "grep", "description": "Search the log.", "input_schema": {"type": "object"}}

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=BASE_TOOLS,
    settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
)


def _head(turn: int) -> Head:
    tools = [*BASE_TOOLS, SKILL] if (turn // CHANGE_EVERY) % 2 else BASE_TOOLS
    system = f"You are Ada (rules {sum(turn >= t for t in SYSTEM_CHANGES)})."
    return Head(model=HEAD.model, system=system, tools=tools, settings=HEAD.settings)


def _signatures(request: dict[str, Any]) -> set[str]:
    return {
        str(b["signature"])
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    }


def session(append: bool, turns: int = TURNS) -> dict[str, Any]:
    """Run the session: ``sent`` (signatures the last request sends), ``head_lines`` and
    ``stripped`` (signatures of the blocks head strips took)."""
    cm = ContextManager.open(
        MemoryStore(), namespace="ada", binding=ThinkingBinding(append_changes=append)
    )
    teller = ReasoningLossTeller(lambda _agent, mid: cm.get_message(mid))
    lines: list[str] = []
    stripped: set[str] = set()

    def heard(strip: Any, key: str) -> None:
        if strip.cause == "head":
            for reply in strip.replies:
                stripped.update(
                    b.signature for b in cm.get_message(reply).content if hasattr(b, "signature")
                )
            line = teller.for_strip("ada", key, strip, None)
            if line:
                lines.append(line)

    cm.on_thinking_strip(heard)
    for turn in range(turns):
        head = _head(turn)
        cm.add_message("user", f"Turn {turn}: check the log.")
        result = cm.compile(head)
        call = [
            {"type": "thinking", "thinking": f"plan {turn}", "signature": f"sig-a{turn}"},
            {"type": "tool_use", "id": f"toolu_{turn}", "name": "read_log", "input": {}},
        ]
        cm.record_reply(call, result)
        cm.add_message(
            "user", [{"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": "ok"}]
        )
        result = cm.compile(head)
        answer = [
            {"type": "thinking", "thinking": f"sum {turn}", "signature": f"sig-b{turn}"},
            {"type": "text", "text": f"Turn {turn}: all quiet."},
        ]
        cm.record_reply(answer, result)
    cm.add_message("user", "And now?")
    last = cm.compile(_head(turns)).request
    return {"sent": _signatures(last), "head_lines": len(lines), "stripped": stripped}


def append_figures(turns: int = TURNS) -> dict[str, Any]:
    """``append_on_kept_blocks``, ``append_off_kept_blocks``, ``append_on_head_lines``,
    ``append_off_head_lines`` and ``append_kept``."""
    on, off = session(True, turns), session(False, turns)
    stripped = off["stripped"]
    return {
        "turns": turns,
        "append_on_kept_blocks": len(on["sent"]),
        "append_off_kept_blocks": len(off["sent"]),
        "append_on_head_lines": on["head_lines"],
        "append_off_head_lines": off["head_lines"],
        "append_off_stripped_blocks": len(stripped),
        "append_kept": len(stripped & on["sent"]) / len(stripped) if stripped else 1.0,
    }
