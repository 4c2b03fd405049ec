"""LangGraph: a checkpointer whose threads keep their messages in this library's transcript.

``TranscriptCheckpointer`` is a ``BaseCheckpointSaver`` (the ``langgraph`` extra; this module
imports ``langgraph`` and ``langchain_core``). Each thread's checkpoints and pending writes are
records in the store (``Records``, namespace ``THREAD#langgraph``); the graph's ``messages``
channel is not copied into them: every reply the transcript holds (recorded by the managed client
or the gateway the graph's ``ChatAnthropic`` calls through) is kept as a reference to the
recorded reply, and loaded back with its recorded content, signed thinking included, whatever
the graph's own copy had kept of it. Other messages (the user's words, tool results, replies the
transcript does not hold) are kept as the graph wrote them.

Invariants: the checkpointer only reads the agent's transcript, never writes it (the model
calls are its one writer); a reply is referenced only when its words and tool calls are the
graph's copy's (an edited reply is kept as the graph wrote it); records are appended, never
rewritten; ``delete_thread``, ``prune`` and ``delete_for_runs`` hide records (on a branch of the
thread's records the reads no longer see: they stay stored) and leave the agents' transcripts as
they are; ``copy_thread`` appends the source's records to the target, its replies still
references into the source agent's transcript. Cost: a checkpoint is found from the newest
record back (read a page at a time: the newest is O(log n)), and its pending writes are read
from the thread's write records (O(records of the thread)); ``list`` reads the write records
once per thread.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from context_manager._manager import ContextManager
from context_manager._model._canonical import signature_digest
from context_manager._model._content import block_to_wire
from context_manager._model._errors import InvalidValue, MessageNotFound
from context_manager._model._log import library_logger
from context_manager._model._messages import StoredMessage
from context_manager._reconcile._apply import library_owned
from context_manager._reconcile._normal import reply_key, stored_key, wire_content
from context_manager._store._protocol import Store

from ._agents import ManagedAgents
from ._records import Records, decoded, encoded, record_of
from ._upkeep import (
    CHECKPOINT_KIND,
    PRUNE_STRATEGIES,
    WRITES_KIND,
    Entry,
    latest_per_namespace,
    pointing_into,
    without_checkpoints,
)

__all__ = [
    "CHECKPOINT_KIND",
    "PRUNE_STRATEGIES",
    "RECORDS_SUFFIX",
    "WRITES_KIND",
    "TranscriptCheckpointer",
]

log = library_logger("context_manager.adapters.langgraph")

RECORDS_SUFFIX = "#langgraph"
"""A thread's records live in namespace ``thread_id + RECORDS_SUFFIX``."""


def _signatures(content: object) -> list[str]:
    """The thinking signatures a framework's reply copy carries."""
    if not isinstance(content, list):
        return []
    return [
        str(block.get("signature") or block.get("data"))
        for block in content
        if isinstance(block, dict)
        and block.get("type") in ("thinking", "redacted_thinking")
        and (block.get("signature") or block.get("data"))
    ]


def _copy_key(message: AIMessage) -> str | None:
    """The reply key of the graph's copy of a reply (``None``: content reconcile cannot read)."""
    content = message.content
    if isinstance(content, list):
        content = [
            {"type": "text", "text": b} if isinstance(b, str) else b
            for b in content
            if isinstance(b, str | dict)
        ]
    try:
        return reply_key(wire_content(content))
    except Exception:  # a block of a shape only the graph knows: kept as the graph wrote it
        return None


class _Replies:
    """Finds the recorded reply behind each of the graph's reply copies, oldest first."""

    def __init__(self, cm: ContextManager) -> None:
        self.cm = cm
        self._branch: list[StoredMessage] | None = None
        self._after = -1

    def _on_branch(self) -> list[StoredMessage]:
        if self._branch is None:
            self._branch = [
                m for m in self.cm.messages() if m.role == "assistant" and not library_owned(m)
            ]
        return self._branch

    def _signed(self, message: AIMessage, key: str) -> StoredMessage | None:
        for signature in _signatures(message.content):
            found = self.cm.store.find_signature(self.cm.namespace, signature_digest(signature))
            for message_id in found:
                stored = self.cm.get_message(message_id)
                if stored.role == "assistant" and stored_key("assistant", stored.content) == key:
                    return stored
        return None

    def find(self, message: AIMessage) -> StoredMessage | None:
        key = _copy_key(message)
        if key is None:
            return None
        found = self._signed(message, key) or next(
            (
                m
                for m in self._on_branch()
                if m.sequence > self._after and stored_key("assistant", m.content) == key
            ),
            None,
        )
        if found is not None:
            self._after = max(self._after, found.sequence)
        return found


