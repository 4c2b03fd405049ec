"""Stamps at the store boundary: every store returns them typed, parsed once there.

A reply's stamp comes back from ``Store.stamps`` as a ``Stamp`` equal to the one written; a
corrupt row comes back as ``None``, logged once however often it is read, and the compile that
reads it leaves that reply's thinking out (and says so) while the other replies' stays.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from structlog.testing import capture_logs

from context_manager import ContextManager, Head, MemoryStore, PostgresStore, SQLiteStore, Store
from context_manager._model._stamps import Stamp

HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)

CORRUPT = '{"v": 2, "head": {}, "seals": {"0": 5}, "pred": {}}'
"""A version-2 stamp whose seal is not text."""


def answer(text: str, signature: str) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "", "signature": signature},
        {"type": "text", "text": text},
    ]


def corrupt(store: Store, request: pytest.FixtureRequest, namespace: str, reply: str) -> None:
    """Overwrite ``reply``'s stored stamp with ``CORRUPT``, as another program would."""
    if isinstance(store, MemoryStore):
        store._spaces[namespace].stamps[reply] = {"v": 2, "head": {}, "seals": {"0": 5}}
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE messages SET stamp = ? WHERE id = ?", (CORRUPT, reply))
        db.close()
    else:
        assert isinstance(store, PostgresStore)
        import psycopg

        dsn = request.getfixturevalue("postgres_dsn")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE messages SET stamp = %s WHERE id = %s", (CORRUPT, reply))


def two_replies(cm: ContextManager) -> tuple[str, str]:
    ids = []
    for n in (1, 2):
        cm.add_message("user", f"question {n}")
        result = cm.compile(HEAD)
        ids.append(cm.record_reply(answer(f"answer {n}", f"sig-{n}"), result))
    cm.add_message("user", "question 3")
    return ids[0], ids[1]


def test_a_store_returns_the_stamp_it_was_given_typed(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    first, second = two_replies(cm)
    stamps = store.stamps("ada", [first, second, "msg_none"])
    assert sorted(stamps) == [first, second]
    stamp = stamps[first]
    assert isinstance(stamp, Stamp)
    assert isinstance(stamps[second], Stamp)
    assert (stamp.model, list(stamp.blocks), stamp.owns) == (HEAD.model, [0], True)


@pytest.mark.usefixtures("no_render_snapshots")  # the restart renders from the store
def test_a_corrupt_stamp_row_reads_as_none_is_logged_once_and_its_thinking_is_left_out(
    store: Store, request: pytest.FixtureRequest
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    first, second = two_replies(cm)
    corrupt(store, request, "ada", second)
    cm.forget_cache(cm.current_branch_key())  # as a restart: the stamps are read again
    with capture_logs() as logs:
        assert store.stamps("ada", [second]) == {second: None}
        assert store.stamps("ada", [first, second])[second] is None
        result = cm.compile(HEAD)
    warnings = [e for e in logs if e["event"] == "stamp_unreadable"]
    assert [(w["message_id"], w["log_level"]) for w in warnings] == [(second, "warning")]
    sent = [
        block["signature"]
        for message in result.request["messages"]
        for block in message["content"]
        if block["type"] == "thinking"
    ]
    assert sent == ["sig-1"]  # the corrupt one is left out, the one before it is kept
    strip = result.thinking_strip
    assert strip is not None
    assert (strip.replies, strip.blocks, strip.cause) == ((second,), 1, "messages")
