"""The documented binding rules in the compiler (VENDOR_RULES 4, 8, 9; SPEC 7).

Each test states what a host can rely on: removing the oldest thinking never costs a later
block, a gap costs the blocks that recorded the removed one, and a model switch follows the
documented readability table.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    SQLiteStore,
    Store,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    ThinkingStrip,
    Window,
    documented_prefix_check,
    documented_readability,
)
from context_manager._binding import (
    BlockStamp,
    LegacyStamp,
    Stamp,
    in_order,
    judge,
    parse_stamp,
)
from context_manager._model._stamps import stamp_to_json
from notices import ReasoningLossTeller
from notices._turn import TurnState

IDLE = TurnState(live=False, branch_key=None, head_sequence=0)

STRIPS = ThinkingBinding(append_changes=False)
"""Head changes strip: these rules are about what a strip leaves out (appending is SPEC 7b's,
``tests/compile/test_append.py``)."""
HEAD = Head(
    model="claude-opus-5-5",  # runs the prefix check (VENDOR_RULES 10)
    system="You are Ada.",
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)

_signatures = itertools.count()


def reply(text: str) -> list[dict[str, Any]]:
    """A reply with one signed thinking block, then text."""
    return [
        {"type": "thinking", "thinking": "", "signature": f"sig-{next(_signatures)}"},
        {"type": "text", "text": text},
    ]


def sent_replies(cm: ContextManager, result: CompileResult) -> list[str]:
    """Stored ids of the replies whose thinking ``result`` sends, oldest first."""
    out: list[str] = []
    for entry in result.provenance:
        for source in entry.sources:
            if source.signatures:
                out.append(source.message_id)
    return out


def history(cm: ContextManager, head: Head, turns: int) -> list[str]:
    ids = []
    for n in range(turns):
        cm.add_message("user", f"question {n}")
        ids.append(cm.record_reply(reply(f"answer {n}"), cm.compile(head)))
    cm.add_message("user", "next")
    return ids


def test_releasing_the_oldest_replys_thinking_keeps_every_later_block(store: Store) -> None:
    """VENDOR_RULES 4: removing thinking from the start of the history is valid."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[0])
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids[1:]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[0],)


def test_releasing_the_two_oldest_keeps_the_rest(store: Store) -> None:
    """VENDOR_RULES 4: a leading run of removed blocks leaves no gap."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[0])
    cm.release_thinking(ids[1])
    assert sent_replies(cm, cm.compile(HEAD)) == ids[2:]


def test_a_release_in_the_middle_costs_only_the_blocks_after_it(store: Store) -> None:
    """VENDOR_RULES 4: a gap fails the block that recorded the removed one, and so on in turn."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[2])
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids[:2]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[2], ids[3])


def test_a_switch_to_a_model_that_reads_the_blocks_keeps_them(store: Store) -> None:
    """VENDOR_RULES 8, 9: Opus 5.5 reads Opus 5 blocks; the model is not part of the prefix."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, attrs.evolve(HEAD, model="claude-opus-5"), 3)
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids
    assert result.thinking_strip is None
    assert result.unreadable == ()


MYTHOS = attrs.evolve(HEAD, model="claude-mythos-5-1")


def test_on_a_model_that_runs_no_prefix_check_a_changed_head_and_a_gap_strip_nothing(
    store: Store,
) -> None:
    """VENDOR_RULES 10: Mythos 5.1 runs no prefix check, so a changed system, an edited earlier
    message and a released middle block cost no other block: everything it reads is sent."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, MYTHOS, 4)
    cm.edit_message(cm.messages()[0].id, [TextBlock("question 0, edited")])
    cm.release_thinking(ids[1])
    changed = attrs.evolve(MYTHOS, system="You are Ada, terse.")
    result = cm.compile(changed)
    assert sent_replies(cm, result) == [ids[0], *ids[2:]]
    assert result.thinking_strip is not None  # only the released block, as released
    assert result.thinking_strip.replies == (ids[1],)
    assert cm.compile(changed).thinking_strip is None


