"""The reasoning sidecar (SPEC 13): capture, resolution at compile, erasure, the audit reader."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from structlog.testing import capture_logs

import context_manager
from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    MemoryReasoningStore,
    MessageNotFound,
    NotADatabase,
    ReasoningCapture,
    ReasoningStore,
    SQLiteReasoningStore,
    SQLiteStore,
    ThinkingBinding,
    ThinkingBlock,
    UntrustedText,
    read_reasoning,
    warn_if_reasoning_unconfigured,
)
from context_manager._reasoning._capture import REASONING_KEY

SECRET = "secret plan"
TOOLS = [{"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}]
HEAD = Head(
    model="claude-sonnet-5",  # no system messages: head changes strip (SPEC 7b)
    system="You are Ada.",
    tools=TOOLS,
    settings={"max_tokens": 1024, "thinking": {"type": "adaptive"}},
)


class CountingSidecar(SQLiteReasoningStore):
    """Counts every ``get``, so a test can see what the reader fetched."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gets = 0

    def get(self, ref: str, namespace: str) -> str | None:
        self.gets += 1
        return super().get(ref, namespace)


class UnwritableSidecar(SQLiteReasoningStore):
    """A sidecar whose disk is full."""

    def put(self, namespace: str, text: str) -> str:
        raise OSError(f"sidecar disk full ({len(text)} bytes for {namespace})")


class UnreadableSidecar(SQLiteReasoningStore):
    """A sidecar that is down."""

    def get(self, ref: str, namespace: str) -> str | None:
        raise OSError(f"sidecar unreachable reading {ref}")


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "agent.db", tmp_path / "reasoning.db"


@pytest.fixture
def store(paths: tuple[Path, Path]) -> Iterator[SQLiteStore]:
    made = SQLiteStore(paths[0])
    yield made
    made.close()


@pytest.fixture
def sidecar(paths: tuple[Path, Path]) -> Iterator[CountingSidecar]:
    made = CountingSidecar(paths[1])
    yield made
    made.close()


def open_cm(
    store: SQLiteStore,
    sidecar: ReasoningStore | None,
    *,
    namespace: str = "ada",
    capture: bool | Literal["drop"] = True,
) -> ContextManager:
    return ContextManager.open(
        store, namespace=namespace, reasoning=ReasoningCapture(sidecar, capture=capture)
    )


def turn(
    cm: ContextManager,
    user: str,
    thinking: str = SECRET,
    *,
    signature: str = "sig-1",
    head: Head = HEAD,
) -> tuple[CompileResult, str]:
    cm.add_message("user", user)
    result = cm.compile(head)
    reply = [
        {"type": "thinking", "thinking": thinking, "signature": signature},
        {"type": "text", "text": "ok"},
    ]
    return result, cm.record_reply(reply, result)


def sent_thinking(result: CompileResult) -> list[dict[str, Any]]:
    return [
        block
        for message in result.request["messages"]
        for block in message["content"]
        if block["type"] in ("thinking", "redacted_thinking")
    ]


def record_of(cm: ContextManager, message_id: str, block: int = 0) -> dict[str, Any]:
    stored = cm.get_message(message_id).content[block]
    assert isinstance(stored, ThinkingBlock)
    record: dict[str, Any] = stored.extra[REASONING_KEY]
    return record


def file_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


# capture and read back


def test_a_captured_reply_reads_back_ok_and_its_thinking_is_sent_again_as_it_came(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "plan the deploy")
    cm.add_message("user", "go on")
    result = cm.compile(HEAD)
    assert sent_thinking(result) == [{"type": "thinking", "thinking": SECRET, "signature": "sig-1"}]
    assert result.thinking_strip is None
    audit = read_reasoning(cm)
    assert [(p.message_id, p.block, p.kind, p.status) for p in audit.parts] == [
        (reply_id, 0, "text", "ok")
    ]
    part = audit.parts[0]
    assert part.text is not None
    assert part.text.value == SECRET
    assert (part.size, audit.bytes, audit.truncated) == (len(SECRET), len(SECRET), False)
    assert part.ref == record_of(cm, reply_id)["ref"]
    sidecar._check()


