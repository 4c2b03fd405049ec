"""LangGraph with ``TranscriptCheckpointer``: a real graph, ``ChatAnthropic`` through the gateway.

The graph is LangGraph's own (``StateGraph`` over ``MessagesState``, its ``ToolNode`` and
``tools_condition``); its model is LangChain's ``ChatAnthropic`` with its base URL at the gateway
(uvicorn on loopback), which answers from the simulator. The checkpointer shares the gateway's
agents, so the thread's replies are the transcript's, loaded back with their recorded thinking.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers import invalid_calls, serve, thinking_signatures

from context_manager import REASONING_LOSS_KIND, ContextManager, InvalidValue, Store, ThinkingBlock
from context_manager.adapters import AGENT_HEADER, gateway_app
from context_manager.simulator import Simulator

pytest.importorskip("uvicorn")
chat_models = pytest.importorskip("langchain_anthropic")
pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from context_manager.adapters._records import decoded, record_of  # noqa: E402
from context_manager.adapters.langgraph import (  # noqa: E402
    CHECKPOINT_KIND,
    RECORDS_SUFFIX,
    TranscriptCheckpointer,
)

MODEL = "claude-opus-5-5"
THREAD: Any = {"configurable": {"thread_id": "ada"}}  # a RunnableConfig


@tool
def read_log() -> str:
    """Read the service log."""
    return "all quiet since 12:05"


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture
def gateway(sim: Simulator, store: Store) -> Iterator[tuple[str, Any]]:
    """The gateway (no upstream: the simulator) and its agents."""
    app = gateway_app(store, simulator_client=sim.client())
    with serve(app) as url:
        yield url, app.state.gateway.agents


def graph(url: str, checkpointer: Any, **compiled: Any) -> Any:
    """A tool-calling agent: the model node, LangGraph's tool node, its condition."""
    llm = chat_models.ChatAnthropic(
        model=MODEL,
        base_url=url,
        api_key="mine",
        max_tokens=1024,
        streaming=True,
        thinking={"type": "adaptive"},
        default_headers={AGENT_HEADER: "ada"},
        max_retries=0,
    ).bind_tools([read_log])

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([read_log]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, **compiled)


def ask(app: Any, words: str) -> list[Any]:
    result = app.invoke({"messages": [HumanMessage(words)]}, THREAD)
    messages: list[Any] = result["messages"]
    return messages


def signatures_of(messages: list[Any]) -> list[str]:
    return [
        block["signature"]
        for m in messages
        if isinstance(m, AIMessage) and isinstance(m.content, list)
        for block in m.content
        if isinstance(block, dict) and block.get("type") == "thinking"
    ]


def recorded_signatures(store: Store) -> list[str]:
    cm = ContextManager.open(store, namespace="ada")
    return [
        b.signature
        for m in cm.messages()
        if m.role == "assistant"
        for b in m.content
        if isinstance(b, ThinkingBlock) and b.signature
    ]


