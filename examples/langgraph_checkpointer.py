"""LangGraph: a tool-calling ``StateGraph`` whose checkpointer is this library's store.

The graph's model is ``ChatAnthropic`` with its base URL at the gateway (in-process here, no
upstream: the simulator answers, no key, no network), so every model call is reconciled and
recorded; ``TranscriptCheckpointer`` keeps the thread in the same store, each reply as a pointer
to the recorded one. The process "restarts" between the questions (a new store object, gateway,
checkpointer and graph over the same database): the thread comes back with every reply's signed
thinking, and the next call sends it all. Run it: ``python examples/langgraph_checkpointer.py``
(needs ``pip install '.[langgraph,gateway]'``). It prints::

    first run: 4 messages in the thread
    after the restart: 8 messages in the thread, 4 signed thinking
    4 replies recorded, 4 with their signed thinking
    system or tools changes appended: 0
    reasoning lost: none
"""

import tempfile
from pathlib import Path
from typing import Any

from _helpers import report, serve
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from context_manager import SQLiteStore
from context_manager.adapters import AGENT_HEADER, gateway_app
from context_manager.adapters.langgraph import TranscriptCheckpointer

THREAD: RunnableConfig = {"configurable": {"thread_id": "ada"}}  # the thread is the agent


@tool
def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


def build(url: str, checkpointer: TranscriptCheckpointer) -> Any:
    """The agent: the model node, LangGraph's tool node, and its condition between them."""
    llm = ChatAnthropic(
        model="claude-opus-5-5",
        base_url=url,
        api_key="your key (sent upstream as is)",
        max_tokens=1024,
        thinking={"type": "adaptive"},
        default_headers={AGENT_HEADER: "ada"},
    ).bind_tools([read_log])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([read_log]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def signed_thinking(reply: AIMessage) -> list[Any]:
    """The signed thinking blocks of a reply as the graph holds it."""
    content = reply.content if isinstance(reply.content, list) else []
    return [
        b for b in content if isinstance(b, dict) and b.get("type") == "thinking" and b["signature"]
    ]


def ask(db: Path, question: str) -> tuple[list[Any], list[str]]:
    """One process's life: open the store, serve the gateway, run the graph once, close."""
    store = SQLiteStore(db)
    app = gateway_app(store)  # `context-manager gateway --db agents.db`, in-process
    saver = TranscriptCheckpointer(store, agents=app.state.gateway.agents)
    with serve(app) as url:
        graph = build(url, saver)
        messages = graph.invoke({"messages": [HumanMessage(question)]}, THREAD)["messages"]
    lines = report(app.state.gateway.agents, "ada")
    store.close()
    return messages, lines


with tempfile.TemporaryDirectory() as scratch:
    db = Path(scratch) / "agents.db"
    first, _ = ask(db, "What changed overnight? Use read_log.")
    print(f"first run: {len(first)} messages in the thread")
    messages, lines = ask(db, "And since then? Use read_log again.")  # a new process, in effect
    signed = sum(len(signed_thinking(m)) for m in messages if isinstance(m, AIMessage))
    print(f"after the restart: {len(messages)} messages in the thread, {signed} signed thinking")
    for line in lines:
        print(line)
