"""LangGraph threads' upkeep, as pure functions over a thread's records (kind, JSON object).

Which records ``TranscriptCheckpointer.prune`` and ``delete_for_runs`` keep, and what a copied
checkpoint record becomes (``copy_thread``). A record list is oldest first; every selection keeps
that order and keeps a checkpoint together with its pending writes. Imports no framework.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

CHECKPOINT_KIND = "langgraph-checkpoint"
"""``metadata.kind`` of a stored checkpoint record."""
WRITES_KIND = "langgraph-writes"
"""``metadata.kind`` of a stored record of pending writes."""
PRUNE_STRATEGIES = ("keep_latest", "delete")
"""``prune``'s strategies, LangGraph's names."""

Entry: TypeAlias = tuple[str, dict[str, Any]]
"""One record of a thread: its kind and its JSON object."""


def _checkpoint_of(entry: Entry) -> tuple[str, str]:
    """``(checkpoint_ns, checkpoint_id)`` a checkpoint record is, or a write record is for."""
    kind, record = entry
    return str(record["ns"]), str(record["id"] if kind == CHECKPOINT_KIND else record["checkpoint"])


def latest_per_namespace(entries: Sequence[Entry]) -> list[Entry]:
    """The newest checkpoint of each ``checkpoint_ns`` (the last stored) and its writes.

    >>> cp = lambda i: (CHECKPOINT_KIND, {"ns": "", "id": i})
    >>> latest_per_namespace([cp("1"), (WRITES_KIND, {"ns": "", "checkpoint": "1"}), cp("2")])
    [('langgraph-checkpoint', {'ns': '', 'id': '2'})]
    """
    newest = {_checkpoint_of(e)[0]: e for e in entries if e[0] == CHECKPOINT_KIND}
    kept = {_checkpoint_of(e) for e in newest.values()}
    return [e for e in entries if _checkpoint_of(e) in kept]


def without_checkpoints(entries: Sequence[Entry], dropped: Callable[[Entry], bool]) -> list[Entry]:
    """``entries`` without the checkpoints ``dropped`` names and their writes."""
    gone = {_checkpoint_of(e) for e in entries if e[0] == CHECKPOINT_KIND and dropped(e)}
    return [e for e in entries if _checkpoint_of(e) not in gone]


def pointing_into(entry: Entry, namespace: str) -> Entry:
    """A checkpoint record whose reply references name the transcript they point into."""
    kind, record = entry
    if kind != CHECKPOINT_KIND or not record.get("messages"):
        return entry
    items = [
        {"agent": namespace, **item} if item.get("reply") is not None else item
        for item in record["messages"]
    ]
    return kind, {**record, "messages": items}