def _next_version(current: str | int | None) -> str:
    """LangGraph's string channel versions: a counter, then a random tie-breaker."""
    if current is None:
        number = 0
    elif isinstance(current, int):
        number = current
    else:
        number = int(str(current).split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


class TranscriptCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer backed by this library's store (see the module docstring).

    Args:
        store: where the threads' records and the agents' transcripts live.
        agent: ``agent(thread_id)``: the namespace of the agent whose transcript holds the
            thread's replies (default: the thread id itself).
        agents: the ``ManagedAgents`` of the managed client or in-process gateway the graph's
            model calls go through (``client.agents``, ``app.state.gateway.agents``): the
            transcript is then read through the same contexts. Without it the checkpointer
            opens its own, reading the agent's current branch.
        messages_key: the graph's messages channel (``"messages"`` for ``MessagesState`` and
            ``create_react_agent``).
        serde: LangGraph's serializer for everything else (default: its ``JsonPlusSerializer``).
    """

    def __init__(
        self,
        store: Store,
        *,
        agent: Callable[[str], str] | None = None,
        agents: ManagedAgents | None = None,
        messages_key: str = "messages",
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.agent = agent or (lambda thread_id: thread_id)
        self.agents = agents
        self.messages_key = messages_key
        self._records: dict[str, Records] = {}
        self._contexts: dict[str, ContextManager] = {}
        self._lock = threading.RLock()

    # where things are
    def records(self, thread_id: str) -> Records:
        """The records of ``thread_id``."""
        with self._lock:
            found = self._records.get(thread_id)
            if found is None:
                found = Records(self.store, f"{thread_id}{RECORDS_SUFFIX}")
                self._records[thread_id] = found
            return found

    def transcript(self, thread_id: str) -> ContextManager:
        """The context of the agent whose transcript holds ``thread_id``'s replies."""
        return self._context(self.agent(thread_id))

    def _context(self, namespace: str) -> ContextManager:
        if self.agents is not None:
            return self.agents.context(namespace)
        with self._lock:
            cm = self._contexts.get(namespace)
            if cm is None:
                cm = self._contexts[namespace] = ContextManager.open(
                    self.store, namespace=namespace
                )
            current = self.store.current_branch_name(namespace)
            if current and current != cm.current_branch().name:
                cm.switch_branch(current)  # the writer went on elsewhere (a rewind)
            return cm

    # the messages channel
    def _encode(self, thread_id: str, messages: Sequence[Any]) -> list[dict[str, Any]]:
        replies = _Replies(self.transcript(thread_id))
        items: list[dict[str, Any]] = []
        for message in messages:
            reply = replies.find(message) if isinstance(message, AIMessage) else None
            if reply is None:
                items.append({"lc": encoded(self.serde.dumps_typed(message))})
            else:
                shell = message.model_copy(update={"content": []})
                items.append({"lc": encoded(self.serde.dumps_typed(shell)), "reply": reply.id})
        return items

    def _decode(self, thread_id: str, items: Sequence[dict[str, Any]]) -> list[BaseMessage]:
        """The messages channel back: each reference loaded from the transcript it points into
        (the thread's agent's, or the one a copied thread's item names)."""
        contexts: dict[str, ContextManager] = {}
        out: list[BaseMessage] = []
        for item in items:
            message = self.serde.loads_typed(decoded(item["lc"]))
            reply_id = item.get("reply")
            if reply_id is not None:
                namespace = str(item.get("agent") or self.agent(thread_id))
                cm = contexts.get(namespace)
                if cm is None:
                    cm = contexts[namespace] = self._context(namespace)
                try:
                    recorded = cm.get_message(str(reply_id))
                except MessageNotFound:
                    log.error("langgraph_reply_missing", thread=thread_id, reply=reply_id)
                else:
                    content = [block_to_wire(block) for block in recorded.content]
                    message = message.model_copy(update={"content": content})
            out.append(message)
        return out

    # reading
    def _find(self, config: RunnableConfig) -> tuple[str, dict[str, Any]] | None:
        configurable = config.get("configurable") or {}
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        wanted = get_checkpoint_id(config)
        for message in self.records(thread_id).newest_first(CHECKPOINT_KIND):
            record = record_of(message)
            if record["ns"] == ns and (wanted is None or record["id"] == wanted):
                return thread_id, record
        return None

    def _write_records(self, thread_id: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The thread's write records by ``(checkpoint_ns, checkpoint_id)``, oldest first."""
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for message in self.records(thread_id).oldest_first(WRITES_KIND):
            record = record_of(message)
            found.setdefault((record["ns"], record["checkpoint"]), []).append(record)
        return found

    def _writes(self, records: Sequence[dict[str, Any]]) -> list[PendingWrite]:
        """One checkpoint's pending writes from its write records, in ``writes_sort_key`` order."""
        kept: dict[tuple[str, int], tuple[str, str, list[str], str]] = {}
        for record in records:
            for idx, channel, value in record["writes"]:
                spot = (str(record["task"]), int(idx))
                if spot[1] >= 0 and spot in kept:
                    continue  # a write is kept once; special writes (errors, ...) the newest
                kept[spot] = (spot[0], str(channel), value, str(record["path"]))
        order = sorted(kept, key=lambda spot: writes_sort_key(kept[spot][3], *spot))
        return [
            (kept[s][0], kept[s][1], self.serde.loads_typed(decoded(kept[s][2]))) for s in order
        ]

    def _tuple(
        self,
        thread_id: str,
        record: dict[str, Any],
        writes: dict[tuple[str, str], list[dict[str, Any]]] | None = None,
    ) -> CheckpointTuple:
        ns, checkpoint_id, parent = record["ns"], record["id"], record["parent"]
        checkpoint: Checkpoint = self.serde.loads_typed(decoded(record["checkpoint"]))
        if record.get("messages") is not None:
            values = dict(checkpoint["channel_values"])
            values[self.messages_key] = self._decode(thread_id, record["messages"])
            checkpoint = {**checkpoint, "channel_values": values}

        def config_of(cid: str) -> RunnableConfig:
            return {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            }

        return CheckpointTuple(
            config=config_of(checkpoint_id),
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(decoded(record["metadata"])),
            parent_config=config_of(parent) if parent else None,
            pending_writes=self._writes(
                (writes if writes is not None else self._write_records(thread_id)).get(
                    (ns, checkpoint_id), []
                )
            ),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the thread's newest)."""
        found = self._find(config)
        return None if found is None else self._tuple(*found)

    def _threads(self, config: RunnableConfig | None) -> list[str]:
        if config is not None:
            return [str(config["configurable"]["thread_id"])]
        return [
            ns[: -len(RECORDS_SUFFIX)]
            for ns in self.store.namespaces()
            if ns.endswith(RECORDS_SUFFIX)
        ]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The checkpoints that match, newest first (``config`` narrows to a thread, its
        ``checkpoint_ns`` and ``checkpoint_id``; ``filter`` to metadata values)."""
        configurable = (config or {}).get("configurable") or {}
        ns = configurable.get("checkpoint_ns")
        wanted = get_checkpoint_id(config) if config else None
        ceiling = get_checkpoint_id(before) if before else None
        left = limit
        for thread_id in self._threads(config):
            writes = self._write_records(thread_id)  # read once for the thread's checkpoints
            for message in self.records(thread_id).newest_first(CHECKPOINT_KIND):
                record = record_of(message)
                if (ns is not None and record["ns"] != ns) or (wanted and record["id"] != wanted):
                    continue
                if ceiling and record["id"] >= ceiling:
                    continue
                found = self._tuple(thread_id, record, writes)
                if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield found

    # writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; the messages channel (at the graph's root) by reference."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = str(configurable.get("checkpoint_ns", ""))
        values = dict(checkpoint["channel_values"])
        messages = values.get(self.messages_key)
        items = None
        if ns == "" and isinstance(messages, list):
            items = self._encode(thread_id, messages)
            del values[self.messages_key]
        rest = {**checkpoint, "channel_values": values}
        record = {
            "ns": ns,
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "checkpoint": encoded(self.serde.dumps_typed(rest)),
            "metadata": encoded(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "messages": items,
        }
        with self._lock:
            self.records(thread_id).add(CHECKPOINT_KIND, record)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint ``config`` names."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        record = {
            "ns": str(configurable.get("checkpoint_ns", "")),
            "checkpoint": configurable["checkpoint_id"],
            "task": task_id,
            "path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, idx), channel, encoded(self.serde.dumps_typed(value))]
                for idx, (channel, value) in enumerate(writes)
            ],
        }
        with self._lock:
            self.records(thread_id).add(WRITES_KIND, record)

    def delete_thread(self, thread_id: str) -> None:
        """Hide the thread's checkpoints and writes (they stay stored); the agent's transcript
        is left as it is."""
        with self._lock:
            self.records(str(thread_id)).reset()

    # upkeep: LangGraph's copy, prune and delete-for-runs; what they remove is hidden, on a
    # branch of the thread's records the reads no longer see, and stays stored
    def _known(self, thread_id: str) -> bool:
        return f"{thread_id}{RECORDS_SUFFIX}" in self.store.namespaces()

    def _entries(self, thread_id: str) -> Sequence[Entry]:
        return [
            (str(m.metadata.kind), record_of(m)) for m in self.records(thread_id).oldest_first()
        ]

    @contextlib.contextmanager
    def _all_or_nothing(self, thread_id: str) -> Iterator[Records]:
        """The thread's records, written in one batch: a failure leaves the thread as it was."""
        try:
            with self.store.batch():
                yield self.records(thread_id)
        except BaseException:
            self._records.pop(thread_id, None)  # read again from the store, as it is
            raise

    def _keep(self, thread_id: str, select: Callable[[Sequence[Entry]], Sequence[Entry]]) -> None:
        with self._lock:
            entries = self._entries(thread_id)
            kept = select(entries)
            if len(kept) == len(entries):
                return  # nothing to hide: the thread is left as it is
            with self._all_or_nothing(thread_id) as records:
                records.keep_only(kept)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append every checkpoint and pending write of the source thread to the target, in
        order, with their ids and metadata. The copy's replies stay references into the source
        agent's transcript (loaded back with their recorded thinking); the source is left as
        it is, and a source with no records copies nothing. Cost: O(records of the source)."""
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target or not self._known(source):
            return
        with self._lock:
            namespace = self.agent(source)
            copied = [pointing_into(e, namespace) for e in self._entries(source)]
            with self._all_or_nothing(target) as records:
                for kind, record in copied:
                    records.add(kind, record)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: only the newest checkpoint of each ``checkpoint_ns`` and its
        pending writes are left; ``"delete"``: none (``delete_thread``). What goes is hidden
        and stays stored; the agents' transcripts are left as they are. As LangGraph warns, a
        graph with a ``DeltaChannel`` needs the checkpoints a kept one's deltas go back to:
        do not prune it. Cost: O(records of each thread).

        Raises:
            InvalidValue: ``strategy`` is not one of ``PRUNE_STRATEGIES``.
        """
        if strategy not in PRUNE_STRATEGIES:
            raise InvalidValue(f"strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}")
        for thread_id in map(str, thread_ids):
            if not self._known(thread_id):
                continue
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._keep(thread_id, latest_per_namespace)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Hide, in every thread, the checkpoints whose metadata names one of ``run_ids``
        (``run_id``) and their pending writes; they stay stored. Cost: O(records of every
        thread)."""
        runs = {str(run) for run in run_ids}
        if not runs:
            return

        def in_runs(entry: Entry) -> bool:
            metadata = self.serde.loads_typed(decoded(entry[1]["metadata"]))
            return str(metadata.get("run_id")) in runs

        for thread_id in self._threads(None):
            self._keep(thread_id, lambda entries: without_checkpoints(entries, in_runs))

    def get_next_version(self, current: str | None, channel: None) -> str:
        return _next_version(current)

    # async: the store's calls are short; they run in the caller's task, as LangGraph's own
    # in-memory saver does
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)
