"""Branches: forks see their parent's prefix and nothing after, on every store."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from helpers import PROBE_HEAD, RacedStore, calling_script
from helpers import message_texts as texts

from context_manager import (
    BranchExists,
    BranchInUse,
    BranchNotFound,
    BranchRef,
    ContextManager,
    MemoryStore,
    MessageNotFound,
    SQLiteStore,
    Store,
    TextBlock,
    Window,
    branch_key,
)
from context_manager.simulator import Simulator


def names(cm: ContextManager) -> list[str]:
    return [ref.name for ref in cm.list_branches()]


def test_a_new_agent_starts_on_main(store: Store) -> None:
    """Opening a namespace for the first time creates and selects the ``main`` branch."""
    cm = ContextManager.open(store, namespace="ada")
    expected = (["main"], "main", (cm.current_branch_key(), 0))
    assert expected == (names(cm), cm.current_branch().name, cm.branch_head())
    assert branch_key(cm.current_branch()) == cm.current_branch_key()


def test_two_hosts_opening_one_new_agent_at_once_both_start_on_its_one_main_branch(
    two_hosts: tuple[Store, Store],
) -> None:
    """The other host makes ``main`` between this one's look and its creation: this open goes
    on the branch the other made, where before it failed with ``BranchExists``."""
    first, second = two_hosts
    cm = ContextManager.open(RacedStore(first, second, "main"), namespace="ada")
    other = ContextManager.open(second, namespace="ada")
    assert names(cm) == names(other) == ["main"]
    assert cm.current_branch_key() == other.current_branch_key()
    cm.add_message("user", "from the first host")
    assert texts(other) == ["from the first host"]


def test_a_fork_sees_the_parent_up_to_the_fork_point_and_nothing_after(store: Store) -> None:
    """After ``fork``, later messages on the parent stay on the parent, and the fork's on it."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m1")
    cm.add_message("assistant", "m2")

    forked = cm.fork("experiment")
    cm.add_message("user", "e1")
    cm.switch_branch("main")
    cm.add_message("user", "m3")

    expected = {
        "current": "main",
        "main": ["m1", "m2", "m3"],
        "experiment": ["m1", "m2", "e1"],
        "branches": ["main", "experiment"],
    }
    assert expected == {
        "current": cm.current_branch().name,
        "main": texts(cm),
        "experiment": texts(cm, branch="experiment"),
        "branches": names(cm),
    }
    assert forked == cm.list_branches()[1]


def test_fork_switches_to_the_new_branch(store: Store) -> None:
    """``fork`` makes the new branch current, so the next message lands there."""
    cm = ContextManager.open(store)
    cm.add_message("user", "shared")
    ref = cm.fork("side")
    cm.add_message("user", "side only")

    expected = (ref, ["shared", "side only"], ["shared"])
    assert expected == (cm.current_branch(), texts(cm), texts(cm, branch="main"))


def test_a_fork_of_an_empty_branch_sees_none_of_the_parents_later_messages(store: Store) -> None:
    """Forking before anything is written gives an empty fork that stays empty of the parent."""
    cm = ContextManager.open(store)
    cm.fork("early")
    cm.switch_branch("main")
    cm.add_message("user", "later on main")

    expected: tuple[list[str], list[str]] = (["later on main"], [])
    assert expected == (texts(cm), texts(cm, branch="early"))


def test_branch_at_an_earlier_message_sees_up_to_it_and_does_not_switch(store: Store) -> None:
    """``branch_at`` starts a branch that sees history up to that message; current stays put."""
    cm = ContextManager.open(store)
    m1 = cm.add_message("user", "m1")
    cm.add_message("assistant", "m2")
    cm.add_message("user", "m3")

    ref = cm.branch_at(m1, "retry")

    assert cm.current_branch().name == "main"
    assert texts(cm, branch="retry") == ["m1"]
    cm.switch_branch("retry")
    cm.add_message("assistant", "m2 again")
    expected = (ref, ["m1", "m2 again"], ["m1", "m2", "m3"])
    assert expected == (cm.current_branch(), texts(cm), texts(cm, branch="main"))


