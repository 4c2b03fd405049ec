"""The compile pipeline (issue 27): stages decide, one commit writes, a refused compile writes
nothing. Each test compares a full dump of the agent's stored messages, stamps, binding
records, render snapshots and serials before and after a compile that raises, on every store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from helpers import PROBE_HEAD, calling_script
from postgres_server import Server, drop_schema, fresh_schema

from context_manager import (
    ContextManager,
    Fold,
    MemoryStore,
    OverBudget,
    PostgresStore,
    SQLiteStore,
    Store,
)
from context_manager.simulator import Simulator

GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
WITH_GREP = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP])


def dump(store: Store, namespace: str) -> list[Any]:
    """Everything the agent ``namespace`` keeps that a compile could write: each branch's
    messages (with their stamps), its binding record and its render snapshot, and the agent's
    serials."""
    out: list[Any] = [store.serials(namespace)]
    for branch in store.branches(namespace):
        messages = store.read(namespace, ((branch.key, None),))
        stamps = store.stamps(namespace, [m.id for m in messages])
        out.append((branch, messages, sorted(stamps.items())))
        record = store.binding_record(namespace, branch.key)
        out.append((record.first_compiled, sorted(record.releases.items()), record.anchor))
        out.append((sorted(record.left_out), record.anchored_head))
        out.append(store.load_render(namespace, branch.key))
    return out


class Watched:
    """A real store that records each write it is asked for (``writes``: the method and the
    namespace), and raises in ``commit_binding`` while ``failing`` is set: the binding write
    comes after a compile's message writes, so it fails a commit midway."""

    failing = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []

    def append(self, namespace: str, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("append", namespace))
        return super().append(namespace, *args, **kwargs)  # type: ignore[misc]

    def save_render(self, namespace: str, *args: Any, **kwargs: Any) -> None:
        self.writes.append(("save_render", namespace))
        super().save_render(namespace, *args, **kwargs)  # type: ignore[misc]

    def add_release(self, namespace: str, *args: Any, **kwargs: Any) -> None:
        self.writes.append(("add_release", namespace))
        super().add_release(namespace, *args, **kwargs)  # type: ignore[misc]

    def commit_binding(self, namespace: str, *args: Any, **kwargs: Any) -> None:
        if self.failing:
            raise RuntimeError("the disk is full")
        self.writes.append(("commit_binding", namespace))
        super().commit_binding(namespace, *args, **kwargs)  # type: ignore[misc]


class WatchedMemory(Watched, MemoryStore):
    pass


class WatchedSQLite(Watched, SQLiteStore):
    pass


class WatchedPostgres(Watched, PostgresStore):
    pass


def watched(kind: str, request: pytest.FixtureRequest, name: str) -> Watched:
    """A fresh watched store of ``kind``; a PostgreSQL one in a schema of its own (dropped at
    teardown)."""
    if kind == "memory":
        return WatchedMemory()
    if kind == "sqlite":
        return WatchedSQLite(request.getfixturevalue("tmp_path") / f"{name}.db")
    server: Server = request.getfixturevalue("postgres_server")
    schema, dsn = fresh_schema(server.dsn)
    request.addfinalizer(lambda: drop_schema(server.dsn, schema))
    return WatchedPostgres(dsn)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def failing_store(request: pytest.FixtureRequest) -> Iterator[Watched]:
    """A fresh store of each kind whose binding write can be made to fail."""
    made = watched(request.param, request, "ada")
    try:
        yield made
    finally:
        made.close()  # type: ignore[attr-defined]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def two_stores(request: pytest.FixtureRequest) -> Iterator[tuple[Watched, Watched]]:
    """Two fresh, separate watched stores of each kind (two files, two schemas, two objects)."""
    made = (watched(request.param, request, "ada"), watched(request.param, request, "bob"))
    try:
        yield made
    finally:
        for each in made:
            each.close()  # type: ignore[attr-defined]


