"""The compiler's binding rules (SPEC 6 and 7), each as a behaviour a host can rely on."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
from helpers import CallCountingStore, unmarked
from structlog.testing import capture_logs

from context_manager import (
    CompileResult,
    ContextManager,
    Fold,
    Head,
    MemoryStore,
    MessageId,
    MessageMeta,
    OverBudget,
    SQLiteStore,
    Store,
    TextBlock,
    ThinkingBinding,
    ThinkingStrip,
    Window,
)

TOOLS = [{"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}]
STRIPS = ThinkingBinding(append_changes=False)
"""Head changes strip and are told (the path on models without system messages, SPEC 7b)."""
HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=TOOLS,
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


@pytest.fixture(params=["memory", "sqlite"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    store: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "a.db")
    yield store
    store.close()


@pytest.fixture
def cm(any_store: Store) -> ContextManager:
    """A manager whose head changes strip (``append_changes=False``): this file checks the
    head-change path; appending them instead is ``tests/compile/test_append.py``'s."""
    return ContextManager.open(any_store, namespace="ada", binding=STRIPS)


_signatures = iter(range(10**9))


def reply(text: str, *, thinking: int = 1, tool: str | None = None) -> list[dict[str, Any]]:
    """A reply with ``thinking`` signed blocks, then text, then an optional tool call."""
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "", "signature": f"sig-{next(_signatures)}"}
        for _ in range(thinking)
    ]
    blocks.append({"type": "text", "text": text})
    if tool is not None:
        blocks.append({"type": "tool_use", "id": f"toolu_{tool}", "name": "read_log", "input": {}})
    return blocks


def turn(cm: ContextManager, head: Head, user: str, answer: str) -> tuple[CompileResult, str]:
    cm.add_message("user", user)
    result = cm.compile(head)
    return result, cm.record_reply(reply(answer), result)


def thinking_count(result: CompileResult) -> int:
    return sum(
        1
        for message in result.request["messages"]
        for block in message["content"]
        if block["type"] in ("thinking", "redacted_thinking")
    )


def observe(cm: ContextManager) -> list[tuple[ThinkingStrip, str]]:
    seen: list[tuple[ThinkingStrip, str]] = []
    cm.on_thinking_strip(lambda strip, key: seen.append((strip, key)))
    return seen


def test_nothing_changed_keeps_every_block_and_compiles_to_identical_bytes_twice(
    cm: ContextManager,
) -> None:
    turn(cm, HEAD, "hello", "hi")
    turn(cm, HEAD, "and now?", "now this")
    cm.add_message("user", "go on")
    first = cm.compile(HEAD)
    second = cm.compile(HEAD)
    assert json.dumps(first.request, sort_keys=True) == json.dumps(second.request, sort_keys=True)
    assert thinking_count(first) == 2
    assert first.thinking_strip is None
    assert second.thinking_strip is None


def test_a_tool_change_strips_every_earlier_reply_once_and_later_replies_keep_theirs(
    cm: ContextManager,
) -> None:
    seen = observe(cm)
    _, r1 = turn(cm, HEAD, "one", "first")
    _, r2 = turn(cm, HEAD, "two", "second")
    grown = attrs.evolve(HEAD, tools=[*TOOLS, {"name": "grep", "input_schema": {"type": "object"}}])
    cm.add_message("user", "three")
    result = cm.compile(grown)
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.changed) == ("head", ("tools",))
    assert result.thinking_strip.replies == (r1, r2)
    assert result.thinking_strip.blocks == 2
    r3 = cm.record_reply(reply("third"), result)
    cm.add_message("user", "four")
    after = cm.compile(grown)
    assert after.thinking_strip is None
    assert thinking_count(after) == 1
    assert after.provenance[5].single_source is not None
    assert after.provenance[5].single_source.message_id == r3
    assert [s.replies for s, _ in seen] == [(r1, r2)]


