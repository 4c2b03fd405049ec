"""Storing and reading messages: the same behaviour from ``MemoryStore`` and ``SQLiteStore``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from helpers import message_texts as texts

from context_manager import (
    REASONING_LOSS_KIND,
    ContextManager,
    Head,
    MessageMeta,
    MessageNotFound,
    Store,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)


def test_messages_read_back_oldest_first_with_role_and_content(store: Store) -> None:
    """What is added comes back in order, each with its role, content and branch."""
    cm = ContextManager.open(store)
    first = cm.add_message("user", "hello")
    second = cm.add_message(
        "assistant", [ThinkingBlock("", "sig-1"), {"type": "text", "text": "hi there"}]
    )
    third = cm.add_message("user", [TextBlock("how are you?")])

    expected = [
        (first, "user", (TextBlock("hello"),), cm.current_branch_key()),
        (
            second,
            "assistant",
            (ThinkingBlock("", "sig-1"), TextBlock("hi there")),
            cm.current_branch_key(),
        ),
        (third, "user", (TextBlock("how are you?"),), cm.current_branch_key()),
    ]
    assert expected == [(m.id, m.role, m.content, m.branch) for m in cm.messages()]


def test_get_message_returns_the_stored_message(store: Store) -> None:
    """``get_message`` returns exactly what ``messages`` lists, with an aware creation time."""
    cm = ContextManager.open(store)
    before = dt.datetime.now(dt.UTC)
    message_id = cm.add_message("user", "hello")

    message = cm.get_message(message_id)

    assert cm.messages() == [message]
    assert message.created_at.tzinfo == dt.UTC
    assert before <= message.created_at <= dt.datetime.now(dt.UTC)


def test_append_returns_what_a_later_get_returns(store: Store) -> None:
    """The record ``append`` hands back equals the one read back later, in every store."""
    cm = ContextManager.open(store)
    appended = store.append(
        "default",
        cm.current_branch_key(),
        "user",
        [ToolUseBlock("t1", "f", {"pair": (1, 2)})],
        MessageMeta(extra={"tags": ("a", "b")}),
    )

    fetched = store.get("default", appended.id)

    expected = (ToolUseBlock("t1", "f", {"pair": [1, 2]}),)
    assert expected == fetched.content
    assert appended == fetched


def test_the_caller_changing_its_dicts_later_does_not_change_the_stored_message(
    store: Store,
) -> None:
    """Content is copied on the way in: mutating the caller's wire dict afterwards has no effect."""
    cm = ContextManager.open(store)
    wire: dict[str, Any] = {"type": "tool_use", "id": "t1", "name": "f", "input": {"paths": ["a"]}}
    meta: dict[str, Any] = {"kind": "note", "extra": {"seen": ["x"]}}
    message_id = cm.add_message("assistant", [wire], metadata=meta)

    wire["input"]["paths"].append("b")
    meta["extra"]["seen"].append("y")

    stored = cm.get_message(message_id)
    expected = ((ToolUseBlock("t1", "f", {"paths": ["a"]}),), {"seen": ["x"]})
    assert expected == (stored.content, stored.metadata.extra)


def test_sequences_increase_across_branches_and_namespaces(store: Store) -> None:
    """Every append in a store gets a higher sequence and a new id, whatever its branch or agent."""
    ada = ContextManager.open(store, namespace="ada")
    bob = ContextManager.open(store, namespace="bob")
    written = [(ada, ada.add_message("user", "a1")), (bob, bob.add_message("user", "b1"))]
    ada.fork("side")
    written += [(ada, ada.add_message("user", "a2")), (bob, bob.add_message("user", "b2"))]
    ada.switch_branch("main")
    written += [(ada, ada.add_message("user", "a3")), (bob, bob.add_message("user", "b3"))]

    sequences = [cm.get_message(message_id).sequence for cm, message_id in written]
    ids = [message_id for _, message_id in written]

    assert sorted(set(sequences)) == sequences
    assert len(set(ids)) == len(ids)


