"""A host's own loop: compile, call, record, place drops, tell, store lines at the boundary.

Runs against the simulator (no API key, no network): ``python examples/host_loop.py``. It
prints the one line the agent is told when the tool change strips its earlier thinking::

    [reasoning] ada: The reasoning behind your replies up to the one beginning "You said: ...
"""

from __future__ import annotations

# docs: start (docs/runtime.md, "Your own loop", shows the rest of this file verbatim; tested)
import asyncio
import logging
import sys
import tempfile
from pathlib import Path

import attrs
import structlog

from context_manager import ContextManager, Head, SQLiteStore, ThinkingBinding, ThinkingStrip
from context_manager.simulator import Simulator
from notices import ReasoningLossTeller, TurnState, notice_metadata

AGENT = "ada"
HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada, a careful on-call engineer.",
    tools=[
        {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
    ],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


async def main(db: Path) -> list[str]:
    client = Simulator().client()  # anthropic.AsyncAnthropic() with a real key
    # appending off: a tool change strips the earlier thinking, and the teller says so
    binding = ThinkingBinding(append_changes=False)
    cm = ContextManager.open(SQLiteStore(db), namespace=AGENT, binding=binding)
    teller = ReasoningLossTeller(lambda agent, message_id: cm.get_message(message_id))
    turn = TurnState.idle()
    waiting: list[str] = []  # lines wait for the agent's next boundary

    def heard(strip: ThinkingStrip, key: str) -> None:
        line = teller.for_strip(AGENT, key, strip, turn)
        if line:
            waiting.append(line)

    cm.on_thinking_strip(heard)

    async def run_turn(text: str, head: Head) -> None:
        nonlocal turn
        turn = TurnState.opened(cm.branch_head())
        cm.add_message("user", text)
        result = cm.compile(head)  # committing: strips are recorded and heard now
        message = await client.beta.messages.create(**result.request)
        cm.record_reply(message, result)  # stamps the reply's thinking
        placed = cm.place_drops(message, result)  # the provider's own drops, released by reason
        line = teller.for_drops(AGENT, result.branch, placed, turn)
        if line:
            waiting.append(line)
        turn = TurnState.idle()
        while waiting:  # the boundary: store what waited, it rides with the next request
            cm.add_message("system", waiting.pop(0), metadata=notice_metadata(AGENT))

    await run_turn("The deploy failed; what do you think?", HEAD)
    # a tool change: with appending off it rewrites the head, so the earlier thinking is
    # stripped and the agent is told (with it on, the change is appended and nothing is lost)
    await run_turn("Roll back, then?", attrs.evolve(HEAD, tools=[]))
    return [m.content[0].text for m in cm.messages(kind="reasoning-loss")]  # type: ignore[union-attr]


if __name__ == "__main__":
    structlog.configure(  # the library logs structured events; show warnings and up, on stderr
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    with tempfile.TemporaryDirectory() as scratch:
        for line in asyncio.run(main(Path(scratch) / "agent.db")):
            print(line)
