"""Drops: the provider's own reports are parsed, placed on what they hit, and released by reason."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types.beta import BetaMessage
from structlog.testing import capture_logs

import context_manager
from context_manager import (
    Block,
    CompileResult,
    ContextManager,
    MemoryStore,
    MessageMeta,
    PlacedDrops,
    ProvenanceEntry,
    ReplyDrop,
    RoundDrop,
    Source,
    TextBlock,
    ThinkingBlock,
    ThinkingDrop,
    ToolUseBlock,
    UnplacedDrop,
    parse_input_transformations,
    place_thinking_drops,
)
from context_manager._model._canonical import signature_digest
from context_manager._model._results import ReplyToken
from context_manager._store._protocol import Release

PREFIX = "prefix_binding_mismatch"
MODEL = "model_binding_mismatch"
ORG = "organization_binding_mismatch"
END_USER = "end_user_binding_mismatch"


def dropped(path: Any, reason: str = PREFIX) -> dict[str, Any]:
    """A ``thinking_dropped`` wire entry."""
    return {"type": "thinking_dropped", "path": path, "reason": reason}


def reply_entry(
    message_id: str, thinking: dict[int, str], others: tuple[int, ...] = ()
) -> ProvenanceEntry:
    """Provenance of a compiled reply: signed thinking at each ``j`` given, other blocks plain."""
    blocks = {j: j for j in (*thinking, *others)}
    signatures = {j: signature_digest(sig) for j, sig in thinking.items()}
    return ProvenanceEntry("message", (Source(message_id, blocks, signatures),))


def user_entry(message_id: str) -> ProvenanceEntry:
    """Provenance of a compiled user message with one text block."""
    return ProvenanceEntry("message", (Source(message_id, {0: 0}),))


def sdk_message(transformations: list[dict[str, Any]] | None) -> BetaMessage:
    """A ``BetaMessage`` built the way the SDK builds responses (no validation)."""
    return BetaMessage.construct(
        id="msg_api",
        type="message",
        role="assistant",
        model="claude-opus-5-5",
        content=[{"type": "text", "text": "ok"}],
        stop_reason="end_turn",
        stop_sequence=None,
        usage={"input_tokens": 1, "output_tokens": 1},
        input_transformations=transformations,
    )


# parse


def test_dropped_entries_are_read_from_an_sdk_message_a_dict_and_a_list() -> None:
    """Every accepted response shape yields the same drops, in order, paths parsed."""
    entries = [dropped("messages.1.content.0"), dropped("messages.3.content.2", MODEL)]
    expected = (
        ThinkingDrop("messages.1.content.0", 1, 0, PREFIX),
        ThinkingDrop("messages.3.content.2", 3, 2, MODEL),
    )

    assert expected == parse_input_transformations(sdk_message(entries))
    assert expected == parse_input_transformations({"input_transformations": entries})
    assert expected == parse_input_transformations(entries)


@pytest.mark.parametrize(
    "response", [None, {}, [], {"input_transformations": None}, sdk_message(None)]
)
def test_a_response_without_transformations_has_no_drops(response: Any) -> None:
    """No ``input_transformations`` (beta off, or nothing to report) means no drops."""
    assert parse_input_transformations(response) == ()


def test_unknown_types_and_reasons_are_ignored_with_a_debug_event() -> None:
    """A future entry type or reason is left out, logged at debug, and never fails."""
    entries = [
        {"type": "thinking_rewritten", "path": "messages.1.content.0"},
        dropped("messages.1.content.1", "future_binding_mismatch"),
        {"type": "thinking_mismatch_allowed", "path": "messages.1.content.2", "reason": PREFIX},
        dropped("messages.1.content.3"),
    ]

    with capture_logs() as logs:
        drops = parse_input_transformations(sdk_message(entries))

    assert (ThinkingDrop("messages.1.content.3", 1, 3, PREFIX),) == drops
    expected = [
        {
            "event": "input_transformation_ignored",
            "log_level": "debug",
            "why": "unknown type",
            "type": "thinking_rewritten",
        },
        {
            "event": "input_transformation_ignored",
            "log_level": "debug",
            "why": "unknown reason",
            "reason": "future_binding_mismatch",
        },
    ]
    assert expected == logs


@pytest.mark.parametrize(
    ("path", "expected_path"),
    [
        (None, ""),
        ("messages.x.content.y", "messages.x.content.y"),
        ("messages.-1.content.0", "messages.-1.content.0"),
        ("messages.1.content.-2", "messages.1.content.-2"),
        ("messages.01.content.0", "messages.01.content.0"),
        ("messages.1.content", "messages.1.content"),
        ("messages.1.content.0.text", "messages.1.content.0.text"),
        ("system.0", "system.0"),
        ("messages.١.content.0", "messages.١.content.0"),
        ("messages." + "9" * 5000 + ".content.0", "messages." + "9" * 5000 + ".content.0"),
        (7, "7"),
    ],
)
def test_a_malformed_path_parses_to_no_indexes(path: Any, expected_path: str) -> None:
    """Missing, non-numeric, negative, padded or oddly shaped paths keep ``i`` and ``j`` None."""
    assert (ThinkingDrop(expected_path, None, None, PREFIX),) == parse_input_transformations(
        [dropped(path)]
    )


def test_a_response_that_is_plain_text_is_refused() -> None:
    """A string is not a response; the error says what is accepted."""
    with pytest.raises(TypeError, match="expected a response, a dict or a list"):
        parse_input_transformations("messages.1.content.0")


# place


def test_a_drop_is_placed_on_the_stored_reply_at_its_stored_block() -> None:
    """Compiled message ``i`` from one stored reply places ``j`` at that reply's block index."""
    provenance = (
        user_entry("msg_1"),
        ProvenanceEntry(
            "message", (Source("msg_2", {0: 1, 1: 2}, {0: signature_digest("sig-a")}),)
        ),
    )

    placed = place_thinking_drops([ThinkingDrop("messages.1.content.0", 1, 0, PREFIX)], provenance)

    assert PlacedDrops(replies=(ReplyDrop("msg_2", 1, PREFIX, "messages.1.content.0"),)) == placed
    assert (
        placed.placed_blocks,
        placed.unplaced_count,
        placed.reply_ids,
        placed.reply_count,
    ) == (1, 0, ("msg_2",), 1)