def test_two_agents_in_one_store_never_see_each_others_messages(store: Store) -> None:
    """Namespaces are isolated: messages, ids, branches and kinds never cross between agents."""
    ada = ContextManager.open(store, namespace="ada")
    bob = ContextManager.open(store, namespace="bob")
    ada_id = ada.add_message("user", "for ada", metadata={"kind": "note"})
    bob_id = bob.add_message("user", "for bob", metadata={"kind": "note"})
    bob.fork("bob-only")

    expected = {
        "ada": ["for ada"],
        "ada notes": ["for ada"],
        "ada branches": ["main"],
        "bob": ["for bob"],
        "bob main": ["for bob"],
        "bob branches": ["main", "bob-only"],
        "namespaces": ["ada", "bob"],
    }
    assert expected == {
        "ada": texts(ada),
        "ada notes": texts(ada, kind="note"),
        "ada branches": [b.name for b in ada.list_branches()],
        "bob": texts(bob),
        "bob main": texts(bob, branch="main"),
        "bob branches": [b.name for b in bob.list_branches()],
        "namespaces": store.namespaces(),
    }
    assert ada.list_branches()[0] != bob.list_branches()[0]
    with pytest.raises(MessageNotFound, match=f"no message '{ada_id}' in namespace 'bob'"):
        bob.get_message(ada_id)
    with pytest.raises(MessageNotFound, match=f"no message '{bob_id}' in namespace 'ada'"):
        ada.edit_message(bob_id, "hijacked")
    assert texts(bob) == ["for bob"]


def test_reading_an_agent_that_has_written_nothing_does_not_create_it(store: Store) -> None:
    """Looking up a message in an unused namespace fails and lists no new namespace."""
    ContextManager.open(store, namespace="ada")
    with pytest.raises(MessageNotFound, match="no message 'msg_1' in namespace 'ghost'"):
        store.get("ghost", "msg_1")
    assert store.namespaces() == ["ada"]


def test_dropping_a_namespace_removes_that_agent_only(store: Store) -> None:
    """``drop_namespace`` forgets one agent's branches, messages, binding serial and render
    snapshots; others stay."""
    ada = ContextManager.open(store, namespace="ada")
    bob = ContextManager.open(store, namespace="bob")
    ada_id = ada.add_message("user", "ada's")
    bob.add_message("user", "bob's")
    for agent in (ada, bob):
        agent.compile(Head(model="claude-opus-5", system="s"))  # saves a render snapshot
        store.add_release(agent.namespace, agent.current_branch_key(), "msg_none", 0)

    store.drop_namespace("ada")

    expected = (["bob"], ["bob's"])
    assert expected == (store.namespaces(), texts(bob))
    assert store.load_render("ada", ada.current_branch_key()) is None
    assert store.load_render("bob", bob.current_branch_key()) is not None
    assert store.serials("ada") == (0, 0)
    assert store.serials("bob")[1] > 0
    with pytest.raises(MessageNotFound, match=f"no message '{ada_id}' in namespace 'ada'"):
        store.get("ada", ada_id)


def test_kind_filters_on_the_metadata_kind(store: Store) -> None:
    """``messages(kind=...)`` returns only messages of that kind, oldest first."""
    cm = ContextManager.open(store)
    cm.add_message("user", "plain")
    notice = {"system_notice": True, "kind": REASONING_LOSS_KIND, "target": "ada"}
    cm.add_message("user", "loss one", metadata=notice)
    cm.add_message("assistant", "reply")
    cm.add_message("user", "loss two", metadata=MessageMeta(kind=REASONING_LOSS_KIND))
    cm.add_message("user", "other", metadata={"kind": "audit"})

    expected: dict[str, list[str]] = {
        REASONING_LOSS_KIND: ["loss one", "loss two"],
        "audit": ["other"],
        "nothing-like-this": [],
    }
    assert expected == {kind: texts(cm, kind=kind) for kind in expected}


def test_since_and_limit_cut_the_read(store: Store) -> None:
    """``since`` keeps sequences above it; ``limit`` keeps the first that many; both combine."""
    cm = ContextManager.open(store)
    ids = [cm.add_message("user", f"m{i}") for i in range(6)]
    second = cm.get_message(ids[1]).sequence
    last = cm.get_message(ids[-1]).sequence

    expected: list[list[str]] = [
        ["m2", "m3", "m4", "m5"],
        ["m0", "m1"],
        ["m2", "m3"],
        [],
        [],
        ["m0", "m1", "m2", "m3", "m4", "m5"],
    ]
    assert expected == [
        texts(cm, since=second),
        texts(cm, limit=2),
        texts(cm, since=second, limit=2),
        texts(cm, limit=0),
        texts(cm, since=last),
        texts(cm, limit=100),
    ]


