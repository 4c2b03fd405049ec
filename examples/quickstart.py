"""Quickstart: a resident agent with one tool, on SQLite, against the local simulator.

Run it after ``pip install .``:  python examples/quickstart.py
The README's quickstart is this file from ``import asyncio`` on (tests/project/test_docs_snippets.py
checks). It keeps its transcript in ``agents.db``, in the folder it runs in. It prints::

    tools called: ['read_log']
    head changes appended: 1
    [reasoning] ada: The reasoning behind your replies up to the one beginning ...
"""

import asyncio

import attrs

from context_manager import Head, SQLiteStore, Window
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator

READ_LOG = {
    "name": "read_log",
    "description": "Read the service's deploy log.",
    "input_schema": {"type": "object", "properties": {}},
}


def read_log(call_input: dict[str, object]) -> str:
    """A tool: a plain function (sync or async) from the call's input to text."""
    return "12:00 deploy 41 ok\n12:05 deploy 42 failed: DATABASE_URL is not set"


async def main() -> None:
    client = Simulator().client()  # or anthropic.AsyncAnthropic() with ANTHROPIC_API_KEY set
    store = SQLiteStore("agents.db")
    runtime = Runtime(client, store)
    head = Head(
        model="claude-opus-5-5",
        system="You are Ada, a careful on-call engineer.",
        tools=[READ_LOG],
        settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
    )
    ada = runtime.register(
        Agent(name="ada", head=head, tools={"read_log": read_log}, strategy=Window(50_000))
    )

    result = await ada.run_turn("The deploy failed. Use read_log and tell me why.")
    print("tools called:", [call.name for call in result.tool_calls])

    # A tool change is appended as a system message: no earlier reasoning is lost.
    ada.head = attrs.evolve(ada.head, tools=[])
    await ada.run_turn("Thanks. Write the incident summary.")
    print("head changes appended:", len(ada.context.messages(kind="head-change")))

    # A model that cannot read Opus 5.5's thinking: the agent is told, in one line.
    ada.head = attrs.evolve(ada.head, model="claude-sonnet-5-5")
    await ada.run_turn("Double-check the summary.")
    for notice in ada.context.messages(kind="reasoning-loss"):
        print(notice.content[0].text)
    store.close()


asyncio.run(main())