@pytest.mark.parametrize(
    ("change", "changed"),
    [
        ({"system": "You are Ada, on call."}, ("system",)),
        ({"model": "claude-sonnet-5"}, ("model",)),
        ({"system": "New system.", "tools": []}, ("system", "tools")),
        ({"system": "S", "tools": [], "model": "claude-sim-2"}, ("system", "tools", "model")),
    ],
)
def test_a_head_change_names_the_components_in_order(
    cm: ContextManager, change: dict[str, Any], changed: tuple[str, ...]
) -> None:
    _, r1 = turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    result = cm.compile(attrs.evolve(HEAD, **change))
    assert result.thinking_strip is not None
    assert result.thinking_strip.cause == "head"
    assert result.thinking_strip.changed == changed
    assert result.thinking_strip.replies == (r1,)


def test_a_settings_only_change_strips_nothing_by_default(cm: ContextManager) -> None:
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    result = cm.compile(attrs.evolve(HEAD, settings={**HEAD.settings, "max_tokens": 999}))
    assert result.thinking_strip is None
    assert thinking_count(result) == 1


def test_a_settings_change_strips_when_settings_are_bound(any_store: Store) -> None:
    cm = ContextManager.open(
        any_store, namespace="ada", binding=ThinkingBinding(binds_settings=True)
    )
    _, r1 = turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    result = cm.compile(attrs.evolve(HEAD, settings={**HEAD.settings, "max_tokens": 999}))
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.changed) == ("head", ("settings",))
    assert result.thinking_strip.replies == (r1,)


def test_cache_control_and_key_order_never_change_the_binding(cm: ContextManager) -> None:
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    marked = [{**TOOLS[0], "cache_control": {"type": "ephemeral"}}]
    reordered = [dict(reversed(list(t.items()))) for t in marked]
    result = cm.compile(attrs.evolve(HEAD, tools=reordered))
    assert result.thinking_strip is None
    assert thinking_count(result) == 1


def test_an_edit_before_a_stored_reply_strips_it_and_every_later_one(cm: ContextManager) -> None:
    seen = observe(cm)
    cm.add_message("user", "first question")
    first = cm.compile(HEAD)
    r1 = cm.record_reply(reply("a1"), first)
    _, r2 = turn(cm, HEAD, "second question", "a2")
    question = cm.messages()[0].id
    cm.edit_message(question, "first question, edited")
    cm.add_message("user", "third")
    result = cm.compile(HEAD)
    assert result.thinking_strip is not None
    assert result.thinking_strip.cause == "messages"
    assert result.thinking_strip.replies == (r1, r2)
    assert thinking_count(result) == 0
    assert len(seen) == 1


def test_an_unstamped_reply_at_a_branchs_first_compile_is_stripped_as_first_and_never_sent(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "imported question")
    imported = cm.add_message("assistant", reply("imported answer"))
    cm.add_message("user", "now")
    result = cm.compile(HEAD)
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.replies) == ("first", (imported,))
    assert thinking_count(result) == 0
    again = cm.compile(HEAD)
    assert again.thinking_strip is None
    assert thinking_count(again) == 0


def test_an_unstamped_reply_after_the_first_compile_is_stripped_as_messages(
    cm: ContextManager,
) -> None:
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    cm.compile(HEAD)
    added = cm.add_message("assistant", reply("added without a compile"))
    cm.add_message("user", "three")
    result = cm.compile(HEAD)
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.replies) == ("messages", (added,))


def test_a_withheld_reply_comes_back_with_its_head_and_an_earlier_fork_still_renders_it(
    cm: ContextManager,
) -> None:
    """VENDOR_RULES 5 and 8 changed this: a head change only withholds; the head changed back
    sends the thinking again (``restored``), and a second change leaves it out anew."""
    _, r1 = turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    cm.fork("experiment")
    cm.switch_branch("main")
    changed = attrs.evolve(HEAD, system="Changed.")
    stripped = cm.compile(changed)
    assert stripped.thinking_strip is not None
    assert stripped.thinking_strip.replies == (r1,)
    cm.add_message("user", "three")
    back = cm.compile(HEAD)
    assert (back.thinking_strip, back.restored) == (None, (r1,))
    again = cm.compile(changed).thinking_strip
    assert again is not None
    assert again.replies == (r1,)
    assert cm.compile(changed).thinking_strip is None
    cm.switch_branch("experiment")
    fork = cm.compile(HEAD)
    assert fork.thinking_strip is None
    assert thinking_count(fork) == 1