def test_a_negative_limit_is_refused(store: Store) -> None:
    """``limit=-1`` is a ValueError, not "everything" or "one"."""
    cm = ContextManager.open(store)
    cm.add_message("user", "m")
    with pytest.raises(ValueError, match="limit must be None or at least 0, got -1"):
        cm.messages(limit=-1)


def test_kind_and_limit_count_only_matching_messages(store: Store) -> None:
    """With ``kind`` and ``limit``, the limit counts messages of that kind."""
    cm = ContextManager.open(store)
    for i in range(5):
        cm.add_message("user", f"plain{i}")
        cm.add_message("user", f"note{i}", metadata={"kind": "note"})

    expected = ["note0", "note1", "note2"]
    assert expected == texts(cm, kind="note", limit=3)


def test_the_store_reads_the_tail_newest_first(store: Store) -> None:
    """``read(newest_first=True, limit=n)`` is the tail; ``last_sequence`` the newest sequence."""
    cm = ContextManager.open(store)
    ids = [cm.add_message("user", f"m{i}") for i in range(4)]
    lineage = cm.lineage()

    tail = store.read("default", lineage, limit=2, newest_first=True)

    expected = ([ids[3], ids[2]], cm.get_message(ids[3]).sequence)
    assert expected == ([m.id for m in tail], store.last_sequence("default", lineage))


def test_serials_and_read_are_the_serials_and_the_read_after_a_sequence_together(
    store: Store,
) -> None:
    """``serials_and_read`` (one round trip where the store has them) is ``serials`` and
    ``read(after=...)``, on a fork's two-segment lineage too."""
    cm = ContextManager.open(store)
    ids = [cm.add_message("user", f"m{i}") for i in range(3)]
    cm.fork("side")
    ids += [cm.add_message("user", f"s{i}") for i in range(2)]
    cm.edit_message(ids[1], "edited")
    lineage = cm.lineage()
    assert len(lineage) == 2

    for after in [0, *(cm.get_message(mid).sequence for mid in ids)]:
        changes, bindings, new = store.serials_and_read("default", lineage, after)
        assert (changes, bindings) == store.serials("default")
        assert new == store.read("default", lineage, after=after)
    assert [m.id for m in store.serials_and_read("default", lineage, 0)[2]] == ids


def test_a_missing_message_is_message_not_found(store: Store) -> None:
    """An unknown id raises ``MessageNotFound``, which is also a ``KeyError``."""
    cm = ContextManager.open(store, namespace="ada")
    with pytest.raises(MessageNotFound, match="no message 'msg_404' in namespace 'ada'") as info:
        cm.get_message("msg_404")
    assert isinstance(info.value, KeyError)
    assert (info.value.message_id, info.value.namespace) == ("msg_404", "ada")
    with pytest.raises(MessageNotFound, match="no message 'msg_404'"):
        cm.edit_message("msg_404", "new")


@pytest.mark.parametrize("role", ["robot", "User", "", None, "tool"])
def test_an_unknown_role_is_a_value_error_naming_it_and_writes_nothing(
    store: Store, role: object
) -> None:
    """Only user, assistant and system are roles; anything else is refused, naming it."""
    cm = ContextManager.open(store)
    with pytest.raises(ValueError, match=f"unknown role {role!r}; expected one of user, assistant"):
        cm.add_message(role, "hi")  # type: ignore[arg-type]
    assert cm.messages() == []


def test_a_system_message_is_stored_with_its_role(store: Store) -> None:
    """``role="system"`` (a mid-conversation system message) is a valid role."""
    cm = ContextManager.open(store)
    message_id = cm.add_message("system", "Tools changed.")
    assert cm.get_message(message_id).role == "system"