def test_every_other_stored_reply_with_the_signature_is_placed_each_once() -> None:
    """A reply kept twice (e.g. imported) is found by signature; each reply counts once."""
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    key = cm.current_branch_key()
    blocks: list[Block] = [
        ThinkingBlock("", "sig-a"),
        ThinkingBlock("", "sig-b"),
        TextBlock("Done."),
    ]
    digests = [signature_digest("sig-a"), signature_digest("sig-b")]
    original = cm.store.append("ada", key, "assistant", blocks, MessageMeta(), signatures=digests)
    copy = cm.store.append("ada", key, "assistant", blocks, MessageMeta(), signatures=digests)
    provenance = (reply_entry(original.id, {0: "sig-a", 1: "sig-b"}, (2,)),)
    drops = parse_input_transformations(
        [dropped("messages.0.content.0"), dropped("messages.0.content.1")]
    )

    placed = place_thinking_drops(
        drops, provenance, find_signature=lambda digest: cm.store.find_signature("ada", digest)
    )

    expected = (
        ReplyDrop(original.id, 0, PREFIX, "messages.0.content.0"),
        ReplyDrop(copy.id, None, PREFIX, "messages.0.content.0"),
        ReplyDrop(original.id, 1, PREFIX, "messages.0.content.1"),
        ReplyDrop(copy.id, None, PREFIX, "messages.0.content.1"),
    )
    assert expected == placed.replies
    assert (original.id, copy.id) == placed.reply_ids
    assert placed.placed_blocks == 2
    assert ((original.id, 0),) == placed.releases()


def test_a_drop_past_the_compiled_messages_is_placed_on_its_stream_round() -> None:
    """``i`` past the compiled messages indexes the rounds the host appended."""
    provenance = (user_entry("msg_1"),)
    round_0 = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "", "signature": "sig-r"},
            {"type": "tool_use", "id": "t1", "name": "read_log", "input": {}},
        ],
    }
    round_1 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}
    drops = parse_input_transformations(
        [
            dropped("messages.1.content.0"),
            dropped("messages.2.content.0"),
            dropped("messages.3.content.0"),
        ]
    )

    placed = place_thinking_drops(drops, provenance, [round_0, round_1])

    assert (RoundDrop(0, 0, PREFIX, "messages.1.content.0"),) == placed.rounds
    assert (
        ThinkingBlock("", "sig-r"),
        ToolUseBlock("t1", "read_log", {}),
    ) == placed.rounds[0].content
    expected_unplaced = (
        UnplacedDrop("messages.2.content.0", PREFIX, "content index is not a thinking block"),
        UnplacedDrop(
            "messages.3.content.0", PREFIX, "past the compiled messages and the appended rounds"
        ),
    )
    assert expected_unplaced == placed.unplaced
    assert (
        placed.placed_blocks,
        placed.unplaced_count,
        placed.round_indexes,
        placed.reply_count,
    ) == (1, 2, (0,), 1)


def test_a_round_whose_content_cannot_be_read_is_still_placed_by_index() -> None:
    """The provider's word is trusted when the appended round is opaque."""
    placed = place_thinking_drops(
        [ThinkingDrop("messages.0.content.3", 0, 3, PREFIX)], (), [object()]
    )

    assert (RoundDrop(0, 3, PREFIX, "messages.0.content.3"),) == placed.rounds
    assert placed.rounds[0].content is None


