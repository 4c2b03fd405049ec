"""Where the console reads from: agents, their transcripts, and (in-process) live reasoning.

Invariants: reading never writes (a transcript is read in chunks of ``READ_CHUNK`` messages, with
the branch's binding record and the releases of the replies read); an agent's context manager
is opened once and kept; live reasoning exists only for agents whose runtime runs in this
process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from context_manager._manager import ContextManager
from context_manager._model._content import RedactedThinkingBlock, ThinkingBlock
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._reasoning._live import LiveReasoning
from context_manager._reasoning._store import ReasoningStore
from context_manager._store._protocol import BranchRecord, Release, Store

from ._view import TranscriptView, build_view, dropped_spots, line_of

READ_CHUNK = 500
"""Messages read per step when a transcript page is built."""


class ConsoleSource(Protocol):
    """What a console shows: the agents, each one's context manager, and its live hub."""

    def agents(self) -> list[str]:
        """The agents there are (anyone's: the audience rule filters)."""
        ...

    def context(self, agent: str) -> ContextManager:
        """The agent's context manager (only asked for an agent ``agents()`` lists)."""
        ...

    def live(self, agent: str) -> LiveReasoning | None:
        """The agent's live reasoning, or ``None`` when its runtime is not in this process."""
        ...


class StoreSource:
    """A store's agents, read-only, with no live reasoning (``context-manager serve``).

    Args:
        store: the agents' store.
        sidecar: the reasoning sidecar captured text is read from, if any.
    """

    def __init__(self, store: Store, sidecar: ReasoningStore | None = None) -> None:
        self.store = store
        self.sidecar = sidecar
        self._contexts: dict[str, ContextManager] = {}

    def agents(self) -> list[str]:
        return sorted(self.store.namespaces())

    def context(self, agent: str) -> ContextManager:
        if agent not in self._contexts:
            reasoning = (
                ReasoningCapture(self.sidecar, capture=False) if self.sidecar is not None else None
            )
            self._contexts[agent] = ContextManager.open(
                self.store, namespace=agent, reasoning=reasoning
            )
        return self._contexts[agent]

    def live(self, agent: str) -> LiveReasoning | None:
        return None


class CallbackSource:
    """A source built from three callables (the runtime's console uses one)."""

    def __init__(
        self,
        agents: Callable[[], list[str]],
        context: Callable[[str], ContextManager],
        live: Callable[[str], LiveReasoning | None],
    ) -> None:
        self._agents, self._context, self._live = agents, context, live

    def agents(self) -> list[str]:
        return self._agents()

    def context(self, agent: str) -> ContextManager:
        return self._context(agent)

    def live(self, agent: str) -> LiveReasoning | None:
        return self._live(agent)


def pick_branch(cm: ContextManager, wanted: str | None) -> BranchRecord | None:
    """The branch to show: ``wanted``, else the agent's current one as stored now (another
    process may have switched it since ``cm`` opened); ``None``: no such branch."""
    live = cm.store.branches(cm.namespace)
    current = cm.store.current_branch_name(cm.namespace) or cm.current_branch().name
    name = wanted if wanted is not None else current
    for record in live:
        if record.ref.name == name:
            return record
    return None


def read_transcript(cm: ContextManager, record: BranchRecord) -> TranscriptView:
    """The branch's transcript as a view: markers from its binding record, its releases and
    the drops its replies recorded. Reads the branch in chunks of ``READ_CHUNK``."""
    binding = cm.store.binding_record(cm.namespace, record.key, releases=False)
    messages: list[StoredMessage] = []
    releases: dict[MessageId, Release] = {}
    after: int | None = None
    while True:
        chunk = cm.messages(branch=record.ref.name, since=after, limit=READ_CHUNK)
        thinking = [
            m.id
            for m in chunk
            if any(isinstance(b, ThinkingBlock | RedactedThinkingBlock) for b in m.content)
        ]
        if thinking:
            releases.update(cm.store.releases(cm.namespace, record.key, thinking))
        messages.extend(chunk)
        if len(chunk) < READ_CHUNK:
            break
        after = chunk[-1].sequence
    dropped = dropped_spots(messages)
    return build_view(line_of(m, binding.left_out, releases, dropped) for m in messages)