def test_branch_at_a_message_the_current_branch_cannot_see_is_refused(store: Store) -> None:
    """A message written on another branch after the fork cannot be a branch point here."""
    cm = ContextManager.open(store)
    cm.add_message("user", "shared")
    cm.fork("side")
    side_only = cm.add_message("user", "side only")
    cm.switch_branch("main")

    with pytest.raises(ValueError, match=f"message '{side_only}' is not on branch 'main'"):
        cm.branch_at(side_only, "impossible")
    with pytest.raises(MessageNotFound, match="no message 'msg_nope'"):
        cm.branch_at("msg_nope", "impossible")
    assert names(cm) == ["main", "side"]


def test_switching_to_the_current_branch_is_a_no_op(store: Store) -> None:
    """``switch_branch`` to the branch already current returns it and changes nothing."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m1")
    before = (cm.current_branch(), cm.branch_head(), cm.list_branches(), cm.messages())

    returned = cm.switch_branch("main")

    assert returned == before[0]
    assert before == (cm.current_branch(), cm.branch_head(), cm.list_branches(), cm.messages())


def test_switching_to_an_unknown_branch_lists_the_known_ones(store: Store) -> None:
    """An unknown name raises ``BranchNotFound`` (a ``KeyError``) naming every live branch."""
    cm = ContextManager.open(store)
    cm.fork("zeta")
    cm.fork("alpha")

    with pytest.raises(
        BranchNotFound, match=r"no branch 'nope'; known branches: 'alpha', 'main', 'zeta'"
    ) as info:
        cm.switch_branch("nope")

    assert isinstance(info.value, KeyError)
    assert info.value.known == ["alpha", "main", "zeta"]
    assert cm.current_branch().name == "alpha"


def test_reading_an_unknown_branch_is_branch_not_found(store: Store) -> None:
    """``messages(branch=...)`` with a name that does not exist raises ``BranchNotFound``."""
    cm = ContextManager.open(store)
    with pytest.raises(BranchNotFound, match="no branch 'ghost'; known branches: 'main'"):
        cm.messages(branch="ghost")


def test_a_duplicate_branch_name_is_refused_and_nothing_is_written(store: Store) -> None:
    """``fork`` or ``branch_at`` to a live branch's name raises ``BranchExists``; nothing moves."""
    cm = ContextManager.open(store)
    m1 = cm.add_message("user", "m1")
    cm.fork("side")
    cm.add_message("user", "s1")
    before = (cm.current_branch(), cm.list_branches(), cm.messages(), cm.branch_head())

    with pytest.raises(BranchExists, match="branch 'side' already exists; pick another name"):
        cm.fork("side")
    with pytest.raises(BranchExists, match="branch 'main' already exists"):
        cm.fork("main")
    with pytest.raises(BranchExists, match="branch 'main' already exists"):
        cm.branch_at(m1, "main")

    assert before == (cm.current_branch(), cm.list_branches(), cm.messages(), cm.branch_head())


def test_a_deleted_and_recreated_branch_is_a_different_branch(store: Store) -> None:
    """Re-creating a deleted name gives a new key and none of the old branch's messages."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m1")
    old = cm.fork("side")
    cm.add_message("user", "old side")
    cm.switch_branch("main")
    cm.delete_branch("side")
    cm.add_message("user", "m2")

    new = cm.fork("side")

    assert old.name == new.name
    assert branch_key(old) != branch_key(new)
    expected = ["m1", "m2"]
    assert expected == texts(cm)


def test_deleting_the_current_branch_is_refused(store: Store) -> None:
    """The current branch cannot be deleted; ``BranchInUse`` says to switch first."""
    cm = ContextManager.open(store)
    cm.fork("side")
    with pytest.raises(BranchInUse, match="branch 'side' is the current branch; switch to another"):
        cm.delete_branch("side")
    assert names(cm) == ["main", "side"]


def test_deleting_an_unknown_branch_is_branch_not_found(store: Store) -> None:
    """Deleting a name that is not a live branch lists the live ones."""
    cm = ContextManager.open(store)
    with pytest.raises(BranchNotFound, match="no branch 'ghost'; known branches: 'main'"):
        cm.delete_branch("ghost")


def test_a_deleted_branchs_messages_are_still_stored(store: Store) -> None:
    """Deleting hides the branch, never its messages: ``get_message`` still finds them."""
    cm = ContextManager.open(store)
    cm.fork("doomed")
    kept = cm.add_message("user", "still here")
    cm.switch_branch("main")

    deleted = cm.delete_branch("doomed")

    assert deleted.name == "doomed"
    assert names(cm) == ["main"]
    assert cm.get_message(kept).content == (TextBlock("still here"),)
    with pytest.raises(BranchNotFound, match="no branch 'doomed'"):
        cm.switch_branch("doomed")


def test_a_fork_keeps_its_view_when_its_parent_is_deleted(store: Store) -> None:
    """A fork reads its parent's prefix through the lineage, even after the parent is deleted."""
    cm = ContextManager.open(store)
    cm.fork("parent")
    cm.add_message("user", "from parent")
    cm.fork("child")
    cm.add_message("user", "from child")
    cm.switch_branch("main")

    cm.delete_branch("parent")

    expected = ["from parent", "from child"]
    assert expected == texts(cm, branch="child")


