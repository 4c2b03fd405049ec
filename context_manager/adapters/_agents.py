"""The managed client's state: one context per agent, the teller, and the notices waiting.

Stateful (``ManagedAgents``), shared by a managed client and every copy ``with_options`` makes.
Invariants: one ``ContextManager`` per namespace, opened once, with the teller's hooks installed
at once; a call is reconciled, sent and recorded against the same compile, on its own branch
(another call of the agent may move the context meanwhile: the reply is recorded after switching
back; a dry call moves nothing); a ``[reasoning]`` line (from a strip heard at compile, or from
the call's drops) waits for the agent's next boundary (the next call, once the framework's new
messages are stored) so it never stands between a compile and its reply, or between a tool call
and its result; nothing the teller, the recording or a notice write does can fail the
framework's call (each failure is logged). A call holds its agent (``ContextManager.hold``)
while it is reconciled and compiled and while its reply is recorded, so hosts sharing a database
(several gateways) never record a reply between another call's reading and its compile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from context_manager._compile._caching import Caching
from context_manager._compile._strategies import Strategy
from context_manager._manager import ContextManager, TracerProviderOption
from context_manager._model._content import TextBlock, ToolResultBlock
from context_manager._model._errors import BranchExists, ContextManagerError
from context_manager._model._head import ThinkingBinding
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import CompileResult, ThinkingStrip
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._reconcile import Reconciliation
from context_manager._store._hold import Hold
from context_manager._store._protocol import Store
from context_manager._telemetry import telemetry_for
from notices import ReasoningLossTeller, TurnState, notice_metadata

from ._records import follow_current

log = library_logger("context_manager.adapters")

AgentRef: TypeAlias = str | tuple[str, str]
"""An agent: its namespace, or ``(namespace, branch)``."""

AgentSpec: TypeAlias = AgentRef | Callable[[Mapping[str, Any]], AgentRef]
"""An agent, or ``spec(params) -> agent`` choosing one per call from its parameters."""


class AgentUnknown(ContextManagerError, ValueError):
    """A call's agent cannot be told: the spec gave something that names no agent."""


@attrs.frozen
class Prepared:
    """One call reconciled: its agent, context and compile."""

    agent: str
    context: ContextManager
    result: CompileResult
    started: int = attrs.field(factory=time.time_ns)
    """When the call was prepared (``time.time_ns()``): its ``chat`` span begins there."""


def _on(current: str, named: str) -> bool:
    """True when ``current`` is ``named`` or a branch a rewind started from it."""
    return current == named or current.startswith(f"{named}~")


def _back_on(cm: ContextManager, key: str) -> None:
    """Make the branch whose key is ``key`` current again, when another call of the same
    agent on another branch moved the context while this one awaited its reply (a branch
    deleted meanwhile is left for ``record_reply`` to refuse)."""
    if cm.current_branch_key() == key:
        return
    for record in cm.store.branches(cm.namespace):
        if record.key == key:
            cm.switch_branch(record.ref.name)
            return


def _fork_or_switch(cm: ContextManager, name: str) -> None:
    """Fork the current branch as ``name``, or switch to it when another host (or another
    manager of this agent) made it meanwhile: calls naming one new branch at once from two
    gateways all land on it."""
    try:
        cm.fork(name)
    except BranchExists:
        cm.switch_branch(name)