def test_content_that_is_not_blocks_is_refused_and_nothing_is_written(store: Store) -> None:
    """Bad content raises TypeError naming the item, before anything is stored."""
    cm = ContextManager.open(store)
    with pytest.raises(TypeError, match="content item 42 is neither a block"):
        cm.add_message("user", [TextBlock("fine"), 42])
    assert cm.messages() == []


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            [TextBlock("ok"), ToolUseBlock("t1", "f", {"when": dt.date(2026, 1, 1)})],
            r"content block 1 \(ToolUseBlock\(.*\)\) is not JSON-serialisable",
        ),
        (
            [ToolUseBlock("t1", "f", {"x": float("nan")})],
            r"content block 0 .* is not JSON-serialisable: Out of range float",
        ),
    ],
    ids=["date", "nan"],
)
def test_content_json_cannot_carry_is_refused_by_every_store_and_nothing_is_written(
    store: Store, content: list[object], match: str
) -> None:
    """Both stores refuse values JSON cannot carry, the same way, and write nothing."""
    cm = ContextManager.open(store)
    with pytest.raises(TypeError, match=match):
        cm.add_message("assistant", content)
    expected: tuple[list[object], tuple[str, int]] = ([], (cm.current_branch_key(), 0))
    assert expected == (cm.messages(), cm.branch_head())


def test_metadata_json_cannot_carry_is_refused_and_nothing_is_written(store: Store) -> None:
    """Metadata with a value JSON cannot carry is refused, naming it."""
    cm = ContextManager.open(store)
    with pytest.raises(TypeError, match=r"metadata MessageMeta\(.*\) is not JSON-serialisable"):
        cm.add_message("user", "x", metadata={"extra": {"ids": {1, 2}}})
    assert cm.messages() == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, MessageMeta()),
        (
            MessageMeta(system_notice=True, kind="reasoning-loss", target="ada"),
            MessageMeta(system_notice=True, kind="reasoning-loss", target="ada"),
        ),
        (
            {"system_notice": True, "kind": "reasoning-loss", "target": "ada"},
            MessageMeta(system_notice=True, kind="reasoning-loss", target="ada"),
        ),
        (
            MessageMeta(kind="audit", extra={"n": 1, "nested": {"list": [1, "two", None]}}),
            MessageMeta(kind="audit", extra={"n": 1, "nested": {"list": [1, "two", None]}}),
        ),
        (
            {"kind": "audit", "source": "cli", "extra": {"n": 1}},
            MessageMeta(kind="audit", extra={"n": 1, "source": "cli"}),
        ),
    ],
    ids=["none", "notice-record", "notice-dict", "extra", "unknown-keys-go-to-extra"],
)
def test_metadata_round_trips(store: Store, given: object, expected: MessageMeta) -> None:
    """``system_notice``, ``kind``, ``target`` and ``extra`` come back as they were stored."""
    cm = ContextManager.open(store)
    message_id = cm.add_message("user", "x", metadata=given)  # type: ignore[arg-type]
    assert expected == cm.get_message(message_id).metadata
    assert [expected] == [m.metadata for m in cm.messages()]


def test_metadata_of_the_wrong_type_is_a_type_error(store: Store) -> None:
    """Metadata must be a ``MessageMeta`` or a dict."""
    cm = ContextManager.open(store)
    with pytest.raises(TypeError, match="metadata must be a MessageMeta or a dict, got 'notice'"):
        cm.add_message("user", "x", metadata="notice")  # type: ignore[arg-type]
    assert cm.messages() == []


def test_an_edit_is_visible_everywhere_and_keeps_everything_else(store: Store) -> None:
    """An edited message reads back with its new content and its id, sequence, role, metadata."""
    cm = ContextManager.open(store)
    cm.add_message("user", "before")
    target = cm.add_message("assistant", "old words", metadata={"kind": "note", "target": "ada"})
    cm.add_message("user", "after")
    original = cm.get_message(target)

    edited = cm.edit_message(target, [TextBlock("new words"), ToolResultBlock("t1", "ok")])

    expected = (
        (TextBlock("new words"), ToolResultBlock("t1", "ok")),
        ["before", "new words", "after"],
        (original.id, original.sequence, original.role, original.metadata, original.branch),
    )
    assert expected == (
        edited.content,
        texts(cm),
        (edited.id, edited.sequence, edited.role, edited.metadata, edited.branch),
    )
    assert edited == cm.get_message(target)