def test_a_fork_inherits_its_parents_releases_and_renders_exactly_what_the_parent_would(
    cm: ContextManager,
) -> None:
    _, r1 = turn(cm, HEAD, "one", "first")
    turn(cm, HEAD, "two", "second")
    cm.release_thinking(r1)
    cm.add_message("user", "three")
    parent = cm.compile(HEAD)
    assert parent.thinking_strip is not None
    assert parent.thinking_strip.replies[0] == r1
    cm.fork("child")
    child = cm.compile(HEAD)
    assert child.request["messages"] == parent.request["messages"]
    assert child.thinking_strip is None


def test_a_dry_compile_reports_records_nothing_tells_no_one_and_the_next_commit_reports_it(
    cm: ContextManager,
) -> None:
    seen = observe(cm)
    _, r1 = turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    changed = attrs.evolve(HEAD, tools=[])
    dry = cm.compile(changed, dry_run=True)
    assert dry.dry
    assert dry.thinking_strip is not None
    assert dry.thinking_strip.replies == (r1,)
    assert seen == []
    with pytest.raises(ValueError, match="dry run"):
        cm.record_reply(reply("x"), dry)
    committed = cm.compile(changed)
    assert committed.thinking_strip is not None
    assert attrs.evolve(committed.thinking_strip, compile_id="") == attrs.evolve(
        dry.thinking_strip, compile_id=""
    )
    assert len(seen) == 1


def test_a_committing_compile_records_its_strip_whether_or_not_the_request_is_sent(
    cm: ContextManager,
) -> None:
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    changed = attrs.evolve(HEAD, tools=[])
    assert cm.compile(changed).thinking_strip is not None
    assert cm.compile(changed).thinking_strip is None


def test_an_observer_that_raises_never_fails_the_compile_and_the_others_still_run(
    cm: ContextManager,
) -> None:
    def broken(strip: ThinkingStrip, key: str) -> None:
        raise RuntimeError("observer down")

    cm.on_thinking_strip(broken)
    seen = observe(cm)
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    with capture_logs() as logs:
        result = cm.compile(attrs.evolve(HEAD, tools=[]))
    assert result.thinking_strip is not None
    assert len(seen) == 1
    failures = [e for e in logs if e["event"] == "strip_observer_failed"]
    assert len(failures) == 1
    assert "observer down" in failures[0]["error"]


def _open_round_with_interleaved_thinking(cm: ContextManager) -> MessageId:
    """A recorded reply thinking twice around its text before a tool call, and that call's
    result: the round is open. Returns the reply's id."""
    cm.add_message("user", "investigate")
    first = cm.compile(HEAD)
    interleaved = [
        {"type": "thinking", "thinking": "", "signature": "sig-a"},
        {"type": "text", "text": "checking"},
        {"type": "thinking", "thinking": "", "signature": "sig-b"},
        {"type": "tool_use", "id": "toolu_i", "name": "read_log", "input": {}},
    ]
    rid = cm.record_reply(interleaved, first)
    cm.add_message(
        "user", [{"type": "tool_result", "tool_use_id": "toolu_i", "content": "log line"}]
    )
    return rid


def test_interleaved_thinking_is_judged_block_by_block_from_the_first_invalid_one_on(
    cm: ContextManager,
) -> None:
    """VENDOR_RULES 6 changed this: while its round is open the reply goes out as recorded, so
    the release shows once the round has closed."""
    rid = _open_round_with_interleaved_thinking(cm)
    kept = cm.compile(HEAD)
    assert thinking_count(kept) == 2
    cm.release_thinking(rid, from_block=2)
    in_flight = cm.compile(HEAD)
    assert (thinking_count(in_flight), in_flight.thinking_strip) == (2, None)
    cm.record_reply(reply("found it", thinking=0), in_flight)
    cm.add_message("user", "thanks")
    partial = cm.compile(HEAD)
    assert partial.thinking_strip is not None
    assert (partial.thinking_strip.replies, partial.thinking_strip.blocks) == ((rid,), 1)
    assert [b["type"] for b in partial.request["messages"][1]["content"]] == [
        "thinking",
        "text",
        "tool_use",
    ]


