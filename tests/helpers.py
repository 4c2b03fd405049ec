"""Shared test helpers: a head, a tool-calling simulator script and a runtime on the simulator.

Kept in one place so tests do not drift (STYLE 12). Add new helpers with names that say what
they build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_manager import REASONING_LOSS_KIND, Head, MemoryStore, Store
from context_manager.runtime import Agent, RetryPolicy, Runtime
from context_manager.simulator import Simulator

READ_LOG_TOOL = {
    "name": "read_log",
    "description": "Read the log.",
    "input_schema": {"type": "object"},
}
ACTIVATE_TOOL = {
    "name": "activate_skill",
    "description": "Grow tools.",
    "input_schema": {"type": "object"},
}
GREP_TOOL = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
THINKING_HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[READ_LOG_TOOL],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.002)


def calling_script(
    tool: str = "read_log", *, think: bool = True
) -> Callable[[dict[str, Any]], list[Any]]:
    """A simulator script: call ``tool`` once when the user asks to ``use tool``; else answer."""

    def script(request: dict[str, Any]) -> list[Any]:
        last = request["messages"][-1]
        content = last["content"] if isinstance(last["content"], list) else []
        thought = [{"type": "thinking", "thinking": "considering"}] if think else []
        if any(b.get("type") == "tool_result" for b in content):
            return [*thought, {"type": "text", "text": "The log says all is well."}]
        said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
        if "use tool" in said:
            return [*thought, {"type": "tool_use", "name": tool, "input": {}}]
        return [*thought, {"type": "text", "text": f"Noted: {said[:40]}"}]

    return script


def runtime_on(sim: Simulator, store: Store | None = None) -> Runtime:
    """A ``Runtime`` on the simulator's real SDK client, fast retries, a memory store by default."""
    return Runtime(sim.client(), store or MemoryStore(), retry=FAST_RETRY)


def reasoning_lines(agent: Agent) -> list[str]:
    """The texts of the ``[reasoning]`` notices stored for ``agent``, oldest first."""
    return [
        m.content[0].text  # type: ignore[union-attr]
        for m in agent.context.messages(kind=REASONING_LOSS_KIND)
    ]


def request_texts(request: dict[str, Any]) -> list[str]:
    """Every text block's text in a request's messages, in order."""
    return [
        block["text"]
        for message in request["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
        if block.get("type") == "text"
    ]