async def conversation(cm: ContextManager, turns: int = 2) -> list[str]:
    """``turns`` questions answered with signed thinking under ``PROBE_HEAD``, then one more."""
    client = Simulator(script=calling_script()).client()
    replies = []
    for n in range(turns):
        cm.add_message("user", f"Question {n}: what does the log say about part {n}?")
        result = cm.compile(PROBE_HEAD)
        reply = await client.beta.messages.create(**result.request)
        replies.append(cm.record_reply(reply, result))
    cm.add_message("user", "A last question about every part so far: " + "why " * 60)
    return replies


def head_changes(cm: ContextManager) -> list[Any]:
    return cm.messages(kind="head-change")


async def test_an_over_budget_compile_with_a_new_tool_stores_no_head_change(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    await conversation(cm)
    before = dump(store, "ada")

    with pytest.raises(OverBudget):
        cm.compile(WITH_GREP, budget=50)

    assert dump(store, "ada") == before
    cm.compile(PROBE_HEAD)
    assert head_changes(cm) == []  # nothing to take back: no compensating tool_removal


async def test_a_compile_refused_for_a_bad_head_or_budget_writes_nothing(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    await conversation(cm)
    before = dump(store, "ada")

    with pytest.raises(TypeError, match="compile needs a Head"):
        cm.compile("claude-opus-5-5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget must be a positive"):
        cm.compile(WITH_GREP, budget=0)

    assert dump(store, "ada") == before


async def test_a_summarizer_that_raises_leaves_the_store_as_it_was(store: Store) -> None:
    failing = [False]

    def summarize(covered: object) -> str:
        if failing[0]:
            raise RuntimeError("the summarizer is down")
        return "Earlier: questions about parts."

    cm = ContextManager.open(
        store, namespace="ada", strategy=Fold(summarize, trigger_tokens=100, keep_tokens=40)
    )
    await conversation(cm, turns=3)
    cm.add_message("user", "Another question, long enough to fold again: " + "why " * 80)
    failing[0] = True
    before = dump(store, "ada")

    with pytest.raises(RuntimeError, match="the summarizer is down"):
        cm.compile(WITH_GREP)

    assert dump(store, "ada") == before
    failing[0] = False
    cm.compile(PROBE_HEAD)
    assert head_changes(cm) == []


async def test_a_store_that_fails_mid_commit_keeps_none_of_the_compile(
    failing_store: Watched,
) -> None:
    store: Store = failing_store  # type: ignore[assignment]
    cm = ContextManager.open(store, namespace="ada")
    first, _ = await conversation(cm)
    cm.release_thinking(first)  # reported by the next compile: a binding write beside the change
    before = dump(store, "ada")

    failing_store.failing = True
    with pytest.raises(RuntimeError, match="the disk is full"):
        cm.compile(WITH_GREP)  # the head-change message is written, then the binding write fails
    failing_store.failing = False

    assert dump(store, "ada") == before
    result = cm.compile(WITH_GREP)  # the store works again: the change is appended once
    assert len(head_changes(cm)) == 1
    assert result.appended == (head_changes(cm)[0].id,)


def test_compiling_one_agent_never_writes_into_another_agents_store(
    two_stores: tuple[Watched, Watched],
) -> None:
    """Issue 27: the process-wide render cache compacts other agents' renders in memory only;
    a snapshot is written by a branch's own compile, into its own store."""
    ada_watched, bob_watched = two_stores
    ada_store: Store = ada_watched  # type: ignore[assignment]
    bob_store: Store = bob_watched  # type: ignore[assignment]
    ada = ContextManager.open(ada_store, namespace="ada")
    bob = ContextManager.open(bob_store, namespace="bob")
    ada.add_message("user", "Hello from Ada.")
    ada.compile(PROBE_HEAD)
    ada.add_message("user", "Ada again.")
    bob.add_message("user", "Hello from Bob.")
    before = dump(ada_store, "ada")
    ada_watched.writes.clear()

    bob.compile(PROBE_HEAD)  # built from bob's store: ada's render is compacted
    bob.add_message("user", "Bob again.")
    bob.compile(PROBE_HEAD)

    assert ada_watched.writes == []
    assert {namespace for _, namespace in bob_watched.writes} == {"bob"}
    assert dump(ada_store, "ada") == before
    assert ada_store.namespaces() == ["ada"]
    assert bob_store.namespaces() == ["bob"]
    assert bob_store.load_render("bob", bob.current_branch_key()) is not None