def test_the_stored_block_keeps_its_signature_and_a_record_but_never_the_text(
    store: SQLiteStore, sidecar: CountingSidecar, paths: tuple[Path, Path]
) -> None:
    cm = open_cm(store, sidecar)
    with capture_logs() as logs:
        _, reply_id = turn(cm, "plan the deploy")
    stored = cm.get_message(reply_id).content[0]
    assert isinstance(stored, ThinkingBlock)
    assert (stored.thinking, stored.signature) == ("", "sig-1")
    assert set(record_of(cm, reply_id)) == {"kind", "ref", "digest", "size"}
    assert SECRET.encode() not in file_bytes(paths[0])
    assert SECRET.encode() in file_bytes(paths[1])
    captured = [e for e in logs if e["event"] == "reasoning_captured"]
    assert len(captured) == 1
    assert captured[0]["parts"] == [{"block": 0, **record_of(cm, reply_id)}]
    assert SECRET not in repr(logs)


def test_the_private_record_never_reaches_a_request(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    turn(cm, "one")
    turn(cm, "two", "second thoughts", signature="sig-2")
    cm.add_message("user", "three")
    request = json.dumps(cm.compile(HEAD).request)
    assert REASONING_KEY not in request
    assert SECRET in request
    assert "second thoughts" in request


def test_a_manager_opened_without_the_sidecar_never_sends_a_captured_blocks_record(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    turn(open_cm(store, sidecar), "plan")
    bare = ContextManager.open(store, namespace="ada", binding=ThinkingBinding(binds=False))
    bare.add_message("user", "go on")
    result = bare.compile(HEAD)
    assert REASONING_KEY not in json.dumps(result.request)
    assert sent_thinking(result) == []


def test_a_summarized_display_is_captured_as_kind_summary(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    summarized = Head(
        model=HEAD.model,
        system=HEAD.system,
        tools=TOOLS,
        settings={"max_tokens": 1024, "thinking": {"type": "adaptive", "display": "summarized"}},
    )
    _, reply_id = turn(cm, "plan", "a summary of the plan", head=summarized)
    assert record_of(cm, reply_id)["kind"] == "summary"
    assert [(p.kind, p.status) for p in read_reasoning(cm).parts] == [("summary", "ok")]


def test_redacted_thinking_keeps_its_data_inline_reads_redacted_and_is_sent_unchanged(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    cm.add_message("user", "plan")
    result = cm.compile(HEAD)
    redacted = {"type": "redacted_thinking", "data": "opaque-bytes"}
    reply_id = cm.record_reply([redacted, {"type": "text", "text": "ok"}], result)
    cm.add_message("user", "go on")
    assert sent_thinking(cm.compile(HEAD)) == [redacted]
    part = read_reasoning(cm, message_id=reply_id).parts[0]
    assert (part.kind, part.status, part.text) == ("redacted", "redacted", None)
    assert sidecar.gets == 0


def test_an_empty_thinking_text_is_not_captured_and_reads_back_ok_and_empty(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "plan", "")
    assert REASONING_KEY not in cm.get_message(reply_id).content[0].extra  # type: ignore[union-attr]
    part = read_reasoning(cm).parts[0]
    assert part.status == "ok"
    assert part.text is not None
    assert part.text.value == ""


def test_capture_false_keeps_the_text_inline_and_sends_it(
    store: SQLiteStore, paths: tuple[Path, Path]
) -> None:
    cm = open_cm(store, None, capture=False)
    _, reply_id = turn(cm, "plan")
    assert cm.get_message(reply_id).content[0] == ThinkingBlock(SECRET, "sig-1")
    cm.add_message("user", "go on")
    assert sent_thinking(cm.compile(HEAD))[0]["thinking"] == SECRET
    part = read_reasoning(cm).parts[0]
    assert (part.status, part.ref) == ("ok", None)


def test_capture_drop_keeps_no_text_reads_omitted_and_strips_the_block(
    store: SQLiteStore, paths: tuple[Path, Path]
) -> None:
    cm = open_cm(store, None, capture="drop")
    _, dropped = turn(cm, "plan")
    assert record_of(cm, dropped) == {"kind": "text", "omitted": True, "size": len(SECRET)}
    assert SECRET.encode() not in file_bytes(paths[0])
    # The signature binds the text, so a block sent without it would not verify: it is stripped
    # at the next compile, and the reply made after that compile keeps its own (empty) block.
    result, empty = turn(cm, "again", "", signature="sig-2")
    assert sent_thinking(result) == []
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (dropped,)
    cm.add_message("user", "go on")
    later = cm.compile(HEAD)
    assert [b["signature"] for b in sent_thinking(later)] == ["sig-2"]
    assert later.thinking_strip is None
    statuses = [(p.message_id, p.status) for p in read_reasoning(cm).parts]
    assert statuses == [(dropped, "omitted"), (empty, "ok")]


def test_an_omitted_display_block_keeps_flowing_under_capture_drop(
    store: SQLiteStore,
) -> None:
    cm = open_cm(store, None, capture="drop")
    turn(cm, "plan", "")
    cm.add_message("user", "go on")
    result = cm.compile(HEAD)
    assert sent_thinking(result) == [{"type": "thinking", "thinking": "", "signature": "sig-1"}]
    assert result.thinking_strip is None


# erasure, other namespaces, tampering


def test_an_erased_blob_reads_erased_and_the_next_compile_strips_only_that_reply(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    """VENDOR_RULES 4 changed this: removing the OLDEST thinking keeps every later block."""
    cm = open_cm(store, sidecar)
    _, first = turn(cm, "one", "first thoughts", signature="sig-1")
    turn(cm, "two", "second thoughts", signature="sig-2")
    assert sidecar.erase(record_of(cm, first)["ref"])
    assert [p.status for p in read_reasoning(cm).parts] == ["erased", "ok"]
    restarted = open_cm(store, sidecar)
    restarted.add_message("user", "three")
    result = restarted.compile(HEAD)
    assert [b["signature"] for b in sent_thinking(result)] == ["sig-2"]
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.replies) == ("messages", (first,))
    assert "first thoughts" not in json.dumps(result.request)


def test_an_erasure_before_a_forks_first_compile_strips_with_cause_messages(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "one")
    sidecar.erase(record_of(cm, reply_id)["ref"])
    cm.fork("experiment")
    cm.add_message("user", "two")
    result = cm.compile(HEAD)
    assert result.thinking_strip is not None
    # main compiled before the fork, so the fork's first compile is no "first" (issue 28 item 12)
    assert (result.thinking_strip.cause, result.thinking_strip.replies) == (
        "messages",
        (reply_id,),
    )
    assert sent_thinking(result) == []


def test_a_running_manager_strips_an_erased_reply_at_its_next_compile(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "one")
    cm.add_message("user", "two")
    assert sent_thinking(cm.compile(HEAD))
    sidecar.erase(record_of(cm, reply_id)["ref"])
    result = cm.compile(HEAD)
    assert SECRET not in json.dumps(result.request)


def test_an_erased_reply_is_reported_once_on_its_branch(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "one")
    sidecar.erase(record_of(cm, reply_id)["ref"])
    cm.add_message("user", "two")
    assert open_cm(store, sidecar).compile(HEAD).thinking_strip is not None
    assert open_cm(store, sidecar).compile(HEAD).thinking_strip is None


def test_erase_before_removes_blobs_captured_before_the_cutoff_only(
    tmp_path: Path,
) -> None:
    now = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC)]
    side = SQLiteReasoningStore(tmp_path / "r.db", clock=lambda: now[0])
    try:
        old = side.put("ada", "old thoughts")
        now[0] += dt.timedelta(days=40)
        new = side.put("ada", "new thoughts")
        assert side.erase_before(now[0] - dt.timedelta(days=30)) == 1
        assert (side.get(old, "ada"), side.get(new, "ada")) == (None, "new thoughts")
        assert side.erase_serial() == 1
        assert b"old thoughts" not in file_bytes(tmp_path / "r.db")
        side._check()
    finally:
        side.close()


def test_erase_before_refuses_a_naive_time() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        MemoryReasoningStore().erase_before(dt.datetime(2026, 1, 1))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_sidecar_seals_each_text_to_its_namespace(kind: str, tmp_path: Path) -> None:
    side: ReasoningStore = (
        MemoryReasoningStore() if kind == "memory" else SQLiteReasoningStore(tmp_path / "r.db")
    )
    try:
        ref_a = side.put("ada", SECRET)
        assert side.put("ada", SECRET) == ref_a
        ref_b = side.put("bob", SECRET)
        assert ref_a != ref_b
        assert (side.get(ref_a, "ada"), side.get(ref_a, "bob")) == (SECRET, None)
        assert (side.get(ref_b, "bob"), side.get(ref_b, "ada")) == (SECRET, None)
        assert side.holds(ref_a)
        assert side.erase(ref_a)
        assert not side.erase(ref_a)
        assert (side.holds(ref_a), side.get(ref_b, "bob")) == (False, SECRET)
    finally:
        side.close()


def test_a_blob_sealed_to_another_namespace_reads_digest_mismatch_and_is_never_sent(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    ada = open_cm(store, sidecar, namespace="ada")
    bob = open_cm(store, sidecar, namespace="bob")
    _, ada_reply = turn(ada, "plan")
    _, bob_reply = turn(bob, "plan")
    ada_record, bob_record = record_of(ada, ada_reply), record_of(bob, bob_reply)
    assert ada_record["digest"] == bob_record["digest"]
    assert ada_record["ref"] != bob_record["ref"]
    # Bob's stored reply is pointed at Ada's blob: same text, same digest, same signature.
    forged = ThinkingBlock("", "sig-1", extra={REASONING_KEY: ada_record})
    bob.edit_message(bob_reply, [forged, {"type": "text", "text": "ok"}])
    bob.add_message("user", "go on")
    result = bob.compile(HEAD)
    assert sent_thinking(result) == []
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (bob_reply,)
    assert SECRET not in json.dumps(result.request)
    assert [p.status for p in read_reasoning(bob).parts] == ["digest-mismatch"]
    assert [p.status for p in read_reasoning(ada).parts] == ["ok"]


def test_a_tampered_blob_reads_digest_mismatch_and_is_stripped(
    store: SQLiteStore, sidecar: CountingSidecar, paths: tuple[Path, Path]
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "plan")
    with sqlite3.connect(paths[1]) as raw:
        raw.execute("UPDATE blobs SET envelope = replace(envelope, 'secret', 'benign')")
    raw.close()
    assert [p.status for p in read_reasoning(cm).parts] == ["digest-mismatch"]
    restarted = open_cm(store, sidecar)
    restarted.add_message("user", "go on")
    result = restarted.compile(HEAD)
    assert sent_thinking(result) == []
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (reply_id,)
    assert "benign" not in json.dumps(result.request)


def test_a_tampered_digest_in_the_message_store_reads_digest_mismatch_and_is_stripped(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, reply_id = turn(cm, "plan")
    record = {**record_of(cm, reply_id), "digest": "0" * 64}
    cm.edit_message(
        reply_id,
        [ThinkingBlock("", "sig-1", extra={REASONING_KEY: record}), {"type": "text", "text": "ok"}],
    )
    assert [p.status for p in read_reasoning(cm).parts] == ["digest-mismatch"]
    cm.add_message("user", "go on")
    assert sent_thinking(cm.compile(HEAD)) == []


# failure: fail-closed capture, failing resolution


def test_a_failing_sidecar_write_fails_record_reply_and_stores_nothing_of_the_reply(
    store: SQLiteStore, paths: tuple[Path, Path]
) -> None:
    side = UnwritableSidecar(paths[1])
    try:
        cm = open_cm(store, side)
        cm.add_message("user", "plan")
        result = cm.compile(HEAD)
        before = cm.branch_head()
        reply = [{"type": "thinking", "thinking": SECRET, "signature": "sig-1"}]
        with pytest.raises(OSError, match="sidecar disk full"):
            cm.record_reply([*reply, {"type": "text", "text": "ok"}], result)
        assert cm.branch_head() == before
        assert [m.role for m in cm.messages()] == ["user"]
        assert SECRET.encode() not in file_bytes(paths[0])
    finally:
        side.close()


def test_a_sidecar_that_fails_to_read_fails_the_compile(
    store: SQLiteStore, sidecar: CountingSidecar, paths: tuple[Path, Path]
) -> None:
    turn(open_cm(store, sidecar), "plan")
    down = UnreadableSidecar(paths[1])
    try:
        cm = open_cm(store, down)
        cm.add_message("user", "go on")
        with pytest.raises(OSError, match="sidecar unreachable"):
            cm.compile(HEAD)
    finally:
        down.close()


def test_capture_true_without_a_store_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a store"):
        ReasoningCapture(None)
    with pytest.raises(ValueError, match="True, False or 'drop'"):
        ReasoningCapture(MemoryReasoningStore(), capture="keep")  # type: ignore[arg-type]


# the bounded reader


def test_the_reader_stops_at_max_parts_without_reading_further(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    replies = [turn(cm, f"q{i}", f"thoughts {i}", signature=f"sig-{i}")[1] for i in range(4)]
    sidecar.gets = 0
    audit = read_reasoning(cm, max_parts=2)
    assert [p.message_id for p in audit.parts] == replies[:2]
    assert audit.truncated
    assert sidecar.gets == 2


def test_the_reader_stops_before_a_part_that_would_pass_max_bytes_without_fetching_it(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    for i in range(4):
        turn(cm, f"q{i}", "x" * 100, signature=f"sig-{i}")
    sidecar.gets = 0
    audit = read_reasoning(cm, max_bytes=250)
    assert (len(audit.parts), audit.bytes, audit.truncated) == (2, 200, True)
    assert sidecar.gets == 2


def test_a_read_within_both_bounds_is_complete_and_since_skips_earlier_replies(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    _, first = turn(cm, "q0", "zero", signature="sig-0")
    _, second = turn(cm, "q1", "one", signature="sig-1")
    everything = read_reasoning(cm, max_parts=2, max_bytes=7)
    assert ([p.message_id for p in everything.parts], everything.truncated) == (
        [first, second],
        False,
    )
    later = read_reasoning(cm, since=cm.get_message(first).sequence)
    assert [p.message_id for p in later.parts] == [second]


def test_the_reader_refuses_bad_bounds_and_unknown_messages(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    cm = open_cm(store, sidecar)
    with pytest.raises(ValueError, match="max_parts must be a positive integer"):
        read_reasoning(cm, max_parts=0)
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        read_reasoning(cm, max_bytes=-1)
    with pytest.raises(ValueError, match="not both"):
        read_reasoning(cm, message_id="msg_1", since=0)
    with pytest.raises(MessageNotFound, match="msg_404"):
        read_reasoning(cm, message_id="msg_404")


def test_the_reader_needs_the_sidecar_to_read_captured_parts(
    store: SQLiteStore, sidecar: CountingSidecar
) -> None:
    turn(open_cm(store, sidecar), "plan")
    with pytest.raises(ValueError, match="has none; open it with reasoning="):
        read_reasoning(ContextManager.open(store, namespace="ada"))


def test_untrusted_text_refuses_str_and_format_and_hides_its_text_in_repr() -> None:
    text = UntrustedText(SECRET, "reasoning:ada:msg_2:0")
    with pytest.raises(TypeError, match=r"read `\.value` deliberately"):
        str(text)
    with pytest.raises(TypeError, match="untrusted model output"):
        f"{text}"
    with pytest.raises(TypeError, match="untrusted model output"):
        format(text, "")
    assert SECRET not in repr(text)
    assert text.value == SECRET


# the boot warning


def test_the_boot_warning_names_the_agent_and_the_setting() -> None:
    with capture_logs() as logs:
        assert warn_if_reasoning_unconfigured("ada", HEAD, None)
    assert len(logs) == 1
    assert (logs[0]["log_level"], logs[0]["event"]) == ("warning", "reasoning_unconfigured")
    assert (logs[0]["agent"], logs[0]["setting"]) == ("ada", "reasoning")
    assert "'ada'" in logs[0]["note"]
    assert "reasoning=False" in logs[0]["note"]


@pytest.mark.parametrize(
    ("head", "reasoning"),
    [
        (HEAD, False),
        (HEAD, ReasoningCapture(MemoryReasoningStore())),
        (HEAD, ReasoningCapture(None, capture=False)),
        (Head(model=HEAD.model, system="s", tools=[], settings={"max_tokens": 1024}), None),
    ],
    ids=["opted-out", "sidecar", "capture-off", "no-thinking"],
)
def test_the_boot_warning_is_silent_when_opted_out_configured_or_not_thinking(
    head: Head, reasoning: ReasoningCapture | bool | None
) -> None:
    with capture_logs() as logs:
        assert not warn_if_reasoning_unconfigured("ada", head, reasoning)  # type: ignore[arg-type]
    assert logs == []


# reopening


def test_reopening_the_store_and_the_sidecar_keeps_references_resolvable_and_bytes_identical(
    paths: tuple[Path, Path],
) -> None:
    store, side = SQLiteStore(paths[0]), SQLiteReasoningStore(paths[1])
    cm = open_cm(store, side)
    _, reply_id = turn(cm, "plan")
    cm.add_message("user", "go on")
    before = json.dumps(cm.compile(HEAD).request)
    store.close()
    side.close()
    store, side = SQLiteStore(paths[0]), SQLiteReasoningStore(paths[1])
    try:
        reopened = open_cm(store, side)
        after = reopened.compile(HEAD)
        assert json.dumps(after.request) == before
        assert after.thinking_strip is None
        assert sent_thinking(after)[0]["thinking"] == SECRET
        assert read_reasoning(reopened, message_id=reply_id).parts[0].status == "ok"
    finally:
        store.close()
        side.close()


def test_the_sidecar_refuses_the_message_stores_file(paths: tuple[Path, Path]) -> None:
    SQLiteStore(paths[0]).close()
    with pytest.raises(NotADatabase, match="not a reasoning sidecar"):
        SQLiteReasoningStore(paths[0])


def test_the_reasoning_names_are_exported() -> None:
    names = {
        "AuditResult",
        "MemoryReasoningStore",
        "ReasoningCapture",
        "ReasoningPart",
        "ReasoningStore",
        "SQLiteReasoningStore",
        "UntrustedText",
        "read_reasoning",
        "warn_if_reasoning_unconfigured",
    }
    assert names <= set(context_manager.__all__)
