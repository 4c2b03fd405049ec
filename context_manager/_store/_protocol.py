"""The storage contract shared by ``MemoryStore``, ``SQLiteStore`` and ``PostgresStore``.

``Store`` is composed by concern: ``MessageStore`` and ``BindingStore`` are required; the
optional parts (``BindingSerials``, ``ReadsTogether``, ``SnapshotStore``, ``HoldStore``) are
runtime-checkable protocols the library tests with ``supports`` (``isinstance``), never
``getattr``.

Every method is scoped by ``namespace`` (one agent each); nothing crosses namespaces. A store
never loses what it stored: deleting a branch hides it, editing keeps the earlier revision.
``append`` writes a message with its stamp and signature index in one transaction; binding-record
writes (``commit_binding``) are one transaction too. Reads are served from indexes by branch and
sequence, never by scanning a whole history.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

import attrs

from context_manager._model._content import Block
from context_manager._model._messages import MessageId, MessageMeta, Role, StoredMessage
from context_manager._model._stamps import AnyStamp

from ._hold import Hold


@attrs.frozen
class BranchRef:
    """A branch: ``id`` is unique in the store, ``created`` orders creations."""

    id: str
    name: str
    created: int


def branch_key(ref: BranchRef) -> str:
    """The key that tells branches apart, even one deleted and re-created under the same name."""
    return f"{ref.id}@{ref.created}"


@attrs.frozen
class BranchRecord:
    """A branch with its lineage: it sees ``parent`` up to ``fork_sequence`` (inclusive)."""

    ref: BranchRef
    parent: str | None
    fork_sequence: int | None
    deleted: bool = False

    @property
    def key(self) -> str:
        return branch_key(self.ref)


Lineage: TypeAlias = tuple[tuple[str, int | None], ...]
"""``(branch key, highest visible sequence or None for all)``, the branch itself first."""


@attrs.frozen
class Release:
    """A reply's thinking released on a branch from ``from_block`` on; ``reported`` once told.

    ``reported_from``: while a lower release is pending, the blocks from here on were already
    reported by an earlier one (so a strip never counts them twice).
    """

    message_id: MessageId
    from_block: int
    reported: bool
    reported_from: int | None = None
    at_sequence: int | None = None
    """The branch's newest sequence when the release was recorded (``None``: unknown, from an
    older store). A branch made at an earlier point does not inherit it (SPEC 5)."""

    def reported_at(self, index: int) -> bool:
        """Whether block ``index`` is released and was already reported on this branch."""
        if index < self.from_block:
            return False
        return self.reported or (self.reported_from is not None and index >= self.reported_from)


@attrs.frozen
class AnchoredHead:
    """The ``system`` and ``tools`` a branch sends while changes are appended (SPEC 7b).

    ``at_sequence``: the branch's newest sequence when it was anchored; ``head-change``
    messages at or before it are already part of it (not rendered). ``head`` is
    ``{"system": ..., "tools": [...]}`` as JSON.
    """

    at_sequence: int
    head: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(self.head, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, at_sequence: int, text: str) -> AnchoredHead:
        return cls(int(at_sequence), dict(json.loads(text)))


@attrs.frozen
class BindingRecordData:
    """A branch's binding record as stored."""

    first_compiled: bool
    releases: dict[MessageId, Release]
    anchor: int | None = None
    """The sequence a windowed render starts at, kept so the prefix stays stable on reopen."""
    left_out: frozenset[tuple[MessageId, int]] = frozenset()
    """``(reply id, block)`` the last committing compile left out without releasing (a head
    change, an unreadable model, a gap, a changed earlier message): a strip reports only what is
    newly left out, and a block sent again from here is ``restored`` (SPEC 7)."""
    anchored_head: AnchoredHead | None = None
    """The newest anchored head (SPEC 7b); a fork inherits the parent's as of the fork point."""


def left_out_since(
    since: dict[tuple[MessageId, int], Any], message_id: MessageId, block: int, now: int | None
) -> int | None:
    """The sequence a left-out block is recorded at: when it was first left out (kept from
    ``since``, the branch's rows before this commit, ``None`` there for rows older than the
    column), else ``now``.

    >>> left_out_since({("m", 0): 4}, "m", 0, 9), left_out_since({}, "m", 0, 9)
    (4, 9)
    """
    spot = (message_id, int(block))
    if spot in since:
        return None if since[spot] is None else int(since[spot])
    return now


