"""Stores written before binding v2: version-1 stamps stay usable where they can be read (#15).

A version-1 stamp sealed each thinking block to every block sent before it, earlier thinking
included (seed ``context-manager chain v2``). Where all of that is still sent as it was, the
block's prefix and its predecessor are as they were (VENDOR_RULES 1, 4, 5), so it is sent; where
not (its oldest thinking shed, say) its validity cannot be read and it is left out.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import replies_with_thinking

from context_manager import (
    ContextManager,
    Head,
    SQLiteStore,
    ThinkingBinding,
    ThinkingBlock,
)
from context_manager._model._canonical import canonical_json
from context_manager.simulator import Simulator

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
V1_SEED = hashlib.sha256(b"context-manager chain v2").digest()


def _feed(chain: bytes, role: str, block: dict[str, Any]) -> bytes:
    return hashlib.sha256(
        chain + b"\x02" + role.encode() + b"\x00" + canonical_json(block).encode()
    ).digest()


def version_1_stamp(request: dict[str, Any], reply: list[dict[str, Any]]) -> dict[str, Any]:
    """The stamp the library wrote before binding v2 (``_binding/_stamp.py`` at eec8f81^): a
    chain over every block of the request as sent, thinking included, then the reply's own."""
    chain = V1_SEED
    for message in request["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            chain = _feed(chain, message["role"], block)
    seals: dict[str, str] = {}
    for index, block in enumerate(reply):
        if block["type"] in ("thinking", "redacted_thinking"):
            seal = hashlib.sha256(chain + b"\x03" + canonical_json(block).encode())
            seals[str(index)] = seal.hexdigest()
        chain = _feed(chain, "assistant", block)
    return {"v": 1, "head": request["head_digests"], "seals": seals}


def thinking_sent(request: dict[str, Any]) -> int:
    return sum(
        1
        for m in request["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "thinking"
    )


async def _old_store(
    path: Path, sim: Simulator, turns: int, head: Head = HEAD, version: int = 1
) -> list[str]:
    """A store whose replies carry the stamps an earlier library wrote: version 1, or version 2
    as written before per-block digests (no ``own``). Returns the replies' ids."""
    store = SQLiteStore(path)
    cm = ContextManager.open(store, namespace="ada")
    old: dict[str, str] = {}
    async with sim.client() as client:
        for n in range(turns):
            cm.add_message("user", f"question {n}")
            result = cm.compile(head)
            message = await client.beta.messages.create(**result.request)
            reply = [b.model_dump(exclude_none=True) for b in message.content]
            digests = result._token.head_digests
            stamp = version_1_stamp({**result.request, "head_digests": digests}, reply)
            old[cm.record_reply(message, result)] = json.dumps(stamp)
    store.close()
    if version == 2:
        with sqlite3.connect(path) as db:
            db.execute("UPDATE messages SET stamp = json_remove(stamp, '$.own')")
        return list(old)
    with sqlite3.connect(path) as db:
        db.executemany(
            "UPDATE messages SET stamp = ? WHERE id = ?", [(s, i) for i, s in old.items()]
        )
    return list(old)


async def test_version_1_stamps_reopened_still_send_their_valid_thinking(sqlite_path: Path) -> None:
    sim = Simulator()
    await _old_store(sqlite_path, sim, 3)
    cm = ContextManager.open(SQLiteStore(sqlite_path), namespace="ada")
    cm.add_message("user", "and now?")
    result = cm.compile(HEAD)
    assert thinking_sent(result.request) == 3
    assert result.thinking_strip is None
    async with sim.client() as client:
        message = await client.beta.messages.create(**result.request)
    assert not message.input_transformations
    call = sim.calls[-1]
    checks = sim.verify({**call.request, "betas": list(call.betas)})
    assert [c.reason for c in checks] == [None, None, None]


async def test_a_version_1_block_whose_earlier_thinking_is_gone_is_left_out(
    sqlite_path: Path,
) -> None:
    """VENDOR_RULES 4 allows it, but a version-1 seal cannot show it: the conservative reading."""
    sim = Simulator()
    await _old_store(sqlite_path, sim, 3)
    cm = ContextManager.open(SQLiteStore(sqlite_path), namespace="ada")
    first = cm.messages()[1].id
    cm.release_thinking(first)
    cm.add_message("user", "and now?")
    result = cm.compile(HEAD)
    assert thinking_sent(result.request) == 0
    strip = result.thinking_strip
    assert strip is not None
    assert strip.replies[0] == first
    assert strip.blocks == 3


MYTHOS = attrs.evolve(HEAD, model="claude-mythos-5-1")
"""A model that runs no prefix check (VENDOR_RULES 10)."""
STRIPS = ThinkingBinding(append_changes=False)
"""A system change re-renders the head instead of being appended (SPEC 7b)."""


@pytest.mark.parametrize("version", [1, 2])
async def test_a_model_that_runs_no_prefix_check_keeps_unedited_replies_with_older_stamps(
    sqlite_path: Path, version: int
) -> None:
    """VENDOR_RULES 10: such a model checks each block alone. A reply never edited is as it
    was stamped, so a stamp written before per-block digests still shows its blocks valid."""
    sim = Simulator()
    ids = await _old_store(sqlite_path, sim, 3, head=MYTHOS, version=version)
    cm = ContextManager.open(SQLiteStore(sqlite_path), namespace="ada", binding=STRIPS)
    cm.add_message("user", "and now?")
    result = cm.compile(attrs.evolve(MYTHOS, system="You are Ada, terse."))
    assert replies_with_thinking(result) == ids
    assert result.thinking_strip is None
    async with sim.client() as client:
        message = await client.beta.messages.create(**result.request)
    assert not message.input_transformations


async def test_an_edited_reply_with_an_older_stamp_is_judged_as_on_a_model_that_checks(
    sqlite_path: Path,
) -> None:
    """A stamp without per-block digests cannot show an edit to the block itself (refused by
    every model, VENDOR_RULES 12): a reply at or after the earliest edit is judged the
    conservative way, and the request goes through."""
    sim = Simulator()
    ids = await _old_store(sqlite_path, sim, 3, head=MYTHOS, version=2)
    cm = ContextManager.open(SQLiteStore(sqlite_path), namespace="ada", binding=STRIPS)
    edited = cm.get_message(ids[1])
    thinking = edited.content[0]
    assert isinstance(thinking, ThinkingBlock)
    cm.edit_message(ids[1], [ThinkingBlock("made up", thinking.signature), *edited.content[1:]])
    cm.add_message("user", "and now?")
    result = cm.compile(attrs.evolve(MYTHOS, system="You are Ada, terse."))
    assert replies_with_thinking(result) == [ids[0]]
    assert result.thinking_strip is not None
    assert result.thinking_strip.replies == (ids[1], ids[2])
    async with sim.client() as client:
        message = await client.beta.messages.create(**result.request)
    assert not message.input_transformations