def test_an_edit_is_seen_by_a_fork_that_shares_the_message(store: Store) -> None:
    """A fork reads the parent's stored messages, so an edit of one shows on both branches."""
    cm = ContextManager.open(store)
    shared = cm.add_message("user", "draft")
    cm.fork("side")

    cm.edit_message(shared, "final")

    expected = (["final"], ["final"])
    assert expected == (texts(cm), texts(cm, branch="main"))


def test_an_edit_with_bad_content_changes_nothing(store: Store) -> None:
    """A refused edit leaves the message as it was."""
    cm = ContextManager.open(store)
    message_id = cm.add_message("user", "keep me")
    with pytest.raises(TypeError, match="content item 3 is neither a block"):
        cm.edit_message(message_id, [3])
    assert texts(cm) == ["keep me"]


def test_strings_blocks_and_wire_dicts_store_as_the_same_blocks(store: Store) -> None:
    """A string, a wire dict and a block list for the same text all store the same content."""
    cm = ContextManager.open(store)
    ids = [
        cm.add_message("user", "same"),
        cm.add_message("user", {"type": "text", "text": "same"}),
        cm.add_message("user", [TextBlock("same")]),
    ]
    expected = [(TextBlock("same"),)] * 3
    assert expected == [cm.get_message(m).content for m in ids]


def test_both_stores_satisfy_the_store_protocol(store: Store) -> None:
    """``MemoryStore`` and ``SQLiteStore`` are both ``Store``s, so either can back an agent."""
    assert isinstance(store, Store)


@pytest.mark.parametrize("namespace", ["", None, 7])
def test_a_namespace_must_be_a_non_empty_string(store: Store, namespace: object) -> None:
    """``ContextManager.open`` refuses an empty or non-string namespace, naming it."""
    with pytest.raises(ValueError, match=f"must be a non-empty string, got {namespace!r}"):
        ContextManager.open(store, namespace=namespace)  # type: ignore[arg-type]
    assert store.namespaces() == []


def test_when_releases_meet_the_lower_from_block_wins_on_every_store(store: Store) -> None:
    """The binding record's release rules (``_store/_semantics.py``), the same on every store:
    a commit never raises a release nor moves its sequence; a pending lower release keeps what
    was reported; a pending release no lower than the stored one changes nothing."""
    cm = ContextManager.open(store, namespace="ada")
    branch = cm.current_branch_key()
    reply = cm.add_message("assistant", [ThinkingBlock("", "sig-1"), TextBlock("hi")])

    def release() -> Any:
        return store.releases("ada", branch, [reply])[reply]

    store.commit_binding(
        "ada", branch, first_compiled=True, releases=[(reply, 2)], reported=[], at_sequence=4
    )
    store.commit_binding(
        "ada", branch, first_compiled=True, releases=[(reply, 3)], reported=[], at_sequence=9
    )
    kept = release()
    assert (kept.from_block, kept.reported, kept.at_sequence) == (2, True, 4)

    store.add_release("ada", branch, reply, 5, at_sequence=10)
    assert release() == kept

    store.add_release("ada", branch, reply, 1, at_sequence=11)
    lowered = release()
    assert (lowered.from_block, lowered.reported, lowered.reported_from) == (1, False, 2)
    assert lowered.at_sequence == 11
    assert (lowered.reported_at(1), lowered.reported_at(2)) == (False, True)


def test_a_failed_batch_takes_back_the_branches_it_made_hid_or_switched_to(store: Store) -> None:
    """A batch is all or nothing for branches too, on every store."""
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "hello")

    def start_over_then_fail() -> None:
        with store.batch():
            made = store.create_branch("ada", "cleared-1")
            store.set_current_branch("ada", made.ref.name)
            store.delete_branch("ada", "main")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        start_over_then_fail()
    assert [b.ref.name for b in store.branches("ada")] == ["main"]
    assert store.current_branch_name("ada") == "main"
    assert texts(ContextManager.open(store, namespace="ada")) == ["hello"]
