"""The teller: what an agent is told about lost reasoning, when, and that it never fails."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from context_manager import (
    ContextManager,
    MemoryStore,
    MessageId,
    PlacedDrops,
    ReplyDrop,
    RoundDrop,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    ThinkingStrip,
    ToolUseBlock,
    UnplacedDrop,
)
from context_manager._model._results import StripCause
from context_manager._store._protocol import Store
from notices import ReasoningLossTeller, TurnState

PREFIX = "prefix_binding_mismatch"
WORDS = "Their words are still here."
EARLIER = "Re-read before relying on an earlier decision."
SINCE = "Re-read before relying on a decision made since then."
LOST = "Some of your earlier reasoning is no longer in your context:"
IDLE = TurnState.idle()
NONE = PlacedDrops()
_signatures = itertools.count()


class Agents:
    """Real context managers on one store, read the way the runtime reads them."""

    def __init__(self) -> None:
        self.store: Store = MemoryStore()
        self.managers: dict[str, ContextManager] = {}
        self.failing = 0
        """How many of the next reads raise a store failure."""

    def open(self, name: str) -> ContextManager:
        self.managers[name] = ContextManager.open(self.store, namespace=name)
        return self.managers[name]

    def read(self, agent: str, message_id: MessageId) -> StoredMessage:
        if self.failing:
            self.failing -= 1
            raise OSError("database is locked")
        return self.managers[agent].get_message(message_id)


@pytest.fixture
def agents() -> Agents:
    return Agents()


@pytest.fixture
def ada(agents: Agents) -> ContextManager:
    return agents.open("ada")


@pytest.fixture
def teller(agents: Agents) -> Iterator[ReasoningLossTeller]:
    made = ReasoningLossTeller(agents.read)
    yield made
    made._check()


def reply(cm: ContextManager, text: str | None = None, tool: str | None = None) -> MessageId:
    """Store an assistant reply with signed thinking and the given text or tool call."""
    blocks: list[object] = [ThinkingBlock("", f"sig-{next(_signatures)}")]
    if text is not None:
        blocks.append(TextBlock(text))
    if tool is not None:
        blocks.append(ToolUseBlock(f"toolu_{next(_signatures)}", tool, {}))
    return cm.add_message("assistant", blocks)


def strip(
    cause: StripCause, replies: tuple[MessageId, ...], key: str, changed: tuple[str, ...] = ()
) -> ThinkingStrip:
    """The strip a committing compile would report."""
    return ThinkingStrip(cause, changed, replies, len(replies), key, "compile-1")


def placed(
    *replies: MessageId, unplaced: int = 0, rounds: tuple[RoundDrop, ...] = ()
) -> PlacedDrops:
    """Drops placed on ``replies`` (block 0 each), beside ``unplaced`` malformed ones."""
    return PlacedDrops(
        replies=tuple(
            ReplyDrop(r, 0, PREFIX, f"messages.{k}.content.0") for k, r in enumerate(replies)
        ),
        rounds=rounds,
        unplaced=tuple(
            UnplacedDrop(f"messages.{k}", PREFIX, "malformed path") for k in range(unplaced)
        ),
    )


def head_line(name: str, cause: str = "", this_turn: bool = False) -> str:
    turn = ", this turn's earlier steps among them," if this_turn else ""
    return (
        f"[reasoning] ada: The reasoning behind your replies up to {name}{turn} is no longer "
        f"in your context{cause}. {WORDS} {EARLIER}"
    )


def count_line(count: int, name: str, this_turn: bool = False) -> str:
    if count == 1:
        turn = ", one of this turn's steps" if this_turn else ""
        body = f"one of your replies, {name}{turn}"
    else:
        turn = ", this turn's earlier steps among them" if this_turn else ""
        body = f"{count} of your replies, the first being {name}{turn}"
    return f"[reasoning] ada: {LOST} the reasoning behind {body}. {WORDS} {SINCE}"


# strips: head and first


def test_a_head_change_is_told_with_its_cause_naming_the_newest_reply(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A head strip names the newest reply it takes and says which head components changed."""
    key = ada.current_branch_key()
    older = reply(ada, "First I read the spec.")
    newest = reply(ada, "Let me check the log first.")

    line = teller.for_strip("ada", key, strip("head", (older, newest), key, ("tools",)), IDLE)

    expected = head_line(
        'the one beginning "Let me check the log first."', ", because your tools changed"
    )
    assert expected == line