def test_on_such_a_model_a_block_edited_itself_still_stays_out(store: Store) -> None:
    """VENDOR_RULES 12: a block whose own text changed is refused by every model; the stamp's
    per-block digest tells it apart from a change before it, so only that block stays out."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, MYTHOS, 3)
    edited = cm.get_message(ids[1])
    thinking = edited.content[0]
    assert isinstance(thinking, ThinkingBlock)
    cm.edit_message(ids[1], [ThinkingBlock("made up", thinking.signature), *edited.content[1:]])
    result = cm.compile(MYTHOS)
    assert sent_replies(cm, result) == [ids[0], ids[2]]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[1],)


def test_a_switch_from_such_a_model_to_one_that_checks_strips_what_fails_there(
    store: Store,
) -> None:
    """The check belongs to the request's model: Fable 5.1 reads Mythos 5.1's blocks, but
    they were made under the old system text, so a request to it strips them (``head``)."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, MYTHOS, 2)
    changed = attrs.evolve(MYTHOS, system="You are Ada, terse.")
    assert sent_replies(cm, cm.compile(changed)) == ids
    result = cm.compile(attrs.evolve(changed, model="claude-fable-5-1"))
    assert sent_replies(cm, result) == []
    assert result.thinking_strip is not None
    strip = result.thinking_strip
    assert (strip.cause, strip.changed) == ("head", ("system", "model"))  # every difference


def test_a_prefix_check_callable_replaces_the_documented_list(store: Store) -> None:
    cm = ContextManager.open(
        store, namespace="ada", binding=attrs.evolve(STRIPS, prefix_check=lambda model: True)
    )
    history(cm, MYTHOS, 2)
    assert sent_replies(cm, cm.compile(attrs.evolve(MYTHOS, system="Changed."))) == []


def test_the_default_binding_uses_the_documented_prefix_check() -> None:
    assert ThinkingBinding().prefix_check is documented_prefix_check


