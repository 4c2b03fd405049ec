"""``MemoryStore``: the in-process store for tests and ephemeral runs.

Same contract as ``SQLiteStore`` (see ``_store``), held in ``sortedcontainers`` indexes keyed by
sequence so range reads cost O(log n + k). Not shared across processes; gone when dropped.
A lock serialises writers so many agents on one event loop (or threads) can share one store.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
from sortedcontainers import SortedDict, SortedList

from context_manager._model._checks import check_branch_name
from context_manager._model._content import Block
from context_manager._model._errors import BranchExists, BranchNotFound, MessageNotFound
from context_manager._model._messages import (
    MessageId,
    MessageMeta,
    Role,
    StoredMessage,
    decode_message,
    encode_message,
)
from context_manager._model._stamps import AnyStamp, stamp_to_wire

from ._hold import HOLD_TIMEOUT_SECONDS, Hold, LocalHolds, holder_identity
from ._protocol import (
    AnchoredHead,
    BindingRecordData,
    BranchRecord,
    BranchRef,
    Lineage,
    Release,
    left_out_since,
)
from ._read import check_limit, select_window
from ._semantics import added_release, as_of, committed_release, inherited_release
from ._stamp_rows import StampRows


@attrs.define
class _Namespace:
    branches: dict[str, BranchRecord] = attrs.field(factory=dict)
    current: str | None = None
    by_branch: dict[str, SortedDict] = attrs.field(factory=dict)
    by_kind: dict[tuple[str, str], SortedDict] = attrs.field(factory=dict)  # (branch, kind)
    changes: SortedList = attrs.field(factory=SortedList)  # (serial, sequence)
    signatures: dict[str, list[MessageId]] = attrs.field(factory=dict)
    stamps: dict[MessageId, dict[str, Any]] = attrs.field(factory=dict)
    """Each stamped reply's stamp as stored (``stamp_to_wire``): read back by ``StampRows``."""
    first_compiled: set[str] = attrs.field(factory=set)
    anchors: dict[str, int] = attrs.field(factory=dict)
    heads: dict[str, list[AnchoredHead]] = attrs.field(factory=dict)  # by at_sequence
    releases: dict[str, dict[MessageId, Release]] = attrs.field(factory=dict)
    release_history: dict[str, dict[MessageId, dict[int, int | None]]] = attrs.field(factory=dict)
    """Per branch and reply, every block a release started at and the sequence it was first
    recorded at: a branch made earlier inherits the lowest one as of its fork point."""
    left_out: dict[str, dict[tuple[MessageId, int], int | None]] = attrs.field(factory=dict)
    """Per branch, each left-out block and the sequence it was first left out at."""
    revisions: list[tuple[MessageId, tuple[Block, ...]]] = attrs.field(factory=list)


def _note_history(
    space: _Namespace, branch: str, message_id: MessageId, block: int, at: int | None
) -> None:
    found = space.release_history.setdefault(branch, {}).setdefault(message_id, {})
    found.setdefault(int(block), at)