def test_bad_paths_are_unplaced_with_the_reason_never_raised() -> None:
    """Malformed, out of range, non-thinking, summary, notice and merged targets are unplaced."""
    provenance = (
        ProvenanceEntry("summary"),
        ProvenanceEntry("notice", (Source("msg_9", {0: 0}),)),
        ProvenanceEntry("message", (Source("msg_1", {0: 0}), Source("msg_2", {0: 0}))),
        reply_entry("msg_3", {0: "sig-a"}, (1,)),
    )
    drops = [
        ThinkingDrop("messages.x.content.y", None, None, PREFIX),
        ThinkingDrop("messages.-1.content.0", -1, 0, PREFIX),
        ThinkingDrop("messages.0.content.0", 0, 0, PREFIX),
        ThinkingDrop("messages.1.content.0", 1, 0, PREFIX),
        ThinkingDrop("messages.2.content.0", 2, 0, PREFIX),
        ThinkingDrop("messages.3.content.1", 3, 1, PREFIX),
        ThinkingDrop("messages.3.content.7", 3, 7, PREFIX),
        ThinkingDrop("messages.9.content.0", 9, 0, MODEL),
    ]

    placed = place_thinking_drops(drops, provenance)

    no_source = "compiled message has no single stored source"
    not_thinking = "content index is not a thinking block"
    expected = (
        UnplacedDrop("messages.x.content.y", PREFIX, "malformed path"),
        UnplacedDrop("messages.-1.content.0", PREFIX, "malformed path"),
        UnplacedDrop("messages.0.content.0", PREFIX, no_source),
        UnplacedDrop("messages.1.content.0", PREFIX, no_source),
        UnplacedDrop("messages.2.content.0", PREFIX, no_source),
        UnplacedDrop("messages.3.content.1", PREFIX, not_thinking),
        UnplacedDrop("messages.3.content.7", PREFIX, not_thinking),
        UnplacedDrop(
            "messages.9.content.0", MODEL, "past the compiled messages and the appended rounds"
        ),
    )
    assert PlacedDrops(unplaced=expected) == placed
    assert (placed.placed_blocks, placed.unplaced_count, placed.reasons) == (0, 8, (PREFIX, MODEL))


def test_a_block_reported_twice_is_placed_once() -> None:
    """The same ``(i, j)`` reported twice counts as one dropped block."""
    provenance = (reply_entry("msg_1", {0: "sig-a"}),)
    drops = [ThinkingDrop("messages.0.content.0", 0, 0, PREFIX)] * 2

    assert place_thinking_drops(drops, provenance).placed_blocks == 1


def test_prefix_drops_are_released_and_model_organization_and_end_user_drops_kept() -> None:
    """The release policy: each reply from its lowest released block; drops checked before the
    model (another model, organization or end user) stay (issue 28 item 6)."""
    provenance = (
        reply_entry("msg_1", {0: "a0", 1: "a1"}),
        reply_entry("msg_2", {0: "b0"}),
        reply_entry("msg_3", {0: "c0"}),
        reply_entry("msg_4", {0: "d0"}),
    )
    drops = [
        ThinkingDrop("messages.0.content.1", 0, 1, PREFIX),
        ThinkingDrop("messages.0.content.0", 0, 0, PREFIX),
        ThinkingDrop("messages.1.content.0", 1, 0, ORG),
        ThinkingDrop("messages.2.content.0", 2, 0, END_USER),
        ThinkingDrop("messages.3.content.0", 3, 0, MODEL),
    ]

    placed = place_thinking_drops(drops, provenance)

    assert placed.releases() == (("msg_1", 0),)
    assert placed.reply_count == 4


def test_the_context_manager_places_drops_and_releases_them_on_the_compiled_branch() -> None:
    """``place_drops`` parses, places by signature through its store, and records releases."""
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    key = cm.current_branch_key()
    user = cm.add_message("user", "look at the log")
    blocks: list[Block] = [
        ThinkingBlock("", "sig-a"),
        ThinkingBlock("", "sig-b"),
        TextBlock("Checked."),
    ]
    reply = cm.store.append(
        "ada",
        key,
        "assistant",
        blocks,
        MessageMeta(),
        signatures=[signature_digest("sig-a"), signature_digest("sig-b")],
    ).id
    other = cm.add_message("assistant", [ThinkingBlock("", "sig-c"), TextBlock("Other.")])
    result = CompileResult(
        request={},
        provenance=(
            user_entry(user),
            reply_entry(reply, {0: "sig-a", 1: "sig-b"}, (2,)),
            reply_entry(other, {0: "sig-c"}, (1,)),
        ),
        thinking_strip=None,
        compile_id="c1",
        dry=False,
        tokens=0,
        branch=key,
        namespace="ada",
        token=ReplyToken(manager_token=cm.token, head_digests={}, end_chain=b""),
    )
    response = sdk_message(
        [
            dropped("messages.1.content.1"),
            dropped("messages.1.content.0"),
            dropped("messages.2.content.0", MODEL),
        ]
    )

    placed = cm.place_drops(response, result)

    assert (reply, other) == placed.reply_ids
    assert {reply: Release(reply, 0, False, at_sequence=0)} == cm.store.binding_record(
        "ada", key
    ).releases


def test_the_drop_names_are_exported_from_the_package() -> None:
    """The drop API is public and listed in ``__all__``."""
    names = {
        "PlacedDrops",
        "ReplyDrop",
        "RoundDrop",
        "ThinkingDrop",
        "UnplacedDrop",
        "parse_input_transformations",
        "place_thinking_drops",
    }
    assert names <= set(context_manager.__all__)
    assert all(hasattr(context_manager, name) for name in names)
