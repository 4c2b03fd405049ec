"""A framework's own records (checkpoints, session items) kept in this library's store.

Stateful (``Records``): one namespace of the store per framework thread or session, beside the
agents' transcripts and never compiled. Each record is one stored message holding a JSON object,
tagged with its ``kind``; records are appended, never rewritten. Invariants: every read and
write first follows the store's current branch (another host's reset or rewind moved it);
nothing stored is lost (``reset``, ``keep_only`` and ``rewind_before`` start a branch and hide
or keep the old one, as the library's own rewinds do); every read goes through the store's
indexes by branch, kind and sequence.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from typing import Any

from context_manager._manager import ContextManager
from context_manager._model._branch_names import numbered_branch
from context_manager._model._content import TextBlock
from context_manager._model._errors import BranchNotFound
from context_manager._model._messages import MessageMeta, StoredMessage
from context_manager._store._protocol import Store


def encoded(typed: tuple[str, bytes]) -> list[str]:
    """A serializer's ``(type, bytes)`` as JSON: ``[type, base64]``.

    >>> encoded(("json", b"{}"))
    ['json', 'e30=']
    """
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def decoded(value: list[str]) -> tuple[str, bytes]:
    """``encoded``'s inverse.

    >>> decoded(["json", "e30="])
    ('json', b'{}')
    """
    return str(value[0]), base64.b64decode(value[1])


def record_of(message: StoredMessage) -> dict[str, Any]:
    """The JSON object a record message holds."""
    block = message.content[0]
    assert isinstance(block, TextBlock)  # records are written by ``Records.add`` only
    loaded: dict[str, Any] = json.loads(block.text)
    return loaded


def follow_current(cm: ContextManager) -> None:
    """Go on the branch the store names current when another manager or host moved the agent
    there (its rewind, its reset, or a fork a branch header named): what comes next continues
    there, not on a branch this manager was left on (hidden, or read as the framework's edits)."""
    name = cm.store.current_branch_name(cm.namespace)
    if name is None or name == cm.current_branch().name:
        return
    try:
        cm.switch_branch(name)
    except BranchNotFound:  # deleted since: stay where this manager was
        return


class Records:
    """The records of one thread or session: ``namespace`` of ``store``, its current branch."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.cm = ContextManager.open(store, namespace=namespace)

    @property
    def namespace(self) -> str:
        return self.cm.namespace

    def add(self, kind: str, record: dict[str, Any]) -> StoredMessage:
        """Append ``record`` (a JSON object) as a record of ``kind``; returns the stored message."""
        follow_current(self.cm)
        return self._append(kind, record)

    def _append(self, kind: str, record: dict[str, Any]) -> StoredMessage:
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        message_id = self.cm.add_message("system", [TextBlock(text)], MessageMeta(kind=kind))
        return self.cm.get_message(message_id)

    def newest(self, kind: str, limit: int | None = None) -> list[StoredMessage]:
        """The newest ``limit`` records of ``kind`` (all when ``None``), newest first.
        Cost: O(log n + returned)."""
        follow_current(self.cm)
        return self.store.read(
            self.namespace, self.cm.lineage(), kind=kind, limit=limit, newest_first=True
        )

    def newest_first(self, kind: str, page: int = 16) -> Iterator[StoredMessage]:
        """Every record of ``kind``, newest first, read a page at a time (pages double): a reader
        that stops at the first it wants reads O(log n + what it passed)."""
        follow_current(self.cm)
        upto: int | None = None
        while True:
            found = self.store.read(
                self.namespace,
                self.cm.lineage(),
                upto=upto,
                kind=kind,
                limit=page,
                newest_first=True,
            )
            yield from found
            if len(found) < page:
                return
            upto, page = found[-1].sequence - 1, page * 2

    def oldest_first(self, kind: str | None = None) -> Iterator[StoredMessage]:
        """Every record of ``kind`` (of every kind when ``None``), oldest first."""
        follow_current(self.cm)
        yield from self.cm.messages(kind=kind)

    def keep_only(self, kept: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Start over on a branch holding only ``kept`` (``(kind, record)`` pairs, appended
        again in their order); the old branch is hidden, its records stay stored. Cost:
        O(kept)."""
        self.reset()  # follows the store's current branch, then starts a new one
        for kind, record in kept:
            self._append(kind, record)

    def reset(self) -> None:
        """Start over on an empty branch; the old one is hidden (its records stay stored)."""
        follow_current(self.cm)
        old = self.cm.current_branch().name
        names = {ref.name for ref in self.cm.list_branches()}
        record = numbered_branch(
            lambda name: self.store.create_branch(self.namespace, name),
            lambda n: f"cleared-{n}",
            names,
        )
        self.cm.switch_branch(record.ref.name)
        self.cm.delete_branch(old)

    def rewind_before(self, message: StoredMessage) -> None:
        """Go on without ``message`` and what follows it: a branch that ends just before it (an
        empty one when it is the first). The old branch keeps everything."""
        follow_current(self.cm)
        earlier = self.store.read(
            self.namespace, self.cm.lineage(), upto=message.sequence - 1, newest_first=True, limit=1
        )
        if not earlier:
            self.reset()
            return
        base = self.cm.current_branch().name.split("~")[0]
        names = {ref.name for ref in self.cm.list_branches()}
        made = numbered_branch(
            lambda name: self.cm.branch_at(earlier[0].id, name), lambda n: f"{base}~{n}", names
        )
        self.cm.switch_branch(made.name)
