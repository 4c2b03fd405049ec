"""The documented binding rules in the compiler (VENDOR_RULES 4, 8, 9; SPEC 7).

Each test states what a host can rely on: removing the oldest thinking never costs a later
block, a gap costs the blocks that recorded the removed one, and a model switch follows the
documented readability table.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    Store,
    ThinkingBinding,
    documented_readability,
)
from context_manager._binding import in_order, judge

HEAD = Head(
    model="claude-opus-5",
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
    cm = ContextManager.open(store, namespace="ada")
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[0])
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids[1:]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[0],)


def test_releasing_the_two_oldest_keeps_the_rest(store: Store) -> None:
    """VENDOR_RULES 4: a leading run of removed blocks leaves no gap."""
    cm = ContextManager.open(store, namespace="ada")
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[0])
    cm.release_thinking(ids[1])
    assert sent_replies(cm, cm.compile(HEAD)) == ids[2:]


def test_a_release_in_the_middle_costs_only_the_blocks_after_it(store: Store) -> None:
    """VENDOR_RULES 4: a gap fails the block that recorded the removed one, and so on in turn."""
    cm = ContextManager.open(store, namespace="ada")
    ids = history(cm, HEAD, 4)
    cm.release_thinking(ids[2])
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == ids[:2]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[2], ids[3])


def test_a_switch_to_a_model_that_reads_the_blocks_keeps_them(store: Store) -> None:
    """VENDOR_RULES 8, 9: Opus 5.5 reads Opus 5 blocks; the model is not part of the prefix."""
    cm = ContextManager.open(store, namespace="ada")
    ids = history(cm, HEAD, 3)
    newer = Head(model="claude-opus-5-5", system=HEAD.system, settings=HEAD.settings)
    result = cm.compile(newer)
    assert sent_replies(cm, result) == ids
    assert result.thinking_strip is None


def test_a_switch_to_a_model_that_cannot_read_them_leaves_them_out_as_a_model_change(
    store: Store,
) -> None:
    """VENDOR_RULES 9: Opus 5 does not read Opus 5.5 blocks."""
    cm = ContextManager.open(store, namespace="ada")
    newer = Head(model="claude-opus-5-5", system=HEAD.system, settings=HEAD.settings)
    ids = history(cm, newer, 2)
    result = cm.compile(HEAD)
    assert sent_replies(cm, result) == []
    assert result.thinking_strip is not None
    assert (result.thinking_strip.cause, result.thinking_strip.changed) == ("head", ("model",))
    assert result.thinking_strip.replies == tuple(ids)


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
    stamp = {"v": 2, "model": "m", "head": {}, "seals": {}, "pred": {}}
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