def test_a_switch_to_a_model_that_cannot_read_them_sends_them_and_reports_a_model_change(
    store: Store,
) -> None:
    """VENDOR_RULES 8, 9: Opus 5 does not read Opus 5.5 blocks; they are still sent (the API
    drops them, never a 400), named in ``unreadable``, and reported as lost to the model."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    older = attrs.evolve(HEAD, model="claude-opus-5")
    ids = history(cm, HEAD, 2)
    result = cm.compile(older)
    assert sent_replies(cm, result) == ids
    assert result.unreadable == ("messages.1.content.0", "messages.3.content.0")
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.changed) == ("head", ("model",))
    assert result.thinking_strip.replies == tuple(ids)
    again = cm.compile(older)
    assert (again.thinking_strip, again.restored, again.unreadable) == (
        None,
        (),
        result.unreadable,
    )


def test_a_custom_readability_table_decides_the_model_check(store: Store) -> None:
    """``ThinkingBinding(reads=...)`` replaces the documented table."""
    cm = ContextManager.open(
        store, namespace="ada", binding=ThinkingBinding(reads=lambda reader, producer: True)
    )
    ids = history(cm, HEAD, 2)
    other = Head(model="claude-fable-5-1", system=HEAD.system, settings=HEAD.settings)
    assert sent_replies(cm, cm.compile(other)) == ids


def test_the_default_binding_uses_the_documented_table() -> None:
    assert ThinkingBinding().reads is documented_readability


@pytest.mark.parametrize(
    ("reader", "producer", "readable"),
    [
        ("claude-opus-5-5", "claude-opus-5", True),
        ("claude-opus-5-5", "claude-sonnet-5", True),
        ("claude-opus-5-5", "claude-fable-5-1", False),
        ("claude-opus-5", "claude-opus-5-5", False),
        ("claude-fable-5-1", "claude-mythos-5-1", True),
        ("claude-mythos-5-1", "claude-opus-5-5", True),
        ("claude-sonnet-5-5", "claude-haiku-5-5", True),
        ("claude-haiku-5-5", "claude-opus-5", False),
        ("claude-haiku-5-5", "claude-haiku-5-5-20260101", True),
        ("claude-sonnet-5-5", "claude-sonnet-5", False),
    ],
)
def test_the_documented_table_reads_as_vendor_rules_9(
    reader: str, producer: str, readable: bool
) -> None:
    assert documented_readability(reader, producer) is readable


def test_a_block_is_in_order_with_nothing_kept_before_it_or_its_own_predecessor() -> None:
    """VENDOR_RULES 4, the order rule on signature digests."""
    assert in_order(None, "x")
    assert in_order("x", "x")
    assert not in_order("y", "x")
    assert not in_order("y", None)


def test_a_stamp_without_the_block_reads_as_unstamped() -> None:
    stamp = parse_stamp({"v": 2, "model": "m", "head": {}, "seals": {}, "pred": {}})
    assert isinstance(stamp, Stamp)
    verdict = judge(
        stamp,
        0,
        "s",
        reader="m",
        digests={},
        bound=("system",),
        reads=documented_readability,
        last_kept=None,
    )
    assert verdict.verdict == "unstamped"


def test_a_stored_stamp_is_read_into_per_block_entries() -> None:
    raw = {
        "v": 2,
        "model": "m",
        "head": {"system": "s"},
        "seals": {"0": "a", "2": "b"},
        "pred": {"0": None, "2": "p"},
        "own": {"0": "o", "2": "q"},
        "start": 7,
    }
    assert parse_stamp(raw) == Stamp(
        model="m",
        head={"system": "s"},
        blocks={0: BlockStamp("a", None, "o"), 2: BlockStamp("b", "p", "q")},
        owns=True,
        start=7,
    )
    legacy = {"v": 1, "head": {"system": "s"}, "seals": {"1": "c"}}
    assert parse_stamp(legacy) == LegacyStamp(None, {"system": "s"}, {1: "c"})


def test_a_stamp_written_as_a_store_keeps_it_reads_back_equal() -> None:
    current = parse_stamp({"v": 2, "model": "m", "head": {}, "seals": {"3": "a"}, "pred": {}})
    legacy = LegacyStamp("m", {"system": "s"}, {1: "c"})
    for stamp in (current, legacy):
        assert stamp is not None
        assert parse_stamp(stamp_to_json(stamp)) == stamp


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param({"v": 2, "head": {}, "seals": {"0": 5}, "pred": {}}, id="seal-not-text"),
        pytest.param({"v": 2, "head": {}, "seals": {"x": "a"}, "pred": {}}, id="index-not-int"),
        pytest.param({"v": 2, "head": {}, "seals": {}}, id="no-predecessors"),
        pytest.param({"v": 1, "head": "h", "seals": {}}, id="legacy-head-not-a-mapping"),
        pytest.param(["v", 2], id="not-an-object"),
    ],
)
def test_a_malformed_stamp_reads_as_none_and_is_logged_once_per_row(raw: object) -> None:
    logged: set[tuple[object, ...]] = set()
    with capture_logs() as logs:
        assert parse_stamp(raw, "m1", logged=logged) is None
        assert parse_stamp(raw, "m1", logged=logged) is None
        assert parse_stamp(raw, "m2", logged=logged) is None
    warnings = [e for e in logs if e["event"] == "stamp_unreadable"]
    assert [(w["message_id"], w["log_level"]) for w in warnings] == [
        ("m1", "warning"),
        ("m2", "warning"),
    ]


# left out versus released (SPEC 7)

SYSTEM_B = Head(model=HEAD.model, system="You are Bea.", settings=HEAD.settings)


def test_a_head_changed_back_sends_the_withheld_thinking_again_and_names_it_restored(
    store: Store,
) -> None:
    """VENDOR_RULES 5, 8: a head change only withholds; the blocks verify again under A."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 3)
    under_b = cm.compile(SYSTEM_B)
    assert sent_replies(cm, under_b) == []
    assert under_b.thinking_strip is not None
    assert under_b.thinking_strip.replies == tuple(ids)
    back = cm.compile(HEAD)
    assert sent_replies(cm, back) == ids
    assert back.thinking_strip is None
    assert back.restored == tuple(ids)


def test_a_strip_reports_only_what_is_newly_left_out(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    history(cm, HEAD, 2)
    assert cm.compile(SYSTEM_B).thinking_strip is not None
    cm.add_message("user", "more")
    again = cm.compile(SYSTEM_B)
    assert again.thinking_strip is None
    assert again.restored == ()


def test_a_reopened_store_remembers_what_was_left_out(sqlite_path: Path) -> None:
    store = SQLiteStore(sqlite_path)
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 2)
    assert cm.compile(SYSTEM_B).thinking_strip is not None
    store.close()
    reopened_store = SQLiteStore(sqlite_path)
    reopened = ContextManager.open(reopened_store, namespace="ada", binding=STRIPS)
    assert reopened.compile(SYSTEM_B).thinking_strip is None
    assert reopened.compile(HEAD).restored == tuple(ids)
    reopened_store.close()


