"""LangChain's ``ChatAnthropic``, streaming a tool loop through the gateway.

LangChain keeps its own copies of the replies and rebuilds the message list every call; the
gateway matches each copy to the reply it recorded and sends the recorded bytes, so every earlier
reply's signed thinking goes back valid. The gateway runs in-process with no upstream (the
simulator answers: no key, no network). Run it: ``python examples/langchain_gateway.py`` (needs
``pip install '.[langgraph,gateway]'``). It prints::

    read_log called
    Done.
    2 replies recorded, 2 with their signed thinking
    system or tools changes appended: 0
    reasoning lost: none
"""

import tempfile
from pathlib import Path

from _helpers import report, serve
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from context_manager import SQLiteStore
from context_manager.adapters import AGENT_HEADER, gateway_app


@tool
def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


with tempfile.TemporaryDirectory() as scratch:
    store = SQLiteStore(Path(scratch) / "agents.db")
    app = gateway_app(store)  # `context-manager gateway --db agents.db`, in-process
    with serve(app) as url:
        llm = ChatAnthropic(
            model="claude-opus-5-5",
            base_url=url,
            api_key="your key (sent upstream as is)",
            max_tokens=1024,
            streaming=True,
            thinking={"type": "adaptive"},
            default_headers={AGENT_HEADER: "ada"},
        ).bind_tools([read_log])
        history: list[BaseMessage] = [
            SystemMessage("You are Ada."),
            HumanMessage("What changed overnight? Use read_log."),
        ]
        while True:  # the tool loop: call the model until it stops asking for tools
            reply = llm.invoke(history)
            history.append(reply)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                print(f"{call['name']} called")
                history.append(ToolMessage(read_log.invoke({}), tool_call_id=call["id"]))
        print(reply.text)
    for line in report(app.state.gateway.agents, "ada"):
        print(line)
    store.close()