def test_the_open_rounds_failing_thinking_sent_as_recorded_is_named_in_put_back(
    store: Store,
) -> None:
    """A system change mid-round (appending off: a head change) fails the open round's
    thinking, which still goes out as recorded (VENDOR_RULES 6); the result names where, so
    a caller knows the provider drops it (or refuses it under ``"error"``)."""
    cm = ContextManager.open(store, namespace="ada", binding=STRIPS)
    rid = _open_round_with_interleaved_thinking(cm)
    same = cm.compile(HEAD)
    changed = cm.compile(attrs.evolve(HEAD, system="You are Ada, terse."))

    assert same.put_back == ()
    assert thinking_count(changed) == 2
    assert changed.put_back == ("messages.1.content.0", "messages.1.content.2")
    for path in changed.put_back:
        _, i, _, j = path.split(".")
        assert changed.request["messages"][int(i)]["content"][int(j)]["type"] == "thinking"
        assert changed.provenance[int(i)].sources[0].message_id == rid


def test_a_tool_loop_compile_reads_the_in_flight_reply_from_the_messages_it_already_read(
    store: Store,
) -> None:
    """The open round's reply is read to send it as recorded; the render read it already, so
    a compile in a tool loop reads it from there (a round trip less on a shared database),
    and what it sends is the same, a release put back included."""
    counting = CallCountingStore(store, "get")
    cm = ContextManager.open(counting, namespace="ada", binding=STRIPS)
    rid = _open_round_with_interleaved_thinking(cm)
    cm.release_thinking(rid, from_block=2)
    reads = counting.calls["get"]

    in_flight = cm.compile(HEAD)

    assert counting.calls["get"] == reads
    assert thinking_count(in_flight) == 2  # the released block put back: sent as recorded
    assert in_flight.thinking_strip is None


def test_a_steady_compile_reads_the_serials_and_what_was_stored_since_in_one_call(
    store: Store,
) -> None:
    """A compile that extends a kept render needs the agent's serials and the messages stored
    since: one store call (one round trip on PostgreSQL), and the same request as two."""
    counting = CallCountingStore(store, "serials", "read", "serials_and_read", "get")
    cm = ContextManager.open(counting, namespace="ada", binding=STRIPS)
    turn(cm, HEAD, "q1", "a1")
    cm.add_message("user", "q2")
    counting.calls.clear()

    steady = cm.compile(HEAD, dry_run=True)

    assert dict(counting.calls) == {"serials_and_read": 1}
    cm.forget_cache()
    assert steady.request == cm.compile(HEAD, dry_run=True).request


def test_an_empty_text_signed_block_is_kept_while_valid(cm: ContextManager) -> None:
    cm.add_message("user", "q")
    result = cm.compile(HEAD)
    cm.record_reply([{"type": "thinking", "thinking": "", "signature": "opaque"}], result)
    cm.add_message("user", "next")
    assert thinking_count(cm.compile(HEAD)) == 1


def test_a_thinking_block_with_an_empty_signature_is_stored_logged_and_never_sent(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "q")
    result = cm.compile(HEAD)
    with capture_logs() as logs:
        rid = cm.record_reply(
            [
                {"type": "thinking", "thinking": "hm", "signature": ""},
                {"type": "text", "text": "a"},
            ],
            result,
        )
    assert any(e["event"] == "thinking_unsigned" for e in logs)
    assert cm.get_message(rid).content[0].signature == ""  # type: ignore[union-attr]
    cm.add_message("user", "next")
    assert thinking_count(cm.compile(HEAD)) == 0


def test_binds_false_strips_nothing(any_store: Store) -> None:
    cm = ContextManager.open(any_store, namespace="ada", binding=ThinkingBinding(binds=False))
    turn(cm, HEAD, "one", "first")
    cm.add_message("user", "two")
    result = cm.compile(attrs.evolve(HEAD, tools=[], system="other"))
    assert result.thinking_strip is None
    assert thinking_count(result) == 1