class ManagedAgents:
    """The agents one managed client serves, over one store.

    Args:
        store: where every agent's transcript lives.
        agent: the agent (``AgentSpec``).
        binding: each agent's ``ThinkingBinding`` (default ``ThinkingBinding()``).
        strategy: a window the library manages; ``None`` (the default) follows the
            framework's own window as a host fold.
        reasoning: the reasoning sidecar, if any.
        caching: where prompt-cache breakpoints go (default ``Caching()``).
        teller: the ``ReasoningLossTeller`` (default: a new one reading these agents' stores).
        tracer_provider: OpenTelemetry for every agent (``docs/tracing.md``): a
            ``TracerProvider``, ``True`` for the global one, or a shared ``Telemetry``.
    """

    def __init__(
        self,
        store: Store,
        agent: AgentSpec,
        *,
        binding: ThinkingBinding | None = None,
        strategy: Strategy | None = None,
        reasoning: ReasoningCapture | None = None,
        caching: Caching | None = None,
        teller: ReasoningLossTeller | None = None,
        tracer_provider: TracerProviderOption = None,
    ) -> None:
        self.store = store
        self.telemetry = telemetry_for(tracer_provider)
        self.agent = agent
        self.binding = binding or ThinkingBinding()
        self.strategy = strategy
        self.reasoning = reasoning
        self.caching = caching
        self.teller = teller if teller is not None else ReasoningLossTeller(self._read)
        self._contexts: dict[str, ContextManager] = {}
        self._waiting: dict[tuple[str, str], list[str]] = {}
        self._turns: dict[tuple[str, str], int] = {}
        self._lock = threading.RLock()

    # agents
    def resolve(self, params: Mapping[str, Any]) -> tuple[str, str | None]:
        """``(namespace, branch or None)`` of the call with ``params``.

        Raises:
            AgentUnknown: the spec gave something that is not a namespace or a pair.
        """
        ref = self.agent(params) if callable(self.agent) else self.agent
        if isinstance(ref, str) and ref:
            return ref, None
        if isinstance(ref, tuple) and len(ref) == 2 and all(isinstance(p, str) for p in ref):
            return ref[0], ref[1] or None
        raise AgentUnknown(f"agent must be a namespace or (namespace, branch), got {ref!r}")

    def context(
        self, namespace: str, branch: str | None = None, *, create: bool = True
    ) -> ContextManager:
        """The agent's context, on ``branch`` when given (forked from the current one if new;
        with ``create`` false a new branch is not made, and the context stays where it is: a
        fork at the current head holds what the current branch holds).

        A branch a rewind started from ``branch`` (``branch~1``, ``branch~1~1``, ...) counts as
        ``branch``: the framework went on there, so the call stays on it.
        """
        with self._lock:
            cm = self._contexts.get(namespace)
            if cm is None:
                cm = self._open(namespace)
            if branch is not None and not _on(cm.current_branch().name, branch):
                if branch in {ref.name for ref in cm.list_branches()}:
                    cm.switch_branch(branch)
                elif create:
                    _fork_or_switch(cm, branch)
            return cm

    def _open(self, namespace: str) -> ContextManager:
        cm = ContextManager.open(
            self.store,
            namespace=namespace,
            binding=self.binding,
            strategy=self.strategy,
            reasoning=self.reasoning,
            caching=self.caching,
            tracer_provider=self.telemetry,
        )

        def hear(strip: ThinkingStrip, key: str) -> None:
            self._wait(
                namespace,
                key,
                self.teller.for_strip(namespace, key, strip, self._turn(namespace, key)),
            )

        cm.on_thinking_strip(hear)
        cm.on_thinking_restored(lambda replies, key: self.teller.restored(namespace, key, replies))
        cm.on_branch_deleted(lambda key: self._forget(namespace, key))
        self._contexts[namespace] = cm
        return cm

    def _read(self, agent: str, message_id: MessageId) -> StoredMessage:
        return self.context(agent).get_message(message_id)

    def _forget(self, namespace: str, key: str) -> None:
        self.teller.forget(namespace, key)
        self._waiting.pop((namespace, key), None)
        self._turns.pop((namespace, key), None)

    # turns and notices
    def _turn(self, namespace: str, key: str) -> TurnState:
        """The framework's turn: from its newest own words (a user message that answers no tool)."""
        head = self._turns.get((namespace, key))
        if head is None:
            return TurnState(live=False, branch_key=None, head_sequence=0)
        return TurnState(live=True, branch_key=key, head_sequence=head)

    def _note_turn(self, cm: ContextManager, done: Reconciliation) -> None:
        for message_id in done.stored:
            message = cm.get_message(message_id)
            if message.role == "user" and not any(
                isinstance(b, ToolResultBlock) for b in message.content
            ):
                self._turns[(cm.namespace, cm.current_branch_key())] = message.sequence

    def _wait(self, namespace: str, key: str, line: str | None) -> None:
        if line:
            self._waiting.setdefault((namespace, key), []).append(line)

    def _boundary(self, cm: ContextManager, done: Reconciliation) -> None:
        """The framework's new messages are in: a turn opens at its newest own words, and the
        lines waiting for the current branch are stored."""
        self._note_turn(cm, done)
        key = cm.current_branch_key()
        lines = self._waiting.pop((cm.namespace, key), [])
        for line in lines:
            try:
                cm.add_message("system", [TextBlock(line)], metadata=notice_metadata(cm.namespace))
            except Exception as err:  # a notice that cannot be stored never fails a call
                self.teller.line_not_stored(cm.namespace, key, err)

    def waiting(self, namespace: str) -> list[str]:
        """The ``[reasoning]`` lines waiting for the agent's next call, oldest first."""
        return [
            line for (ns, _), lines in self._waiting.items() if ns == namespace for line in lines
        ]

    # calls
    def prepare(self, body: Mapping[str, Any], *, dry_run: bool = False) -> Prepared:
        """Reconcile one call's body for its agent (``dry_run``: store nothing, tell nothing).

        Raises:
            FrameworkParamsInvalid: the body has no model or messages, or holds a ``thread``.
            AgentUnknown: the agent spec gave no agent.
        """
        namespace, branch = self.resolve(body)
        if dry_run:
            return self._prepare(namespace, branch, body, dry_run=True)
        with self.hold(namespace):  # no other host records a reply between reading and compiling
            return self._prepare(namespace, branch, body, dry_run=False)

    def hold(self, namespace: str) -> Hold:
        """The agent's hold (``ContextManager.hold``): taken while a call is reconciled and
        compiled, and while its reply is recorded, so several hosts serving one agent (two
        gateways on one database) see each other's calls whole, as calls in one process do.
        ``async with`` it first to wait without blocking the event loop; the call's own ``with``
        then re-enters it."""
        return self.context(namespace).hold()

    def _prepare(
        self, namespace: str, branch: str | None, body: Mapping[str, Any], *, dry_run: bool
    ) -> Prepared:
        with self._lock:  # the branch stays the call's until its compile is made
            cm = self.context(namespace)
            follow_current(cm)
            before = cm.current_branch().name
            cm = self.context(namespace, branch, create=not dry_run)
            try:
                result = cm.reconcile(
                    body,
                    dry_run=dry_run,
                    follow_window=self.strategy is None,
                    boundary=lambda done: self._boundary(cm, done),
                )
            finally:
                if dry_run:  # a count moves nothing: the agent stays on its branch
                    cm.switch_branch(before)
        return Prepared(namespace, cm, result)

    def finish(self, prepared: Prepared, message: object) -> MessageId | None:
        """Record the reply, place its drops and tell them. Never raises (failures are logged)."""
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(prepared.context.hold())
            except Exception as err:  # a reply is never lost: recorded unheld, and logged
                log.warning("managed_reply_recorded_unheld", agent=prepared.agent, error=repr(err))
            return self._record(prepared, message)

    def _record(self, prepared: Prepared, message: object) -> MessageId | None:
        cm, result = prepared.context, prepared.result
        with self._lock, cm.telemetry.call(result, since=prepared.started) as call:
            call.answered(message, prepared.agent)
            try:
                _back_on(cm, result.branch)  # another call may have moved it meanwhile
                reply = cm.record_reply(message, result)
            except Exception as err:
                log.error("managed_reply_not_recorded", agent=prepared.agent, error=repr(err))
                return None
            try:
                placed = cm.place_drops(message, result)
                turn = self._turn(prepared.agent, result.branch)
                line = self.teller.for_drops(prepared.agent, result.branch, placed, turn)
                self._wait(prepared.agent, result.branch, line)
            except Exception as err:
                log.error("managed_drops_not_placed", agent=prepared.agent, error=repr(err))
            return reply