def test_branch_head_is_the_key_and_newest_visible_sequence(store: Store) -> None:
    """``branch_head`` is ``(key, sequence)``; a fork's head does not move when the parent grows."""
    cm = ContextManager.open(store)
    main_key = cm.current_branch_key()
    assert cm.branch_head() == (main_key, 0)
    first = cm.get_message(cm.add_message("user", "m1")).sequence
    assert cm.branch_head() == (main_key, first)

    cm.fork("side")
    side_key = cm.current_branch_key()
    assert cm.branch_head() == (side_key, first)
    cm.switch_branch("main")
    second = cm.get_message(cm.add_message("user", "m2")).sequence
    assert cm.branch_head() == (main_key, second)
    cm.switch_branch("side")
    assert cm.branch_head() == (side_key, first)


def test_nested_forks_each_see_their_own_prefix(store: Store) -> None:
    """A fork of a fork of a fork sees every ancestor up to its own fork point, and no later."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m1")
    cm.fork("a")
    cm.add_message("user", "a1")
    cm.fork("b")
    cm.add_message("user", "b1")
    cm.fork("c")
    cm.add_message("user", "c1")
    for name in ("main", "a", "b"):
        cm.switch_branch(name)
        cm.add_message("user", f"{name} late")

    expected = {
        "main": ["m1", "main late"],
        "a": ["m1", "a1", "a late"],
        "b": ["m1", "a1", "b1", "b late"],
        "c": ["m1", "a1", "b1", "c1"],
    }
    assert expected == {name: texts(cm, branch=name) for name in expected}


def test_a_nested_branch_at_cuts_every_ancestor_at_the_lowest_point(store: Store) -> None:
    """Branching at an early message of a fork hides the fork's and the parent's later messages."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m1")
    m2 = cm.add_message("user", "m2")
    cm.add_message("user", "m3")
    cm.fork("a")
    cm.add_message("user", "a1")

    cm.branch_at(m2, "early")

    expected = ["m1", "m2"]
    assert expected == texts(cm, branch="early")


def test_the_current_branch_is_kept_in_the_store(store: Store) -> None:
    """A second context manager on the same store and namespace opens on the same branch."""
    cm = ContextManager.open(store, namespace="ada")
    cm.fork("side")
    cm.add_message("user", "s1")

    again = ContextManager.open(store, namespace="ada")

    expected = (cm.current_branch(), ["s1"], cm.list_branches())
    assert expected == (again.current_branch(), texts(again), again.list_branches())


def test_list_branches_is_oldest_first(store: Store) -> None:
    """``list_branches`` orders live branches by creation."""
    cm = ContextManager.open(store)
    for name in ("c", "a", "b"):
        cm.fork(name)
    refs = cm.list_branches()
    expected = ["main", "c", "a", "b"]
    assert expected == [r.name for r in refs]
    assert sorted(r.created for r in refs) == [r.created for r in refs]
    assert all(isinstance(r, BranchRef) for r in refs)