def test_after_reopening_the_sqlite_store_the_next_compile_is_byte_identical(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    cm = ContextManager.open(store, namespace="ada", strategy=Window(max_tokens=400))
    for n in range(30):
        turn(cm, HEAD, f"question {n} " + "x" * 40, f"answer {n}")
    cm.add_message("user", "last")
    before = cm.compile(HEAD)
    store.close()
    reopened = ContextManager.open(
        SQLiteStore(path), namespace="ada", strategy=Window(max_tokens=400)
    )
    after = reopened.compile(HEAD)
    assert json.dumps(after.request, sort_keys=True) == json.dumps(before.request, sort_keys=True)
    assert after.thinking_strip is None


def test_the_request_carries_the_binding_beta_and_drop_block_when_thinking_is_on(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "q")
    request = cm.compile(HEAD).request
    assert request["betas"] == ["thinking-binding-controls-2026-08-01"]
    assert request["thinking"] == {
        "type": "adaptive",
        "block_binding": {"prefix_mismatch_behavior": "drop_block"},
    }
    assert request["system"] == [
        {"type": "text", "text": "You are Ada.", "cache_control": {"type": "ephemeral"}}
    ]
    assert request["tools"] == TOOLS
    assert request["max_tokens"] == 2048
    assert HEAD.settings["thinking"] == {"type": "adaptive"}


def test_rendering_merges_same_role_messages_and_leaves_out_empty_ones(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "one")
    # add_message refuses a blank message (issue 35); one stored before that still renders
    blank = (TextBlock("   "),)
    cm.store.append(cm.namespace, cm.current_branch_key(), "user", blank, MessageMeta())
    cm.add_message("user", "two")
    request = cm.compile(HEAD).request
    assert unmarked(request["messages"]) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        }
    ]


def test_system_notices_render_as_user_text_or_system_messages(any_store: Store) -> None:
    notice = {"system_notice": True, "kind": "reasoning-loss", "target": "ada"}
    as_user = ContextManager.open(
        any_store, namespace="u", binding=ThinkingBinding(system_messages="user")
    )
    as_user.add_message("user", "hi")
    as_user.add_message("system", "[reasoning] ada: note", metadata=notice)
    assert unmarked(as_user.compile(HEAD).request["messages"]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "text", "text": "[reasoning] ada: note"},
            ],
        }
    ]
    as_system = ContextManager.open(
        any_store, namespace="s", binding=ThinkingBinding(system_notices="system")
    )
    as_system.add_message("user", "hi")
    as_system.add_message("system", "[reasoning] ada: note", metadata=notice)
    messages = unmarked(as_system.compile(HEAD).request["messages"])
    assert messages[1] == {
        "role": "system",
        "content": [{"type": "text", "text": "[reasoning] ada: note"}],
    }


def test_a_tool_use_without_a_stored_result_is_answered_so_the_request_stays_valid(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "q")
    result = cm.compile(HEAD)
    cm.record_reply(reply("calling", tool="a"), result)
    messages = cm.compile(HEAD).request["messages"]
    assert messages[-1]["role"] == "user"
    assert messages[-1]["content"][0]["tool_use_id"] == "toolu_a"
    assert messages[-1]["content"][0]["is_error"] is True


def test_a_history_that_starts_with_the_assistant_is_sent_as_stored(
    cm: ContextManager,
) -> None:
    """Issue 28 item 10: pydantic-ai's recorded request opening with an assistant message was
    accepted as sent; no placeholder user message is put before it."""
    cm.add_message("assistant", "I was here first")
    cm.add_message("user", "q")
    messages = unmarked(cm.compile(HEAD).request["messages"])
    assert messages == [
        {"role": "assistant", "content": [{"type": "text", "text": "I was here first"}]},
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
    ]