def test_a_threads_tool_loops_keep_every_replys_thinking_across_a_restart(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    first = graph(url, TranscriptCheckpointer(store, agents=agents))
    ask(first, "please use read_log")
    ask(first, "and again: please use read_log")
    # a restart: a new checkpointer (and graph) over the same store
    second = graph(url, TranscriptCheckpointer(store))
    messages = ask(second, "one more time, please use read_log")
    assert len(sim.calls) == 6  # three tool loops of two calls each
    assert [call.status for call in sim.calls] == [200] * 6
    assert [call.dropped for call in sim.calls] == [()] * 6
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 5  # every earlier reply's thinking
    assert signatures_of(messages) == recorded_signatures(store)
    cm = ContextManager.open(store, namespace="ada")
    assert cm.messages(kind=REASONING_LOSS_KIND) == []
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"] * 3


def test_a_reply_whose_thinking_the_graphs_copy_lost_is_loaded_with_its_recorded_thinking(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    app = graph(url, TranscriptCheckpointer(store, agents=agents))
    messages = ask(app, "please use read_log")
    reply = messages[1]
    recorded = signatures_of([reply])
    stripped = [b for b in reply.content if b.get("type") != "thinking"]
    app.update_state(THREAD, {"messages": [reply.model_copy(update={"content": stripped})]})
    loaded = app.get_state(THREAD).values["messages"]
    assert signatures_of([loaded[1]]) == recorded
    assert len(recorded) == 1


def test_the_thread_keeps_its_replies_in_the_transcript_not_in_the_checkpoints(
    store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    ask(graph(url, saver), "please use read_log")
    transcript = ContextManager.open(store, namespace="ada")
    replies = [m.id for m in transcript.messages() if m.role == "assistant"]
    newest = record_of(saver.records("ada").newest(CHECKPOINT_KIND, limit=1)[0])
    kept = [saver.serde.loads_typed(decoded(item["lc"])) for item in newest["messages"]]
    assert [item.get("reply") for item in newest["messages"]] == [
        None,
        replies[0],
        None,
        replies[1],
    ]
    assert [m.content for m in kept if isinstance(m, AIMessage)] == [[], []]
    assert len(replies) == 2


def test_a_deleted_thread_starts_over_and_its_records_stay_stored(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    app = graph(url, saver)
    ask(app, "hello")
    assert saver.get_tuple(THREAD) is not None
    saver.delete_thread("ada")
    assert saver.get_tuple(THREAD) is None
    assert list(saver.list(THREAD)) == []
    records = ContextManager.open(store, namespace=f"ada{RECORDS_SUFFIX}")
    hidden = store.branches(records.namespace)
    assert any(b.deleted for b in hidden) or len(records.list_branches()) == 1


def test_a_thread_another_host_deleted_starts_over_on_this_host_too(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """Two workers checkpoint one thread on one database; one deletes the thread and the other
    then runs it: its checkpoints land where the first reads them. It used to write on the
    branch the delete hid, so the first saw no checkpoint at all."""
    first, second = (TranscriptCheckpointer(store) for store in two_hosts)
    with serve(gateway_app(two_hosts[1], simulator_client=sim.client())) as url:
        ask(graph(url, second), "hello")
        assert first.get_tuple(THREAD) is not None
        first.delete_thread("ada")
        assert second.get_tuple(THREAD) is None
        ask(graph(url, second), "hello again")
    found = first.get_tuple(THREAD)
    assert found is not None
    said = [m.content for m in found.checkpoint["channel_values"]["messages"]]
    assert "hello again" in said
    assert "hello" not in said


async def test_the_async_methods_run_a_graph_too(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    app = graph(url, TranscriptCheckpointer(store, agents=agents))
    result = await app.ainvoke({"messages": [HumanMessage("please use read_log")]}, THREAD)
    again = await app.aget_state(THREAD)
    assert signatures_of(again.values["messages"]) == signatures_of(result["messages"])
    history = [item async for item in app.checkpointer.alist(THREAD)]
    assert len(history) >= 4
    assert [call.status for call in sim.calls] == [200, 200]


def test_going_back_to_an_earlier_checkpoint_keeps_every_earlier_replys_thinking(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    app = graph(url, TranscriptCheckpointer(store, agents=agents))
    ask(app, "please use read_log")
    ask(app, "hello")
    before = next(  # the checkpoint the second question started from
        s for s in app.get_state_history(THREAD) if len(s.values.get("messages", [])) == 4
    )
    app.invoke({"messages": [HumanMessage("something else")]}, before.config)
    assert [call.status for call in sim.calls] == [200] * 4
    assert [call.dropped for call in sim.calls] == [()] * 4
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 2  # the first question's replies
    texts = [m.content for m in app.get_state(THREAD).values["messages"] if m.type == "human"]
    assert texts == ["please use read_log", "something else"]
    cm = ContextManager.open(store, namespace="ada")
    assert "main~1" in {b.name for b in cm.list_branches()}


def test_a_graph_stopped_inside_its_tool_loop_resumes_after_a_restart(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    stopped = graph(url, TranscriptCheckpointer(store, agents=agents), interrupt_before=["tools"])
    ask(stopped, "please use read_log")
    assert stopped.get_state(THREAD).next == ("tools",)
    resumed = graph(url, TranscriptCheckpointer(store), interrupt_before=["tools"])
    assert resumed.get_state(THREAD).next == ("tools",)
    messages = resumed.invoke(None, THREAD)["messages"]
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert [call.status for call in sim.calls] == [200, 200]
    assert [call.dropped for call in sim.calls] == [(), ()]
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 1  # the open tool round's thinking


def test_a_long_threads_every_checkpoint_is_listed_and_found_by_its_id(
    store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    app = graph(url, saver)
    for n in range(8):
        ask(app, f"hello {n}")
    history = list(saver.list(THREAD))
    stored = saver.records("ada").newest(CHECKPOINT_KIND)
    assert len(history) == len(stored) > 16  # more than one page of records
    ids = [t.checkpoint["id"] for t in history]
    assert ids == sorted(ids, reverse=True)
    oldest = saver.get_tuple(history[-1].config)
    assert oldest is not None
    assert oldest.checkpoint["id"] == ids[-1]
    assert len(list(saver.list(THREAD, limit=3))) == 3
    assert [t.checkpoint["id"] for t in saver.list(THREAD, before=history[2].config)] == ids[3:]


def test_pending_writes_are_kept_once_and_in_the_order_langgraph_applies_them(
    store: Store,
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.serde.types import ERROR

    saver = TranscriptCheckpointer(store)
    base: Any = {"configurable": {"thread_id": "ada", "checkpoint_ns": ""}}
    saved = saver.put(base, empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(saved, [("a", 1), ("b", 2)], task_id="t2", task_path="p2")
    saver.put_writes(saved, [("a", 10)], task_id="t2", task_path="p2")  # a retry: kept once
    saver.put_writes(saved, [("c", 3)], task_id="t1", task_path="p1")
    saver.put_writes(saved, [(ERROR, "first")], task_id="t1", task_path="p1")
    saver.put_writes(saved, [(ERROR, "second")], task_id="t1", task_path="p1")  # the newest
    found = TranscriptCheckpointer(store).get_tuple(saved)  # after a restart too
    assert found is not None
    assert found.pending_writes == [
        ("t1", ERROR, "second"),
        ("t1", "c", 3),
        ("t2", "a", 1),
        ("t2", "b", 2),
    ]
    assert found.metadata == {"source": "input", "step": -1}


def check_every_call_kept_its_thinking(sim: Simulator, *, calls: int, sent: int) -> None:
    """``calls`` calls, all accepted, none dropping or refusing thinking, the last sending
    ``sent`` thinking blocks."""
    assert [call.status for call in sim.calls] == [200] * calls
    assert [call.dropped for call in sim.calls] == [()] * calls
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == sent


def two_questions(store: Store, gateway: tuple[str, Any]) -> tuple[TranscriptCheckpointer, Any]:
    """A checkpointer and its graph after a tool loop and a plain question on thread "ada"."""
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    app = graph(url, saver)
    ask(app, "please use read_log")
    ask(app, "hello")
    return saver, app


def record_ids(saver: TranscriptCheckpointer, thread_id: str = "ada") -> list[str]:
    return [m.id for m in saver.records(thread_id).oldest_first()]


def still_stored(store: Store, ids: list[str], thread_id: str = "ada") -> bool:
    """Every record in ``ids`` can still be read from the store (hidden or not)."""
    namespace = f"{thread_id}{RECORDS_SUFFIX}"
    return all(store.get(namespace, message_id).id == message_id for message_id in ids)


def checkpoint_ids(saver: TranscriptCheckpointer, thread_id: str) -> list[str]:
    return [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": thread_id}})]


def test_a_copied_thread_has_every_checkpoint_and_its_replies_keep_their_thinking(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    saver, _ = two_questions(store, gateway)
    before = checkpoint_ids(saver, "ada")
    saver.copy_thread("ada", "ada-copy")
    assert checkpoint_ids(saver, "ada") == before  # the source is left as it is
    assert checkpoint_ids(saver, "ada-copy") == before
    copy: Any = {"configurable": {"thread_id": "ada-copy"}}
    metadata = [t.metadata for t in saver.list(THREAD)]
    assert [t.metadata for t in saver.list(copy)] == metadata
    restarted = TranscriptCheckpointer(store)  # reads the copy's references from "ada"
    loaded = restarted.get_tuple(copy)
    assert loaded is not None
    copied = loaded.checkpoint["channel_values"]["messages"]
    assert signatures_of(copied) == recorded_signatures(store)
    assert len(signatures_of(copied)) == 3
    messages = graph(gateway[0], restarted).invoke({"messages": [HumanMessage("and now?")]}, copy)
    assert len(messages["messages"]) == 8
    check_every_call_kept_its_thinking(sim, calls=4, sent=3)  # every earlier reply's thinking


def test_copying_a_thread_with_no_records_copies_nothing(store: Store) -> None:
    saver = TranscriptCheckpointer(store)
    saver.copy_thread("nobody", "ada-copy")
    assert checkpoint_ids(saver, "ada-copy") == []


def test_pruning_keeps_the_newest_checkpoint_with_its_thinking_and_hides_the_rest(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    saver, app = two_questions(store, gateway)
    newest = checkpoint_ids(saver, "ada")[0]
    ids = record_ids(saver)
    saver.prune(["ada", "nobody"])
    assert checkpoint_ids(saver, "ada") == [newest]
    assert still_stored(store, ids)  # hidden, not deleted
    messages = app.get_state(THREAD).values["messages"]
    assert signatures_of(messages) == recorded_signatures(store)
    ask(app, "and once more, please use read_log")  # the graph goes on from the kept one
    check_every_call_kept_its_thinking(sim, calls=5, sent=4)


def test_pruning_keeps_the_newest_checkpoints_pending_writes(store: Store) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    saver = TranscriptCheckpointer(store)
    config: Any = {"configurable": {"thread_id": "ada", "checkpoint_ns": ""}}
    for step in range(3):
        checkpoint = {**empty_checkpoint(), "id": f"0000000{step}"}
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, {})  # type: ignore[arg-type]
        saver.put_writes(config, [("a", step)], task_id=f"t{step}")
    saver.prune(["ada"], strategy="keep_latest")
    found = saver.get_tuple({"configurable": {"thread_id": "ada"}})
    assert found is not None
    assert found.checkpoint["id"] == "00000002"
    assert found.pending_writes == [("t2", "a", 2)]
    assert found.metadata == {"source": "loop", "step": 2}


def test_pruning_with_delete_hides_every_checkpoint_and_an_unknown_strategy_is_refused(
    store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    ask(graph(url, saver), "hello")
    ids = record_ids(saver)
    with pytest.raises(InvalidValue, match="keep_latest"):
        saver.prune(["ada"], strategy="keep_newest")
    assert checkpoint_ids(saver, "ada") != []
    saver.prune(["ada"], strategy="delete")
    assert checkpoint_ids(saver, "ada") == []
    assert still_stored(store, ids)


def test_deleting_a_runs_checkpoints_hides_them_and_the_graph_goes_on_from_the_run_before(
    sim: Simulator, store: Store, gateway: tuple[str, Any]
) -> None:
    url, agents = gateway
    saver = TranscriptCheckpointer(store, agents=agents)
    app = graph(url, saver)
    for run, words in (("r1", "please use read_log"), ("r2", "hello")):
        config: Any = {"configurable": {"thread_id": "ada", "run_id": run}}
        app.invoke({"messages": [HumanMessage(words)]}, config)
    ids = record_ids(saver)
    saver.delete_for_runs(["r2", "r9"])
    runs = {t.metadata.get("run_id") for t in saver.list(THREAD)}
    assert runs == {"r1"}
    assert still_stored(store, ids)
    latest = saver.get_tuple(THREAD)
    assert latest is not None
    assert latest.pending_writes == []  # no write of the hidden run's checkpoints is left
    assert len(app.get_state(THREAD).values["messages"]) == 4  # the first run's tool loop
    ask(app, "something else")  # fewer messages than the gateway saw: a rewind
    check_every_call_kept_its_thinking(sim, calls=4, sent=2)  # the first run's replies


async def test_the_async_upkeep_methods_do_what_the_sync_ones_do(store: Store) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    saver = TranscriptCheckpointer(store)
    config: Any = {"configurable": {"thread_id": "ada", "checkpoint_ns": "", "run_id": "r1"}}
    for step in range(2):
        checkpoint = {**empty_checkpoint(), "id": f"0000000{step}"}
        config = await saver.aput(config, checkpoint, {"step": step, "run_id": f"r{step}"}, {})  # type: ignore[arg-type]
    await saver.acopy_thread("ada", "bob")
    await saver.aprune(["ada"])
    await saver.adelete_for_runs(["r0"])
    assert checkpoint_ids(saver, "ada") == ["00000001"]
    assert checkpoint_ids(saver, "bob") == ["00000001"]


class FailingAppends:
    """A real store whose ``append`` fails from the ``after``-th call on (``armed`` set)."""

    def __init__(self, inner: Store, after: int) -> None:
        self._inner = inner
        self._after = after
        self.armed = False

    def append(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            self._after -= 1
            if self._after <= 0:
                raise OSError("disk full")
        return self._inner.append(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_prune_that_fails_midway_leaves_the_thread_as_it_was(store: Store) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    failing = FailingAppends(store, after=2)
    saver = TranscriptCheckpointer(failing)
    config: Any = {"configurable": {"thread_id": "ada", "checkpoint_ns": ""}}
    for step in range(3):
        checkpoint = {**empty_checkpoint(), "id": f"0000000{step}"}
        config = saver.put(config, checkpoint, {"step": step}, {})  # type: ignore[arg-type]
        saver.put_writes(config, [("a", step)], task_id=f"t{step}")
    before = checkpoint_ids(saver, "ada")
    failing.armed = True
    with pytest.raises(OSError, match="disk full"):
        saver.prune(["ada"])
    assert checkpoint_ids(saver, "ada") == before
    assert checkpoint_ids(TranscriptCheckpointer(store), "ada") == before  # after a restart