class MessageStore(Protocol):
    """Messages, branches and the agents (namespaces) that own them."""

    def namespaces(self) -> list[str]:
        """Every agent with anything stored, sorted."""
        ...

    def drop_namespace(self, namespace: str) -> None:
        """Forget the agent ``namespace`` and everything stored for it (the one deletion)."""
        ...

    def create_branch(
        self,
        namespace: str,
        name: str,
        *,
        parent: str | None = None,
        fork_sequence: int | None = None,
    ) -> BranchRecord:
        """A new branch ``name``, forked from branch key ``parent`` at ``fork_sequence``
        (``None``: its end); it inherits the parent's binding record as of that point (SPEC 5,
        ``_semantics.inherited_release``). Raises ``BranchExists`` for a live name."""
        ...

    def delete_branch(self, namespace: str, name: str) -> BranchRecord:
        """Hide branch ``name`` (its messages stay, read through its children). Raises
        ``BranchNotFound``."""
        ...

    def branches(self, namespace: str) -> list[BranchRecord]:
        """The agent's live branches, oldest first."""
        ...

    def branch_by_key(self, namespace: str, key: str) -> BranchRecord:
        """The branch (deleted ones too) with ``key``. Raises ``BranchNotFound``."""
        ...

    def current_branch_name(self, namespace: str) -> str | None:
        """The agent's current branch, or ``None`` before one is set."""
        ...

    def set_current_branch(self, namespace: str, name: str) -> None:
        """Make ``name`` the agent's current branch."""
        ...

    def append(
        self,
        namespace: str,
        branch: str,
        role: Role,
        content: Sequence[Block],
        metadata: MessageMeta,
        *,
        stamp: AnyStamp | None = None,
        signatures: Sequence[str] = (),
    ) -> StoredMessage:
        """Store a message at the end of ``branch`` with its stamp and the signature digests
        of its thinking blocks, in one transaction; returns it with its id and sequence. A
        store keeps the stamp in any form it can read back equal (the SQL stores keep
        ``stamp_to_json``)."""
        ...

    def get(self, namespace: str, message_id: MessageId) -> StoredMessage:
        """The message ``message_id`` (its latest revision). Raises ``MessageNotFound``."""
        ...

    def read(
        self,
        namespace: str,
        lineage: Lineage,
        *,
        after: int | None = None,
        upto: int | None = None,
        kind: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[StoredMessage]:
        """The messages of ``lineage`` (each branch key up to its fork point) with a sequence
        in ``(after, upto]``, of ``kind`` when given, oldest first unless ``newest_first``, at
        most ``limit``. O(log n + k) from the sequence index."""
        ...

    def last_sequence(self, namespace: str, lineage: Lineage) -> int:
        """The newest sequence ``lineage`` holds (0: none)."""
        ...

    def edit(
        self, namespace: str, message_id: MessageId, content: Sequence[Block]
    ) -> StoredMessage:
        """Replace a message's content, keeping the earlier revision; returns the new one."""
        ...

    def change_serial(self, namespace: str) -> int:
        """A counter that moves with every write to the agent's messages (a cached render
        compares it to see edits and other writers)."""
        ...

    def changed_since(self, namespace: str, serial: int) -> int | None:
        """The lowest sequence edited since ``change_serial`` was ``serial`` (``None``: no
        edit)."""
        ...

    def stamps(
        self, namespace: str, message_ids: Sequence[MessageId]
    ) -> Mapping[MessageId, AnyStamp | None]:
        """The stamps of ``message_ids``, parsed once here, at the store boundary
        (``_model._stamps.parse_stamp``): a reply with none is absent, one whose stored stamp
        cannot be read maps to ``None`` (its thinking is never sent; logged once per row, not
        at every read). O(len(message_ids))."""
        ...

    def find_signature(self, namespace: str, signature_digest: str) -> list[MessageId]:
        """The replies holding a thinking block with this signature digest."""
        ...

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """Group writes: every write inside commits together or, when the block raises, none
        does. A nested batch is part of the outer one."""
        ...

    def close(self) -> None:
        """Release connections and files; the store is not used afterwards."""
        ...


class BindingStore(Protocol):
    """Each branch's binding record: releases, reports, the anchor and the left-out set."""

    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        """The branch's binding record; ``releases=False`` leaves ``releases`` empty (read them
        for the messages at hand with ``releases``: one per reply that ever left the window
        otherwise)."""
        ...

    def releases(
        self, namespace: str, branch: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, Release]:
        """The branch's releases of ``message_ids`` (those with none are absent).
        O(len(message_ids))."""
        ...

    def commit_binding(
        self,
        namespace: str,
        branch: str,
        *,
        first_compiled: bool,
        releases: Sequence[tuple[MessageId, int]],
        reported: Sequence[MessageId],
        anchor: int | None = None,
        left_out: Sequence[tuple[MessageId, int]] | None = None,
        at_sequence: int | None = None,
        anchored_head: AnchoredHead | None = None,
    ) -> None:
        """A compile's binding write, in one transaction: ``releases`` recorded as reported
        (the lower ``from_block`` wins, ``_semantics.committed_release``), ``reported`` marked
        told, and the anchor, the left-out set and the anchored head replaced when given."""
        ...

    def add_release(
        self,
        namespace: str,
        branch: str,
        message_id: MessageId,
        from_block: int,
        *,
        at_sequence: int | None = None,
    ) -> None:
        """Release a reply's thinking from ``from_block`` on, pending until a compile reports
        it (``_semantics.added_release``: a release already as low changes nothing)."""
        ...


@runtime_checkable
class BindingSerials(Protocol):
    """Optional: counts of the agent's writes, read in one round trip at every compile. A
    store without them is read with ``change_serial`` alone, as never written elsewhere."""

    def serials(self, namespace: str) -> tuple[int, int]:
        """``(change serial, binding serial)`` of the agent ``namespace``, read together (one
        round trip, at every compile). The binding serial counts the agent's binding-record
        writes (``commit_binding``, ``add_release``) from any process or host: each adds exactly
        one, in its own transaction. A compiler keeping a render compares it to see another
        writer's releases, reports and anchors."""
        ...


@runtime_checkable
class ReadsTogether(Protocol):
    """Optional: the serials and the new messages in one call (a store with round trips makes
    them one). A store without it is read with the two calls."""

    def serials_and_read(
        self, namespace: str, lineage: Lineage, after: int
    ) -> tuple[int, int, list[StoredMessage]]:
        """``serials(namespace)`` and ``read(namespace, lineage, after=after)`` together."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """Optional: render snapshots, derived data that saves a re-render. A store without them
    keeps none."""

    def save_render(self, namespace: str, branch: str, header: str, blob: bytes) -> None:
        """Keep the branch's render snapshot (one per branch: it replaces the last). Derived
        data, never the transcript: losing it costs one render."""
        ...

    def load_render(self, namespace: str, branch: str) -> tuple[str, bytes] | None:
        """The branch's render snapshot, ``(header, bytes)``, or ``None``."""
        ...


@runtime_checkable
class HoldStore(Protocol):
    """Optional: holds across processes and hosts. A store without them is held in its
    process only (``ContextManager.hold``)."""

    def hold(
        self, namespace: str, *, timeout: float | None = None, holder: str | None = None
    ) -> Hold:
        """A lease on the agent ``namespace`` for a whole turn, across processes and hosts.

        ``with store.hold("ada"):`` or ``async with``. Entering waits up to ``timeout``
        seconds for another holder, then raises ``AgentBusy`` naming it; ``holder`` labels this
        one (reported as ``LABEL@HOST:PID``). Not a transaction: writes inside commit one by
        one, and nothing is held open in the database across a model call. A hold dies with
        its process. Re-entering it in the same task on the same store does not wait.
        """
        ...


@runtime_checkable
class Store(
    MessageStore,
    BindingStore,
    BindingSerials,
    ReadsTogether,
    SnapshotStore,
    HoldStore,
    Protocol,
):
    """What the context manager needs from storage, by concern: messages and branches
    (``MessageStore``), binding records (``BindingStore``), and the optional parts a store may
    leave out (``BindingSerials``, ``ReadsTogether``, ``SnapshotStore``, ``HoldStore``:
    detected with ``supports``). See the module docstring for invariants."""


def supports(store: object, part: type[Any]) -> bool:
    """Whether ``store`` has the optional ``part`` (one of the runtime-checkable protocols
    above): ``isinstance``, which finds a part a proxy store forwards too. A store class that
    has the part's methods itself is answered from a cache (a protocol's ``isinstance`` walks
    its methods each time on Python 3.11, and a compile asks at every call).

    >>> from context_manager._store._memory import MemoryStore
    >>> supports(MemoryStore(), SnapshotStore), supports(object(), HoldStore)
    (True, False)
    """
    return _class_has((type(store), part)) or isinstance(store, part)


@functools.cache
def _class_has(classes: tuple[type[Any], type[Any]]) -> bool:
    """``issubclass(store class, part)``, once per pair."""
    return issubclass(*classes)