def test_a_fold_strips_the_kept_tail_and_the_replies_it_folds_away_with_cause_messages(
    any_store: Store,
) -> None:
    summaries: list[int] = []

    def summarize(messages: Any) -> str:
        summaries.append(len(messages))
        return "They talked."

    cm = ContextManager.open(any_store, namespace="ada")
    seen = observe(cm)
    _, r1 = turn(cm, HEAD, "one " + "o" * 300, "first")
    _, r2 = turn(cm, HEAD, "two", "second")
    cm.add_message("user", "three")
    cm.compile(HEAD)
    cm.strategy = Fold(summarize, trigger_tokens=50, keep_tokens=100)
    folded = cm.compile(HEAD)
    assert folded.thinking_strip is not None
    assert (folded.thinking_strip.cause, folded.thinking_strip.replies) == ("messages", (r1, r2))
    (summary,) = cm.messages(kind="summary")
    assert folded.provenance[0].sources[0].message_id == summary.id
    assert folded.request["messages"][0]["content"][0]["text"].endswith("They talked.")
    kept_tail = [m["content"] for m in unmarked(folded.request["messages"][1:])]
    assert kept_tail == [
        [{"type": "text", "text": "second"}],
        [{"type": "text", "text": "three"}],
    ]
    assert thinking_count(folded) == 0
    assert len(seen) == 1
    assert summaries == [2]  # the first question and its reply


def test_a_fold_with_nothing_older_to_cover_leaves_the_request_as_it_is(any_store: Store) -> None:
    cm = ContextManager.open(
        any_store, namespace="ada", strategy=Fold(lambda m: "never", trigger_tokens=5)
    )
    cm.add_message("user", "only this question, which is long enough to pass the trigger")
    result = cm.compile(HEAD)
    assert cm.messages(kind="summary") == []
    assert unmarked(result.request["messages"]) == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "only this question, which is long enough to pass the trigger",
                }
            ],
        }
    ]


def test_a_fold_never_cuts_inside_a_tool_round_and_uses_the_simple_shape_mid_round(
    any_store: Store,
) -> None:
    cm = ContextManager.open(
        any_store,
        namespace="ada",
        strategy=Fold(lambda m: "summary", trigger_tokens=60, keep_tokens=40),
    )
    cm.add_message("user", "please read the log " + "x" * 200)
    first = cm.compile(HEAD)
    rid = cm.record_reply(reply("calling", tool="r1"), first)
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": "toolu_r1", "content": "42"}])
    folded = cm.compile(HEAD)
    assert folded.thinking_strip is not None
    assert folded.thinking_strip.replies == (rid,)
    assert len(folded.request["messages"]) == 1
    texts = [b["text"] for b in folded.request["messages"][0]["content"]]
    assert texts[0].endswith("summary")
    assert texts[1] == "Result of your read_log call: 42"


async def test_an_async_summarizer_works_through_compile_async(any_store: Store) -> None:
    async def summarize(messages: Any) -> str:
        return "async summary"

    cm = ContextManager.open(
        any_store, namespace="ada", strategy=Fold(summarize, trigger_tokens=20, keep_tokens=0)
    )
    cm.add_message("user", "an earlier question")
    cm.add_message("assistant", "an earlier answer")
    cm.add_message("user", "a long question " + "y" * 200)
    result = await cm.compile_async(HEAD)
    assert result.request["messages"][0]["content"][0]["text"].endswith("async summary")
    cm.add_message("assistant", "an answer")
    cm.add_message("user", "more " + "z" * 300)
    with pytest.raises(TypeError, match="compile_async"):
        cm.compile(HEAD)


def test_a_window_keeps_a_byte_stable_prefix_between_jumps(cm: ContextManager) -> None:
    cm.strategy = Window(max_tokens=600)
    firsts = []
    for n in range(40):
        result, _ = turn(cm, HEAD, f"question {n} " + "q" * 30, f"answer {n}")
        firsts.append(json.dumps(result.request["messages"][0]))
        assert result.tokens <= 600 + 200
    jumps = sum(1 for a, b in itertools.pairwise(firsts) if a != b)
    assert 1 <= jumps <= 12


def test_a_budget_smaller_than_the_newest_user_message_raises_over_budget(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "w" * 4000)
    with pytest.raises(OverBudget, match="budget of 10 tokens"):
        cm.compile(HEAD, budget=10)