class MemoryStore:
    """An in-memory ``Store``. Cheap to create; everything goes with the object."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._holds = LocalHolds()
        self._spaces: dict[str, _Namespace] = {}
        self._messages: dict[MessageId, tuple[str, StoredMessage]] = {}
        self._sequence = 0
        self._serial = 0
        self._binding_serials: dict[str, int] = {}
        self._renders: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._stamp_rows = StampRows()
        self._undo: list[Callable[[], None]] | None = None
        """Inside a ``batch``: how to take back each write made in it (newest last)."""

    def _space(self, namespace: str) -> _Namespace:
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = _Namespace()
        return space

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence

    # namespaces
    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(name for name, space in self._spaces.items() if space.branches)

    def drop_namespace(self, namespace: str) -> None:
        with self._lock:
            self._spaces.pop(namespace, None)
            self._binding_serials.pop(namespace, None)
            for mid in [m for m, (ns, _) in self._messages.items() if ns == namespace]:
                del self._messages[mid]
            for at in [at for at in self._renders if at[0] == namespace]:
                del self._renders[at]

    # branches
    def create_branch(
        self,
        namespace: str,
        name: str,
        *,
        parent: str | None = None,
        fork_sequence: int | None = None,
    ) -> BranchRecord:
        check_branch_name(name)
        with self._lock:
            space = self._space(namespace)
            if any(b.ref.name == name for b in space.branches.values() if not b.deleted):
                raise BranchExists(name)
            created = self._next()
            ref = BranchRef(id=f"b{created}", name=name, created=created)
            record = BranchRecord(ref=ref, parent=parent, fork_sequence=fork_sequence)
            space.branches[record.key] = record
            space.by_branch[record.key] = SortedDict()
            if parent is not None:
                history = space.release_history.get(parent, {})
                space.release_history[record.key] = {
                    mid: {b: q for b, q in found.items() if as_of(q, fork_sequence)}
                    for mid, found in history.items()
                }
                inherited: dict[MessageId, Release] = {}
                for mid, release in space.releases.get(parent, {}).items():
                    kept = inherited_release(release, history.get(mid, {}), fork_sequence)
                    if kept is not None:
                        inherited[mid] = kept
                space.releases[record.key] = inherited
                space.left_out[record.key] = {
                    spot: since
                    for spot, since in space.left_out.get(parent, {}).items()
                    if as_of(since, fork_sequence)
                }
                space.heads[record.key] = [
                    h for h in space.heads.get(parent, []) if as_of(h.at_sequence, fork_sequence)
                ]
            self._on_undo(lambda: self._uncreate(space, record.key))
            return record

    @staticmethod
    def _uncreate(space: _Namespace, key: str) -> None:
        """A branch created in a batch that failed: gone, as if never made."""
        for part in (space.branches, space.by_branch, space.release_history, space.releases):
            part.pop(key, None)
        space.left_out.pop(key, None)
        space.heads.pop(key, None)

    def _on_undo(self, undo: Callable[[], None]) -> None:
        """Inside a batch, run ``undo`` if the batch fails (newest first)."""
        if self._undo is not None:
            self._undo.append(undo)

    def delete_branch(self, namespace: str, name: str) -> BranchRecord:
        with self._lock:
            space = self._space(namespace)
            for key, record in space.branches.items():
                if record.ref.name == name and not record.deleted:
                    gone = attrs.evolve(record, deleted=True)
                    space.branches[key] = gone
                    self._on_undo(functools.partial(space.branches.__setitem__, key, record))
                    self._renders.pop((namespace, key), None)  # derived: never rendered again
                    return gone
            raise BranchNotFound(name, [b.ref.name for b in self._live(space)])

    @staticmethod
    def _live(space: _Namespace) -> list[BranchRecord]:
        return [b for b in space.branches.values() if not b.deleted]

    def branches(self, namespace: str) -> list[BranchRecord]:
        with self._lock:
            return sorted(self._live(self._space(namespace)), key=lambda b: b.ref.created)

    def branch_by_key(self, namespace: str, key: str) -> BranchRecord:
        with self._lock:
            space = self._space(namespace)
            try:
                return space.branches[key]
            except KeyError:
                raise BranchNotFound(key, [b.ref.name for b in self._live(space)]) from None

    def current_branch_name(self, namespace: str) -> str | None:
        with self._lock:
            return self._space(namespace).current

    def set_current_branch(self, namespace: str, name: str) -> None:
        with self._lock:
            space = self._space(namespace)
            was, space.current = space.current, name
            self._on_undo(lambda: setattr(space, "current", was))

    # messages
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
        # Through JSON, as SQLite does: the same errors, and no aliasing of the caller's dicts.
        stored_content, stored_meta = decode_message(*encode_message(content, metadata))
        with self._lock:
            space = self._space(namespace)
            if branch not in space.by_branch:
                raise BranchNotFound(branch, [b.ref.name for b in self._live(space)])
            sequence = self._next()
            message = StoredMessage(
                id=f"msg_{sequence}",
                sequence=sequence,
                branch=branch,
                role=role,
                content=stored_content,
                metadata=stored_meta,
                created_at=dt.datetime.now(dt.UTC),
            )
            space.by_branch[branch][sequence] = message
            if stored_meta.kind is not None:
                kinds = space.by_kind.setdefault((branch, stored_meta.kind), SortedDict())
                kinds[sequence] = message
            self._messages[message.id] = (namespace, message)
            if stamp is not None:
                space.stamps[message.id] = stamp_to_wire(stamp)
            for sig in signatures:
                space.signatures.setdefault(sig, []).append(message.id)
            if self._undo is not None:
                self._undo.append(lambda: self._unappend(space, message, signatures))
            return message

    def _unappend(
        self, space: _Namespace, message: StoredMessage, signatures: Sequence[str]
    ) -> None:
        """Take back an ``append`` made in a batch that failed."""
        space.by_branch[message.branch].pop(message.sequence, None)
        if message.metadata.kind is not None:
            space.by_kind[(message.branch, message.metadata.kind)].pop(message.sequence, None)
        self._messages.pop(message.id, None)
        space.stamps.pop(message.id, None)
        for sig in signatures:
            found = space.signatures.get(sig, [])
            if message.id in found:
                found.remove(message.id)

    def _keep_binding(self, namespace: str, branch: str) -> None:
        """Inside a batch, remember branch ``branch``'s binding record as it is now, to put it
        back if the batch fails (a copy of that branch's part: O(its releases))."""
        if self._undo is None:
            return
        space = self._space(namespace)
        serial = self._binding_serials.get(namespace, 0)
        first = branch in space.first_compiled
        anchor = space.anchors.get(branch)
        heads = list(space.heads.get(branch, ()))
        releases = dict(space.releases.get(branch, {}))
        history = {m: dict(b) for m, b in space.release_history.get(branch, {}).items()}
        left_out = dict(space.left_out.get(branch, {}))

        def undo() -> None:
            self._binding_serials[namespace] = serial
            (space.first_compiled.add if first else space.first_compiled.discard)(branch)
            if anchor is None:
                space.anchors.pop(branch, None)
            else:
                space.anchors[branch] = anchor
            space.heads[branch] = heads
            space.releases[branch] = releases
            space.release_history[branch] = history
            space.left_out[branch] = left_out

        self._undo.append(undo)

    def get(self, namespace: str, message_id: MessageId) -> StoredMessage:
        with self._lock:
            found = self._messages.get(message_id)
            if found is None or found[0] != namespace:
                raise MessageNotFound(message_id, namespace)
            return found[1]

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
        check_limit(limit)
        with self._lock:
            space = self._space(namespace)
            segments = []
            for key, top in lineage:
                # A kind has its own index, so finding one (the latest summary) is O(found).
                index = space.by_branch.get(key) if kind is None else space.by_kind.get((key, kind))
                if index is None:
                    continue
                bounds = [x for x in (top, upto) if x is not None]
                keys = index.irange(
                    minimum=after,
                    maximum=min(bounds) if bounds else None,
                    inclusive=(False, True),
                    reverse=newest_first,
                )
                segments.append(map(index.__getitem__, keys))  # lazy: O(limit), not O(n)
            return select_window(segments, kind=kind, limit=limit, newest_first=newest_first)

    def last_sequence(self, namespace: str, lineage: Lineage) -> int:
        newest = self.read(namespace, lineage, limit=1, newest_first=True)
        return newest[0].sequence if newest else 0

    def edit(
        self, namespace: str, message_id: MessageId, content: Sequence[Block]
    ) -> StoredMessage:
        with self._lock:
            old = self.get(namespace, message_id)
            stored_content, _ = decode_message(*encode_message(content, old.metadata))
            space = self._space(namespace)
            new = attrs.evolve(old, content=stored_content)
            space.revisions.append((message_id, old.content))
            space.by_branch[old.branch][old.sequence] = new
            if new.metadata.kind is not None:
                space.by_kind[(old.branch, new.metadata.kind)][old.sequence] = new
            self._messages[message_id] = (namespace, new)
            self._serial += 1
            space.changes.add((self._serial, old.sequence))
            return new

    def change_serial(self, namespace: str) -> int:
        with self._lock:
            changes = self._space(namespace).changes
            return int(changes[-1][0]) if changes else 0

    def save_render(self, namespace: str, branch: str, header: str, blob: bytes) -> None:
        with self._lock:
            self._renders[(namespace, branch)] = (header, bytes(blob))

    def load_render(self, namespace: str, branch: str) -> tuple[str, bytes] | None:
        with self._lock:
            return self._renders.get((namespace, branch))

    def serials(self, namespace: str) -> tuple[int, int]:
        with self._lock:
            changes = self._space(namespace).changes
            edits = int(changes[-1][0]) if changes else 0
            return edits, self._binding_serials.get(namespace, 0)

    def serials_and_read(
        self, namespace: str, lineage: Lineage, after: int
    ) -> tuple[int, int, list[StoredMessage]]:
        with self._lock:
            changes, bindings = self.serials(namespace)
            return changes, bindings, self.read(namespace, lineage, after=after)

    def _bump_binding(self, namespace: str) -> None:
        self._binding_serials[namespace] = self._binding_serials.get(namespace, 0) + 1

    def changed_since(self, namespace: str, serial: int) -> int | None:
        with self._lock:
            changes = self._space(namespace).changes
            later = [seq for s, seq in changes.irange(minimum=(serial + 1, -1))]
            return min(later) if later else None

    def stamps(
        self, namespace: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, AnyStamp | None]:
        with self._lock:
            known = self._space(namespace).stamps
            rows = [(m, known[m]) for m in message_ids if m in known]
        return self._stamp_rows.read(namespace, rows)

    def find_signature(self, namespace: str, signature_digest: str) -> list[MessageId]:
        with self._lock:
            return list(self._space(namespace).signatures.get(signature_digest, ()))

    # binding record
    def binding_record(
        self, namespace: str, branch: str, *, releases: bool = True
    ) -> BindingRecordData:
        with self._lock:
            space = self._space(namespace)
            return BindingRecordData(
                first_compiled=branch in space.first_compiled,
                releases=dict(space.releases.get(branch, {})) if releases else {},
                anchor=space.anchors.get(branch),
                left_out=frozenset(space.left_out.get(branch, {})),
                anchored_head=space.heads[branch][-1] if space.heads.get(branch) else None,
            )

    def releases(
        self, namespace: str, branch: str, message_ids: Sequence[MessageId]
    ) -> dict[MessageId, Release]:
        with self._lock:
            table = self._space(namespace).releases.get(branch, {})
            return {mid: table[mid] for mid in message_ids if mid in table}

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
        with self._lock:
            self._keep_binding(namespace, branch)
            self._bump_binding(namespace)
            space = self._space(namespace)
            if anchored_head is not None:
                heads = space.heads.setdefault(branch, [])
                heads[:] = [h for h in heads if h.at_sequence != anchored_head.at_sequence]
                heads.append(anchored_head)
                heads.sort(key=lambda h: h.at_sequence)
            if left_out is not None:
                before = space.left_out.get(branch, {})
                space.left_out[branch] = {
                    (mid, int(b)): left_out_since(before, mid, b, at_sequence)
                    for mid, b in left_out
                }
            if first_compiled:
                space.first_compiled.add(branch)
            if anchor is not None:
                space.anchors[branch] = anchor
            table = space.releases.setdefault(branch, {})
            for mid, from_block in releases:
                _note_history(space, branch, mid, from_block, at_sequence)
                table[mid] = committed_release(table.get(mid), mid, from_block, at_sequence)
            for mid in reported:
                if mid in table:
                    table[mid] = attrs.evolve(table[mid], reported=True)

    def add_release(
        self,
        namespace: str,
        branch: str,
        message_id: MessageId,
        from_block: int,
        *,
        at_sequence: int | None = None,
    ) -> None:
        with self._lock:
            self._keep_binding(namespace, branch)
            self._bump_binding(namespace)
            _note_history(self._space(namespace), branch, message_id, from_block, at_sequence)
            table = self._space(namespace).releases.setdefault(branch, {})
            added = added_release(table.get(message_id), message_id, from_block, at_sequence)
            if added is not None:
                table[message_id] = added

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes: all of them or none. Holds the store's lock; when the block raises,
        every message appended and binding record written in it is taken back (as SQLite's
        and PostgreSQL's batches roll back). A nested batch is part of the outer one."""
        with self._lock:
            if self._undo is not None:
                yield
                return
            self._undo = []
            try:
                yield
            except BaseException:
                for undo in reversed(self._undo):
                    undo()
                raise
            finally:
                self._undo = None

    def hold(
        self, namespace: str, *, timeout: float | None = None, holder: str | None = None
    ) -> Hold:
        """Hold the agent for a whole turn (a per-agent lock in this process); see ``Store``."""
        wait = HOLD_TIMEOUT_SECONDS if timeout is None else timeout
        return self._holds.hold(self, namespace, wait, holder_identity(holder))

    def close(self) -> None:
        """Nothing to release; present for the ``Store`` contract."""