def test_a_switch_back_to_a_reading_model_restores_the_blocks(store: Store) -> None:
    """VENDOR_RULES 8: switching back to a model that reads them makes them usable again."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 2)
    assert sent_replies(cm, cm.compile(attrs.evolve(HEAD, model="claude-opus-5"))) == ids
    back = cm.compile(HEAD)
    assert sent_replies(cm, back) == ids
    assert back.restored == tuple(ids)
    assert back.unreadable == ()


def test_a_dry_compile_under_a_changed_head_changes_nothing(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    history(cm, HEAD, 2)
    assert cm.compile(SYSTEM_B, dry_run=True).thinking_strip is not None
    assert cm.compile(HEAD).restored == ()


def test_observers_hear_the_restored_replies_once(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 2)
    heard: list[tuple[tuple[str, ...], str]] = []
    cm.on_thinking_restored(lambda replies, key: heard.append((replies, key)))
    cm.compile(SYSTEM_B)
    cm.compile(HEAD)
    cm.compile(HEAD)
    assert heard == [(tuple(ids), cm.current_branch_key())]


def test_the_teller_forgets_restored_replies_so_a_later_loss_is_told_again(
    store: Store,
) -> None:
    """SPEC 9: a reply whose withheld thinking is sent again leaves the told set."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 1)
    teller = ReasoningLossTeller(lambda agent, mid: store.get("ada", mid))
    key = cm.current_branch_key()
    lines: list[str | None] = []
    cm.on_thinking_strip(lambda strip, k: lines.append(teller.for_strip("ada", k, strip, IDLE)))
    cm.on_thinking_restored(lambda replies, k: teller.restored("ada", k, replies))
    cm.compile(SYSTEM_B)
    cm.compile(HEAD)
    cm.compile(SYSTEM_B)
    assert len([line for line in lines if line]) == 2
    assert ids
    assert teller.told_count("ada", key) == 0


# shedding (SPEC 7)


def heavy_history(cm: ContextManager, turns: int) -> list[str]:
    """Replies whose thinking dominates the tokens."""
    ids = []
    for n in range(turns):
        cm.add_message("user", f"question {n}")
        result = cm.compile(HEAD)
        thought = {"type": "thinking", "thinking": "x" * 400, "signature": f"s{next(_signatures)}"}
        ids.append(cm.record_reply([thought, {"type": "text", "text": f"a{n}"}], result))
    cm.add_message("user", "next")
    return ids