def test_a_head_that_is_not_json_serialisable_names_the_component() -> None:
    with pytest.raises(ValueError, match="'tools'"):
        Head(model="m", tools=[{"name": "t", "bad": object()}])
    with pytest.raises(ValueError, match="'settings'"):
        Head(model="m", settings={"metadata": {1, 2}})


def test_record_reply_refuses_a_result_from_another_manager_or_branch(
    any_store: Store,
) -> None:
    cm = ContextManager.open(any_store, namespace="ada")
    other = ContextManager.open(any_store, namespace="bob")
    cm.add_message("user", "q")
    other.add_message("user", "q")
    result = other.compile(HEAD)
    with pytest.raises(ValueError, match="another context manager"):
        cm.record_reply(reply("a"), result)
    mine = cm.compile(HEAD)
    cm.fork("elsewhere")
    with pytest.raises(ValueError, match="switch back"):
        cm.record_reply(reply("a"), mine)


class CountingStore(MemoryStore):
    """A real in-memory store that counts the messages each read returns."""

    def __init__(self) -> None:
        super().__init__()
        self.returned: list[int] = []

    def read(self, *args: Any, **kwargs: Any) -> Any:
        out = super().read(*args, **kwargs)
        self.returned.append(len(out))
        return out


def test_a_steady_compile_reads_only_what_was_stored_since_the_last_one() -> None:
    store = CountingStore()
    cm = ContextManager.open(store, namespace="ada")
    for n in range(20):
        turn(cm, HEAD, f"q{n}", f"a{n}")
    cm.add_message("user", "new")
    store.returned.clear()
    cm.compile(HEAD)
    assert store.returned == [2]  # the last reply and the new question


class StampCountingStore(MemoryStore):
    """A real in-memory store that records the replies whose stamps each compile reads."""

    def __init__(self) -> None:
        super().__init__()
        self.stamped: list[str] = []

    def stamps(self, namespace: str, message_ids: Any) -> Any:
        self.stamped.extend(message_ids)
        return super().stamps(namespace, message_ids)


@pytest.mark.usefixtures("no_render_snapshots")  # the render from the store is what is read
def test_a_re_render_reads_no_stamp_of_a_reply_whose_thinking_is_released_and_reported() -> None:
    store = StampCountingStore()
    cm = ContextManager.open(store, namespace="ada")
    _, released = turn(cm, HEAD, "q1", "a1")
    _, partly = turn(cm, HEAD, "q2", "a2")
    cm.add_message("user", "q3")
    result = cm.compile(HEAD)
    kept = cm.record_reply(reply("a3", thinking=2), result)
    cm.add_message("user", "q4")
    cm.release_thinking(released)
    cm.release_thinking(partly, from_block=1)  # past its only thinking block: it still binds
    cm.compile(HEAD)  # reports the releases
    expected = cm.compile(HEAD, dry_run=True)
    cm.forget_cache(cm.current_branch_key())
    store.stamped.clear()
    again = cm.compile(HEAD, dry_run=True)
    assert sorted(store.stamped) == sorted([partly, kept])
    assert again.request == expected.request
    assert thinking_count(again) == 3  # the partly released reply's and both of the last one's


def test_structlog_is_quiet_by_default_at_debug_level() -> None:
    assert structlog.get_logger("context_manager") is not None


def test_a_second_lower_release_reports_only_the_blocks_not_reported_before(
    cm: ContextManager,
) -> None:
    cm.add_message("user", "investigate")
    first = cm.compile(HEAD)
    interleaved = [
        {"type": "thinking", "thinking": "", "signature": "sig-low"},
        {"type": "text", "text": "checking"},
        {"type": "thinking", "thinking": "", "signature": "sig-high"},
        {"type": "text", "text": "done"},
    ]
    rid = cm.record_reply(interleaved, first)
    cm.add_message("user", "next")
    cm.release_thinking(rid, from_block=2)
    high = cm.compile(HEAD).thinking_strip
    assert high is not None
    assert (high.replies, high.blocks) == ((rid,), 1)
    cm.release_thinking(rid, from_block=0)
    low = cm.compile(HEAD).thinking_strip
    assert low is not None
    assert (low.replies, low.blocks) == ((rid,), 1)
    assert cm.compile(HEAD).thinking_strip is None
