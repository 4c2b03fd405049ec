"""pydantic-ai through the managed client: dynamic instructions, a tool, no reasoning lost.

The agent's instructions name the run, so its ``system`` changes on every run (pydantic-ai #7984:
a model with the prefix check refuses the replayed thinking, and pydantic-ai's ``drop_block``
retry throws it away). Through ``ManagedAsyncAnthropic`` each change is appended instead, and
every earlier reply's thinking goes back as recorded. The simulator answers (no key, no network).
Run it: ``python examples/pydantic_ai_agent.py`` (needs ``pip install '.[pydantic-ai]'``). It
prints::

    run 2: Done.
    6 replies recorded, 6 with their signed thinking
    system or tools changes appended: 2
    reasoning lost: none
"""

import asyncio
import tempfile
from pathlib import Path

from _helpers import report
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider

from context_manager import SQLiteStore
from context_manager.adapters import ManagedAsyncAnthropic
from context_manager.simulator import Simulator


def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


async def main(db: Path) -> None:
    store = SQLiteStore(db)
    real = Simulator().client()  # or anthropic.AsyncAnthropic() with ANTHROPIC_API_KEY set
    client = ManagedAsyncAnthropic(real, store, agent="ada")
    model = AnthropicModel("claude-opus-5-5", provider=AnthropicProvider(anthropic_client=client))
    agent = Agent(
        model,
        deps_type=int,
        tools=[read_log],
        model_settings=AnthropicModelSettings(anthropic_thinking={"type": "adaptive"}),
    )

    @agent.instructions
    def name_the_run(ctx: RunContext[int]) -> str:
        return f"You are Ada, on run {ctx.deps}."  # another system prompt every run

    history = None
    for run in range(3):
        result = await agent.run(f"run {run}: use read_log", deps=run, message_history=history)
        history = result.all_messages()
        print(f"run {run}: {result.output}")  # the simulator called read_log, then answered
    for line in report(client.agents, "ada"):
        print(line)
    store.close()


with tempfile.TemporaryDirectory() as scratch:
    asyncio.run(main(Path(scratch) / "agents.db"))
