"""The OpenAI Agents SDK on Claude: ``TranscriptSession`` keeps the session in this library's store.

The SDK reaches Claude through LiteLLM (``LitellmModel``), with its base URL at the gateway
(in-process here, no upstream: the simulator answers, no key, no network), so every model call is
reconciled and recorded. Each question runs with a new agent and a new ``TranscriptSession`` over
the same database, as after a restart: the session hands back every item as the SDK gave it, the
signed thinking included, and the gateway sends each earlier reply as recorded. Run it:
``python examples/openai_agents_session.py`` (needs ``pip install '.[openai-agents,gateway]'``).
It prints::

    Done.
    12 items in the session, 4 of them reasoning
    4 replies recorded, 4 with their signed thinking
    system or tools changes appended: 0
    reasoning lost: none
"""

import asyncio
import os
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: LiteLLM's own copy

from _helpers import report, serve
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool
from agents.extensions.models.litellm_model import LitellmModel
from openai.types.shared import Reasoning

from context_manager import SQLiteStore
from context_manager.adapters import AGENT_HEADER, gateway_app
from context_manager.adapters.openai_agents import TranscriptSession


@function_tool
def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


def ada(url: str) -> Agent:
    return Agent(
        name="ada",
        instructions="You are Ada.",
        tools=[read_log],
        model=LitellmModel(
            model="anthropic/claude-opus-5-5",
            base_url=url,
            api_key="your key (sent upstream as is)",
        ),
        model_settings=ModelSettings(
            reasoning=Reasoning(effort="medium"),  # without it the SDK replays no thinking
            extra_headers={AGENT_HEADER: "ada"},
        ),
    )


async def main(db: Path) -> None:
    store = SQLiteStore(db)
    app = gateway_app(store)  # `context-manager gateway --db agents.db`, in-process
    with serve(app) as url:
        for question in ("What changed overnight? Use read_log.", "And since? Use read_log."):
            session = TranscriptSession("ada", store)  # a new one each time: a restart
            offline = RunConfig(tracing_disabled=True)  # the SDK's tracing goes to OpenAI
            result = await Runner.run(ada(url), question, session=session, run_config=offline)
    print(result.final_output)
    items = await TranscriptSession("ada", store).get_items()
    thinking = [item for item in items if item.get("type") == "reasoning"]
    print(f"{len(items)} items in the session, {len(thinking)} of them reasoning")
    for line in report(app.state.gateway.agents, "ada"):
        print(line)
    store.close()


with tempfile.TemporaryDirectory() as scratch:
    asyncio.run(main(Path(scratch) / "agents.db"))