def test_a_head_change_is_told_on_each_branch_that_loses_the_same_reply(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """Told once on its branch, and told again on another branch for the same reply."""
    main = ada.current_branch_key()
    step = reply(ada, "Let me check the log first.")
    ada.fork("experiment")
    fork = ada.current_branch_key()
    expected = head_line(
        'the one beginning "Let me check the log first."', ", because your model changed"
    )

    on_main = teller.for_strip("ada", main, strip("head", (step,), main, ("model",)), IDLE)
    on_fork = teller.for_strip("ada", fork, strip("head", (step,), fork, ("model",)), IDLE)

    assert [expected, expected] == [on_main, on_fork]
    assert teller.told_count("ada") == 0


def test_a_head_change_taking_only_replies_told_on_its_branch_says_nothing(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A reply a drop line told on this branch is not told again by a head change there."""
    key = ada.current_branch_key()
    step = reply(ada, "Let me check the log first.")
    assert teller.for_drops("ada", key, placed(step), IDLE) is not None

    assert teller.for_strip("ada", key, strip("head", (step,), key, ("tools",)), IDLE) is None
    assert teller.told_count("ada", key) == 0


def test_a_head_change_names_the_newest_reply_taken_even_when_it_was_told(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """One untold reply suffices to tell; the line still ends at the newest reply, told or not."""
    key = ada.current_branch_key()
    older = reply(ada, "An older step.")
    newest = reply(ada, "The newest step.")
    teller.for_drops("ada", key, placed(newest), IDLE)

    line = teller.for_strip("ada", key, strip("head", (older, newest), key), IDLE)

    assert head_line('the one beginning "The newest step."') == line


def test_a_head_change_skips_replies_the_store_cannot_read(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """The newest reply the store can read is named; with none readable, "earlier replies"."""
    key = ada.current_branch_key()
    readable = reply(ada, "Still here.")
    called = reply(ada, tool="read_log")

    named = teller.for_strip("ada", key, strip("head", (readable, called, "msg_gone"), key), IDLE)
    unnamed = teller.for_strip(
        "ada", key, strip("head", ("msg_gone", "msg_lost"), key, ("system",)), IDLE
    )

    assert head_line("the one that called read_log") == named
    expected = (
        "[reasoning] ada: The reasoning behind your earlier replies is no longer in your context, "
        f"because your system text changed. {WORDS} {EARLIER}"
    )
    assert expected == unnamed


def test_a_head_change_says_when_this_turns_steps_are_among_the_replies(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A reply stored after the turn opened, on its branch, makes the this-turn clause."""
    key = ada.current_branch_key()
    before = reply(ada, "Before the turn.")
    turn = TurnState.opened(ada.branch_head())
    during = reply(ada, tool="read_log")

    line = teller.for_strip("ada", key, strip("head", (before, during), key, ("tools",)), turn)

    assert head_line("the one that called read_log", ", because your tools changed", True) == line


def test_a_branchs_first_compile_is_counted_from_its_earliest_untold_reply(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A first strip counts the replies not yet told and names the earliest of them."""
    key = ada.current_branch_key()
    told = reply(ada, "Already told.")
    first = reply(ada, "Now the tests.")
    turn = TurnState.opened(ada.branch_head())
    third = reply(ada, "Running them.")
    teller.for_drops("ada", key, placed(told), IDLE)

    line = teller.for_strip("ada", key, strip("first", (told, first, third), key), turn)

    assert count_line(2, 'the one beginning "Now the tests."', this_turn=True) == line


def test_a_branchs_first_compile_of_only_told_replies_says_nothing(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A first strip whose every reply a drop line told has nothing new to tell."""
    key = ada.current_branch_key()
    told = reply(ada, "Already told.")
    teller.for_drops("ada", key, placed(told), IDLE)

    assert teller.for_strip("ada", key, strip("first", (told,), key), IDLE) is None


# strips: messages (folds)


def test_a_fold_between_turns_is_not_told(ada: ContextManager, teller: ReasoningLossTeller) -> None:
    """A messages strip with no live turn, or of replies older than the turn, says nothing."""
    key = ada.current_branch_key()
    old = reply(ada, "Old step.")
    turn = TurnState.opened(ada.branch_head())

    assert teller.for_strip("ada", key, strip("messages", (old,), key), IDLE) is None
    assert teller.for_strip("ada", key, strip("messages", (old,), key), turn) is None


def test_a_fold_mid_turn_is_told_counting_only_replies_not_yet_told(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A fold that takes this turn's steps is told; replies a drop line told are not counted."""
    key = ada.current_branch_key()
    old = reply(ada, "Old step.")
    turn = TurnState.opened(ada.branch_head())
    dropped = reply(ada, tool="grep")
    latest = reply(ada, tool="read_log")
    teller.for_drops("ada", key, placed(dropped), turn)

    line = teller.for_strip("ada", key, strip("messages", (old, dropped, latest), key), turn)

    assert count_line(2, 'the one beginning "Old step."', this_turn=True) == line


def test_a_fold_mid_turn_of_replies_all_told_says_nothing(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A fold of this turn's steps whose every reply was told has nothing new to tell."""
    key = ada.current_branch_key()
    turn = TurnState.opened(ada.branch_head())
    first = reply(ada, tool="grep")
    second = reply(ada, tool="read_log")
    teller.for_drops("ada", key, placed(first, second), turn)

    assert teller.for_strip("ada", key, strip("messages", (first, second), key), turn) is None
    assert teller.told_count("ada") == 0


def test_a_fold_mid_turn_on_another_branch_is_not_this_turns(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """Replies stored on another branch than the turn's are never this turn's steps."""
    turn = TurnState.opened(ada.branch_head())
    ada.fork("side")
    side = ada.current_branch_key()
    step = reply(ada, "On the side.")

    assert teller.for_strip("ada", side, strip("messages", (step,), side), turn) is None


# drops


def test_drops_are_told_by_incident(ada: ContextManager, teller: ReasoningLossTeller) -> None:
    """First drop told, same count silent, growth told, none closes, next opens, branch opens."""
    key = ada.current_branch_key()
    first = reply(ada, "Now the tests.")
    second = reply(ada, "Running them.")
    ada.fork("fork")
    fork = ada.current_branch_key()
    one = count_line(1, 'the one beginning "Now the tests."')
    two = count_line(2, 'the one beginning "Now the tests."')
    calls = [
        (key, placed(first)),
        (key, placed(first)),
        (key, placed(first, second)),
        (key, NONE),
        (key, placed(first)),
        (fork, placed(first)),
    ]

    lines = []
    for branch, call in calls:
        lines.append(teller.for_drops("ada", branch, call, IDLE))
        teller._check()

    assert [one, None, two, None, one, one] == lines


def test_unplaced_blocks_beside_placed_ones_make_an_at_least_line(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """Some blocks unplaced: the line bounds nothing and names nothing."""
    key = ada.current_branch_key()
    step = reply(ada, "Now the tests.")
    other = reply(ada, "Running them.")

    line = teller.for_drops("ada", key, placed(step, other, unplaced=3), IDLE)

    expected = (
        f"[reasoning] ada: {LOST} the reasoning behind at least 2 of your replies. "
        f"{WORDS} {EARLIER}"
    )
    assert expected == line


def test_drops_that_cannot_be_placed_tell_nothing_and_alert_once(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """An unplaced-only call goes to the operators' alert alone."""
    key = ada.current_branch_key()
    with capture_logs() as logs:
        line = teller.for_drops("ada", key, placed(unplaced=2), IDLE)
        again = teller.for_drops("ada", key, placed(unplaced=2), IDLE)

    assert (line, again) == (None, None)
    assert [
        (e["placed"], e["unplaced"]) for e in logs if e["event"] == "thinking_binding_loss"
    ] == [(0, 2)]
    assert teller.told_count("ada") == 0


def test_a_drop_lines_replies_are_not_told_again_by_a_later_strip(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """The strip that releases dropped replies (a messages strip mid-turn) says nothing."""
    key = ada.current_branch_key()
    turn = TurnState.opened(ada.branch_head())
    step = reply(ada, tool="read_log")
    assert teller.for_drops("ada", key, placed(step), turn) == count_line(
        1, "the one that called read_log", this_turn=True
    )

    assert teller.for_strip("ada", key, strip("messages", (step,), key), turn) is None
    assert teller.for_strip("ada", key, strip("head", (step,), key), turn) is not None


def test_a_dropped_round_stored_later_is_not_told_again_by_a_later_strip(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A stream's own round is told by its drop, and joins the told set once stored."""
    key = ada.current_branch_key()
    turn = TurnState.opened(ada.branch_head())
    blocks = (ThinkingBlock("", "sig-round"), ToolUseBlock("toolu_r", "read_log", {}))
    round_drop = RoundDrop(0, 0, PREFIX, "messages.3.content.0", blocks)

    line = teller.for_drops("ada", key, PlacedDrops(rounds=(round_drop,)), turn)
    stored = ada.add_message("assistant", list(blocks))
    teller.note_round_stored("ada", key, 0, stored)
    teller._check()

    assert count_line(1, "the one that called read_log", this_turn=True) == line
    assert teller.for_strip("ada", key, strip("messages", (stored,), key), turn) is None


def test_a_round_no_drop_line_told_does_not_join_the_told_set(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """Noting a stored round that was never told changes nothing."""
    key = ada.current_branch_key()

    teller.note_round_stored("ada", key, 0, reply(ada, "Fine."))

    assert teller.told_count("ada") == 0


# failures


def test_a_line_that_cannot_be_stored_is_logged_and_counts_as_told(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """``line_not_stored`` logs a ``[reasoning]`` event; the loss is not told again."""
    key = ada.current_branch_key()
    turn = TurnState.opened(ada.branch_head())
    step = reply(ada, "Now the tests.")
    assert teller.for_drops("ada", key, placed(step), turn) is not None

    with capture_logs() as logs:
        teller.line_not_stored("ada", key, OSError("disk full"))

    expected = [
        {
            "event": "[reasoning] line not stored: it still counts as told",
            "log_level": "warning",
            "agent": "ada",
            "branch": key,
            "error": "OSError('disk full')",
        }
    ]
    assert expected == logs
    assert teller.for_drops("ada", key, placed(step), turn) is None
    assert teller.for_strip("ada", key, strip("messages", (step,), key), turn) is None


def test_a_strip_line_that_cannot_be_read_is_logged_and_the_next_report_tells_it(
    agents: Agents, ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """A store failure while reading makes no line and counts nothing as told."""
    key = ada.current_branch_key()
    step = reply(ada, "Let me check the log first.")
    head = strip("head", (step,), key, ("tools",))
    agents.failing = 1

    with capture_logs() as logs:
        failed = teller.for_strip("ada", key, head, IDLE)
    retried = teller.for_strip("ada", key, head, IDLE)

    assert failed is None
    expected = [
        {
            "event": "[reasoning] line not made: the store failed reading a reply",
            "log_level": "warning",
            "agent": "ada",
            "branch": key,
            "source": "strip",
            "message_id": step,
            "error": "OSError('database is locked')",
        }
    ]
    assert expected == logs
    expected_line = head_line(
        'the one beginning "Let me check the log first."', ", because your tools changed"
    )
    assert expected_line == retried


def test_a_drop_line_that_cannot_be_read_is_told_by_the_next_call(
    agents: Agents, ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """The incident does not count a line it could not make: the same count is told next."""
    key = ada.current_branch_key()
    step = reply(ada, "Now the tests.")
    agents.failing = 1

    with capture_logs() as logs:
        failed = teller.for_drops("ada", key, placed(step), IDLE)
    retried = teller.for_drops("ada", key, placed(step), IDLE)

    assert failed is None
    assert [e["event"] for e in logs] == [
        "thinking_binding_loss",
        "[reasoning] line not made: the store failed reading a reply",
    ]
    assert count_line(1, 'the one beginning "Now the tests."') == retried
    assert teller.told_count("ada", key) == 1


def test_the_teller_never_raises_out_of_a_report(agents: Agents, ada: ContextManager) -> None:
    """A broken reader (not even a store error) is logged and tells nothing."""
    key = ada.current_branch_key()
    teller = ReasoningLossTeller(lambda agent, message_id: "not a message")  # type: ignore[arg-type,return-value]
    turn = TurnState.opened(ada.branch_head())

    with capture_logs() as logs:
        from_strip = teller.for_strip("ada", key, strip("messages", ("msg_1",), key), turn)
        from_drops = teller.for_drops("ada", key, placed("msg_1"), turn)

    assert (from_strip, from_drops) == (None, None)
    failures = [e for e in logs if e["event"] == "[reasoning] teller failed: nothing told"]
    assert [e["source"] for e in failures] == ["strip", "drops"]
    assert all(e["log_level"] == "error" and e["agent"] == "ada" for e in failures)
    teller._check()


# this turn


def test_a_reply_is_this_turns_only_in_a_live_turn_on_its_branch_above_its_head(
    ada: ContextManager,
) -> None:
    """``TurnState.owns``: live, same branch, stored after the turn opened."""
    before = ada.get_message(reply(ada, "Before."))
    turn = TurnState.opened(ada.branch_head())
    during = ada.get_message(reply(ada, "During."))
    ada.fork("side")
    elsewhere = ada.get_message(reply(ada, "Elsewhere."))

    assert [turn.owns(m) for m in (before, during, elsewhere)] == [False, True, False]
    assert not TurnState.idle().owns(during)
    assert not TurnState(live=True, branch_key=None, head_sequence=0).owns(during)
    assert not TurnState(live=False, branch_key=turn.branch_key, head_sequence=0).owns(during)


# state: agents, forgetting, the bound


def test_told_state_is_kept_per_agent(agents: Agents, teller: ReasoningLossTeller) -> None:
    """A reply told to one agent is still untold for another agent on the same key."""
    ada = agents.open("ada")
    bob = agents.open("bob")
    key = "main@1"
    ada_step = reply(ada, "Ada's step.")
    bob_step = reply(bob, "Bob's step.")
    teller.for_drops("ada", key, placed(ada_step, bob_step), IDLE)

    line = teller.for_strip("bob", key, strip("head", (bob_step,), key), IDLE)

    assert line is not None
    assert line.startswith("[reasoning] bob: ")
    assert (teller.told_count("ada"), teller.told_count("bob")) == (2, 0)


def test_forgetting_a_branch_or_an_agent_drops_its_state(
    ada: ContextManager, teller: ReasoningLossTeller
) -> None:
    """``forget`` empties the told sets and closes the incident it names."""
    main = ada.current_branch_key()
    step = reply(ada, "Step.")
    ada.fork("side")
    side = ada.current_branch_key()
    teller.for_drops("ada", side, placed(step), IDLE)
    teller.for_drops("ada", main, placed(step), IDLE)

    teller.forget("ada", side)
    teller._check()
    after_branch = teller.told_count("ada")
    teller.forget("ada")
    teller._check()

    assert (after_branch, teller.told_count("ada")) == (1, 0)
    assert teller.for_drops("ada", main, placed(step), IDLE) is not None


def test_the_told_set_drops_its_oldest_entries_past_the_cap(
    agents: Agents, ada: ContextManager
) -> None:
    """With a cap of 2, a third told reply pushes out the first, which is then untold."""
    teller = ReasoningLossTeller(agents.read, cap=2)
    key = ada.current_branch_key()
    first, second, third = (reply(ada, f"Step {n}.") for n in (1, 2, 3))
    for step in (first, second, third):
        teller.for_drops("ada", key, placed(step), IDLE)
        teller.for_drops("ada", key, NONE, IDLE)
        teller._check()

    assert teller.told_count("ada", key) == 2
    assert teller.for_strip("ada", key, strip("head", (second, third), key), IDLE) is None
    assert teller.for_strip("ada", key, strip("head", (first,), key), IDLE) is not None


def test_a_cap_that_is_not_a_positive_int_is_refused(agents: Agents) -> None:
    """The bound must be real."""
    with pytest.raises(ValueError, match="cap must be a positive int, got 0"):
        ReasoningLossTeller(agents.read, cap=0)


def test_a_long_lived_agent_holds_at_most_the_cap_after_a_million_strip_events(
    ada: ContextManager,
) -> None:
    """A million strips, beside drop lines adding 15,000 replies, never leave more than the cap."""
    key = ada.current_branch_key()
    sample = ada.get_message(reply(ada, "A step."))
    teller = ReasoningLossTeller(lambda agent, message_id: sample)
    live = TurnState(live=True, branch_key=key, head_sequence=0)
    cause: dict[int, StripCause] = {25: "head", 50: "first"}
    pool = [
        strip(cause.get(k % 100, "messages"), (f"d{200 * k}",) if k % 2 else (f"x{k}",), key)
        for k in range(1_000)
    ]
    most = 0
    with capture_logs():
        for i in range(1_000_000):
            if i % 200 == 0:
                teller.for_drops("ada", key, placed(f"d{i}", f"e{i}", f"f{i}"), IDLE)
                teller.for_drops("ada", key, NONE, IDLE)
            teller.for_strip("ada", key, pool[i % 1_000], live if i % 100 == 0 else IDLE)
            if i % 10_000 == 0:
                most = max(most, teller.told_count())
                teller._check()

    assert teller.cap == most
    assert teller.told_count() <= teller.cap
