"""The compile pipeline (issue 27): stages decide, one commit writes, a refused compile writes
nothing. Each test compares a full dump of the agent's stored messages, stamps and binding
records before and after a compile that raises, on every store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import PROBE_HEAD, calling_script

from context_manager import ContextManager, Fold, OverBudget, SQLiteStore, Store
from context_manager.simulator import Simulator

GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
WITH_GREP = attrs.evolve(PROBE_HEAD, tools=[*PROBE_HEAD.tools, GREP])


def dump(store: Store, namespace: str) -> list[Any]:
    """Everything the agent ``namespace`` keeps that a compile could write: each branch's
    messages (with their stamps) and its binding record."""
    out: list[Any] = []
    for branch in store.branches(namespace):
        messages = store.read(namespace, ((branch.key, None),))
        stamps = store.stamps(namespace, [m.id for m in messages])
        out.append((branch, messages, sorted(stamps.items())))
        record = store.binding_record(namespace, branch.key)
        out.append((record.first_compiled, sorted(record.releases.items()), record.anchor))
        out.append((sorted(record.left_out), record.anchored_head))
    return out


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


async def test_a_store_that_fails_mid_commit_keeps_none_of_the_compile(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    first, _ = await conversation(cm)
    cm.release_thinking(first)  # reported by the next compile: a binding write beside the change
    before = dump(store, "ada")
    real = store.commit_binding

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the disk is full")

    store.commit_binding = failing  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="the disk is full"):
            cm.compile(WITH_GREP)
    finally:
        store.commit_binding = real  # type: ignore[method-assign]

    assert dump(store, "ada") == before
    result = cm.compile(WITH_GREP)  # the store works again: the change is appended once
    assert len(head_changes(cm)) == 1
    assert result.appended == (head_changes(cm)[0].id,)


def test_compiling_one_agent_never_writes_into_another_agents_store(tmp_path: Path) -> None:
    """Issue 27: the process-wide render cache compacts other agents' renders in memory only;
    a snapshot is written by a branch's own compile, into its own store."""
    ada_store, bob_store = SQLiteStore(tmp_path / "ada.db"), SQLiteStore(tmp_path / "bob.db")
    try:
        ada = ContextManager.open(ada_store, namespace="ada")
        bob = ContextManager.open(bob_store, namespace="bob")
        ada.add_message("user", "Hello from Ada.")
        ada.compile(PROBE_HEAD)
        ada.add_message("user", "Ada again.")
        bob.add_message("user", "Hello from Bob.")
        written: list[tuple[str, str]] = []
        real = ada_store.save_render

        def spy(namespace: str, branch: str, header: str, blob: bytes) -> None:
            written.append((namespace, branch))
            real(namespace, branch, header, blob)

        ada_store.save_render = spy  # type: ignore[method-assign]
        before = ada_store.load_render("ada", ada.current_branch_key())

        bob.compile(PROBE_HEAD)  # built from bob's store: ada's render is compacted

        assert written == []
        assert ada_store.load_render("ada", ada.current_branch_key()) == before
        assert bob_store.load_render("bob", bob.current_branch_key()) is not None
    finally:
        ada_store.close()
        bob_store.close()