def _model_step(
    rng: random.Random,
    cm: ContextManager,
    model: dict[str, list[str]],
    current: list[str],
    step: int,
) -> None:
    """One random branch operation on ``cm`` and the same on a plain-list model."""
    action = rng.choice(["add", "add", "add", "fork", "branch_at", "switch", "delete"])
    here = current[0]
    if action == "add":
        text = f"t{step}"
        cm.add_message("user", text)
        model[here].append(text)
    elif action == "fork":
        name = f"f{step}"
        cm.fork(name)
        model[name] = list(model[here])
        current[0] = name
    elif action == "branch_at" and model[here]:
        cut = rng.randrange(len(model[here]))
        message = cm.messages()[cut]
        cm.branch_at(message.id, f"b{step}")
        model[f"b{step}"] = model[here][: cut + 1]
    elif action == "switch":
        name = rng.choice(sorted(model))
        cm.switch_branch(name)
        current[0] = name
    elif action == "delete" and len(model) > 1:
        name = rng.choice(sorted(set(model) - {here}))
        cm.delete_branch(name)
        del model[name]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_branch_operations_match_a_simple_model(store: Store, seed: int) -> None:
    """Seeded random adds, forks, branch_ats, switches and deletes agree with copied lists."""
    rng = random.Random(seed)
    cm = ContextManager.open(store)
    model: dict[str, list[str]] = {"main": []}
    current = ["main"]
    for step in range(120):
        _model_step(rng, cm, model, current, step)
        assert sorted(model) == sorted(names(cm))
        assert current[0] == cm.current_branch().name
        assert model[current[0]] == texts(cm)
    assert model == {name: texts(cm, branch=name) for name in model}


def test_memory_and_sqlite_stores_give_identical_views(sqlite_path: Any) -> None:
    """The same operations on both stores give the same branch names, texts and sequences."""
    views = []
    for made in (MemoryStore(), SQLiteStore(sqlite_path)):
        rng = random.Random(7)
        cm = ContextManager.open(made)
        model: dict[str, list[str]] = {"main": []}
        current = ["main"]
        for step in range(80):
            _model_step(rng, cm, model, current, step)
        views.append(
            {
                ref.name: [(m.sequence, m.id, m.role, m.content) for m in cm.messages(ref.name)]
                for ref in cm.list_branches()
            }
        )
        made.close()
    assert views[0] == views[1]


@pytest.mark.parametrize("shed", [True, False])
async def test_a_branch_made_inside_an_earlier_tool_round_starts_its_window_where_the_round_did(
    shed: bool,
) -> None:
    """A window does not jump mid-round (the round's reply goes out as recorded, VENDOR_RULES
    6): a branch made at a tool result of an earlier round has no window start of its own, so
    it starts where the round's reply was made (its stamp records that), not where a fresh
    window over the whole branch would, which changed the reply's prefix (a provider drop)."""
    sim = Simulator(script=calling_script("probe"))
    cm = ContextManager.open(
        MemoryStore(), namespace="ada", strategy=Window(300, shed_thinking=shed)
    )
    client = sim.client()
    at: str | None = None
    made_under: str | None = None
    for n in range(12):
        cm.add_message("user", f"question {n} " + "w" * 60 + (" use tool" if n == 5 else ""))
        result = cm.compile(PROBE_HEAD)
        reply = await client.beta.messages.create(**result.request)
        cm.record_reply(reply, result)
        if reply.stop_reason == "tool_use":
            made_under = json.dumps(result.request["messages"][0])
            use = reply.content[-1]
            assert use.type == "tool_use"
            results = [{"type": "tool_result", "tool_use_id": use.id, "content": "fine"}]
            at = cm.add_message("user", results)
            after = cm.compile(PROBE_HEAD)
            cm.record_reply(await client.beta.messages.create(**after.request), after)
    assert at is not None
    cm.branch_at(at, "retry")
    cm.switch_branch("retry")

    retry = cm.compile(PROBE_HEAD)
    reply = await client.beta.messages.create(**retry.request)

    assert json.dumps(retry.request["messages"][0]) == made_under
    assert reply.input_transformations == []
    assert "thinking" in [b["type"] for b in retry.request["messages"][-2]["content"]]