def test_a_window_sheds_the_oldest_thinking_before_it_jumps(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", strategy=Window(1_000), binding=STRIPS)
    ids = heavy_history(cm, 12)
    result = cm.compile(HEAD)
    sent = sent_replies(cm, result)
    assert sent == ids[len(ids) - len(sent) :]
    assert 0 < len(sent) < len(ids)
    assert result.request["messages"][0]["content"][0]["text"] == "question 0"
    assert result.tokens <= 1_000 + 100
    later = cm.compile(HEAD)
    assert later.thinking_strip is None
    assert sent_replies(cm, later) == sent


def test_shed_replies_are_released_and_reported_as_messages(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", strategy=Window(1_000), binding=STRIPS)
    strips: list[ThinkingStrip] = []
    cm.on_thinking_strip(lambda strip, key: strips.append(strip))
    ids = heavy_history(cm, 12)
    cm.compile(HEAD)
    assert strips
    shed = [reply for strip in strips for reply in strip.replies]
    assert shed == ids[: len(shed)]
    assert {strip.cause for strip in strips} <= {"first", "messages"}
    record = store.binding_record("ada", cm.current_branch_key())
    assert set(shed) <= set(record.releases)


def test_a_window_without_shedding_jumps_as_before(store: Store) -> None:
    cm = ContextManager.open(
        store, namespace="ada", strategy=Window(1_000, shed_thinking=False), binding=STRIPS
    )
    heavy_history(cm, 12)
    result = cm.compile(HEAD)
    assert result.request["messages"][0]["content"][0]["text"] != "question 0"


def test_a_compile_budget_sheds_too(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", strategy=Window(5_000), binding=STRIPS)
    ids = heavy_history(cm, 12)
    result = cm.compile(HEAD, budget=1_200)
    sent = sent_replies(cm, result)
    assert sent == ids[len(ids) - len(sent) :]
    assert sent
    assert result.request["messages"][0]["content"][0]["text"] == "question 0"


# forks and caches (SPEC 5, 7)


def test_a_branch_made_earlier_does_not_inherit_a_release_the_parent_made_later(
    store: Store,
) -> None:
    """SPEC 5: a branch inherits the binding state as of its fork point only."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 3)
    cm.compile(HEAD)
    cm.release_thinking(ids[0])
    cm.compile(HEAD)
    cm.branch_at(ids[2], "earlier")
    cm.fork("now")
    assert sent_replies(cm, cm.compile(HEAD)) == ids[1:]
    cm.switch_branch("earlier")
    cm.add_message("user", "on the earlier branch")
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids
    assert result.thinking_strip is None


def test_a_branch_made_between_two_releases_of_a_reply_inherits_the_earlier_one(
    store: Store,
) -> None:
    """SPEC 5: a release the parent lowered after the fork point reaches the branch as it was
    at the fork point (the later, lower one does not; the earlier, higher one does)."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    cm.add_message("user", "question")
    two = [*reply("thinking first"), *reply("thinking again")]
    first = cm.record_reply(two, cm.compile(HEAD))
    cm.add_message("user", "next")
    cm.release_thinking(first, 2)
    cm.compile(HEAD)
    point = cm.add_message("user", "the fork point")
    cm.add_message("user", "later")
    cm.release_thinking(first, 0)
    cm.compile(HEAD)
    cm.branch_at(point, "between")
    cm.switch_branch("between")
    cm.add_message("user", "on the branch")
    result = cm.compile(HEAD)
    sent = [set(s.signatures) for e in result.provenance for s in e.sources if s.signatures]
    assert sent == [{0}]


def left_out_after_a_branch_point(store: Store) -> tuple[ContextManager, list[str]]:
    """Three replies; after the last, a branch point; then the parent leaves all three out
    (a system change). Returns the manager switched to the branch, which has a new question."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 3)
    cm.compile(HEAD)
    assert cm.compile(SYSTEM_B).thinking_strip is not None
    cm.branch_at(ids[2], "earlier")
    cm.switch_branch("earlier")
    cm.add_message("user", "on the earlier branch")
    return cm, ids


def test_a_branch_made_earlier_reports_what_the_parent_left_out_after_its_fork_point(
    store: Store,
) -> None:
    """SPEC 5: a branch inherits the left-out set as of its fork point only, so a block the
    parent left out later is newly left out on the branch and its strip reports it."""
    cm, ids = left_out_after_a_branch_point(store)
    strip = cm.compile(SYSTEM_B).thinking_strip
    assert strip is not None
    assert (strip.cause, strip.changed, strip.replies) == ("head", ("system",), tuple(ids))


def test_a_branch_made_earlier_restores_nothing_the_parent_left_out_after_its_fork_point(
    store: Store,
) -> None:
    """SPEC 7: ``restored`` names only replies the branch itself had left out."""
    cm, ids = left_out_after_a_branch_point(store)
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids
    assert result.restored == ()


def test_a_fork_at_the_head_does_not_retell_what_the_parent_left_out(store: Store) -> None:
    """SPEC 5: the left-out set (what was told) is inherited with the fork."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    history(cm, HEAD, 2)
    assert cm.compile(SYSTEM_B).thinking_strip is not None
    cm.fork("side")
    assert cm.compile(SYSTEM_B).thinking_strip is None


def test_a_full_stamp_cache_keeps_the_stamps_the_current_render_needs(store: Store) -> None:
    """Eviction never drops a stamp the render it serves is about to read."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    ids = history(cm, HEAD, 4)
    fresh = ContextManager.open(store, namespace="ada", binding=STRIPS)
    fresh._compiler.stamp_cache_limit = 1  # a tiny cache, to force eviction
    result = fresh.compile(HEAD)
    assert sent_replies(fresh, result) == ids
    assert result.thinking_strip is None
