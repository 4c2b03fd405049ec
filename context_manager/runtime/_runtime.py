"""The runtime: registered agents over one store and one ``anthropic`` async client.

It owns the teller for its agents and installs the teller's strip hook on each agent's context
manager at registration, beside any observer the host set. A removed agent's late compiles make no
told state. Ephemeral runs get their own namespace and teller, gone when they end.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import anthropic

from context_manager._manager import ContextManager, TracerProviderOption
from context_manager._model._errors import AgentNotFound, InvalidType, InvalidValue
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ThinkingStrip
from context_manager._reasoning._capture import warn_if_reasoning_unconfigured
from context_manager._store._postgres import PostgresStore
from context_manager._store._protocol import Store
from context_manager._telemetry import telemetry_for
from context_manager.web import LOOPBACK, Access, CallbackSource, ConsoleServer, create_app
from notices import ReasoningLossTeller

from ._agent import Agent
from ._calls import RetryPolicy
from ._publish import ReasoningPublisher

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

log = library_logger("context_manager.runtime")

AGENT_NAME_MAX = 64
"""Agent names are namespaces and appear in every notice line: short and printable."""


def check_agent_name(name: object) -> str:
    """Return ``name`` if it is 1-64 printable characters.

    Raises:
        ValueError: naming what is wrong.
    """
    if not isinstance(name, str) or not 1 <= len(name) <= AGENT_NAME_MAX:
        raise InvalidValue(f"agent name must be 1-{AGENT_NAME_MAX} characters, got {name!r}")
    if not name.isprintable() or name != name.strip():
        raise InvalidValue(
            f"agent name {name!r} has control characters or edge whitespace; use printable text"
        )
    return name


class Runtime:
    """Runs registered agents' turns against ``client`` with their transcripts in ``store``.

    Each turn holds its agent in the store (``Store.hold``): another runtime running the same
    agent, in this process or on another host, waits up to ``hold_timeout`` seconds (``None``:
    the store's default) and then raises ``AgentBusy`` naming the holder; ``holder`` labels this
    runtime's holds (reported as ``LABEL@HOST:PID``).

    ``tracer_provider`` turns on OpenTelemetry for every agent (``docs/tracing.md``): an
    ``invoke_agent`` span per turn, a ``chat`` span per model call, an ``execute_tool`` span per
    tool run, a ``compile`` span per compile, ``context_manager.*`` events and the GenAI
    metrics (to ``meter_provider``, default the global one). ``True`` uses the application's
    global provider; unset, nothing is recorded. Raises ``TelemetryUnavailable`` when it is set
    and ``opentelemetry-api`` is not installed.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        store: Store,
        *,
        teller: ReasoningLossTeller | None = None,
        retry: RetryPolicy | None = None,
        hold_timeout: float | None = None,
        holder: str | None = None,
        tracer_provider: TracerProviderOption = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.client = client
        self.store = store
        self.retry = retry or RetryPolicy()
        self.hold_timeout = hold_timeout
        self.holder = holder
        self._agents: dict[str, Agent] = {}
        self.telemetry = telemetry_for(tracer_provider, meter_provider)
        """The spans, events and metrics every agent's context shares (off by default)."""
        self._serving = 0
        self.teller = teller if teller is not None else ReasoningLossTeller(self._reader)

    def _reader(self, agent: str, message_id: MessageId) -> StoredMessage:
        found = self._agents.get(agent)
        if found is None:
            raise AgentNotFound(agent, self._agents)
        return found.context.get_message(message_id)

    def register(self, agent: Agent) -> Agent:
        """Open the agent's context (namespace = its name) and hear its strips from now on.

        Raises:
            ValueError: a bad name, or an agent of that name is already registered.
        """
        check_agent_name(agent.name)
        if agent.name in self._agents:
            raise InvalidValue(f"an agent named {agent.name!r} is already registered")
        self._attach(agent, agent.name, self.teller)
        self._agents[agent.name] = agent
        if self._serving:
            agent.live.serve(True)
        return agent

    def _attach(self, agent: Agent, namespace: str, teller: ReasoningLossTeller) -> None:
        context = ContextManager.open(
            self.store,
            namespace=namespace,
            binding=agent.binding,
            strategy=agent.strategy,
            reasoning=agent.reasoning or None,
            tracer_provider=self.telemetry,
            editing=agent.editing,
            caching=agent.caching,
        )
        agent.attach(
            self.client,
            context,
            teller,
            self.retry,
            hold_timeout=self.hold_timeout,
            holder=self.holder,
        )
        warn_if_reasoning_unconfigured(agent.name, agent.head, agent.reasoning)

        def hear(strip: ThinkingStrip, key: str) -> None:
            if agent.removed:
                return
            try:
                agent._deliver(teller.for_strip(agent.name, key, strip, agent.turn_state()), key)
            except Exception as err:  # the teller never fails a compile
                log.error("teller_failed", agent=agent.name, error=repr(err), line="[reasoning]")

        def forget(key: str) -> None:
            teller.forget(agent.name, key)
            agent._forget_held(key)

        context.on_thinking_strip(hear)
        context.on_reply_recorded(agent._reply_recorded)
        context.on_branch_deleted(forget)
        context.on_thinking_restored(lambda replies, key: teller.restored(agent.name, key, replies))

    def remove(self, name: str) -> Agent:
        """Forget an agent: no told state stays, and its late compiles tell nothing.

        Raises:
            KeyError: no such agent; the message lists the registered ones.
        """
        agent = self._agents.pop(name, None)
        if agent is None:
            raise AgentNotFound(name, self._agents)
        agent.removed = True
        agent.cancel_compaction("the agent was removed")
        if self._serving:
            agent.live.serve(False)
        self.teller.forget(name)
        agent.context.forget_cache()  # its renders, records and stamps go with it
        return agent

    def serve(
        self,
        access: Access | str | os.PathLike[str],
        *,
        host: str = LOOPBACK,
        port: int = 0,
    ) -> ConsoleServer:
        """The operator console for this runtime's agents, live reasoning included.

        ``async with runtime.serve("tokens.txt", port=8000) as console:`` serves it in the
        running loop beside the agents' turns (``console.url``); leaving the block stops it.
        While it serves, each agent keeps its in-progress reasoning for catch-up.

        Args:
            access: an ``Access`` table, or the path of a tokens file (``Access.from_file``).
            host: where to listen (loopback by default).
            port: the port, ``0`` for a free one.

        Raises:
            TokensFileError: the tokens file cannot be used.
        """
        table = access if isinstance(access, Access) else Access.from_file(access)
        source = CallbackSource(
            lambda: list(self._agents),
            lambda name: self._agents[name].context,
            lambda name: self._agents[name].live if name in self._agents else None,
        )
        return ConsoleServer(
            create_app(source, table),
            host,
            port,
            on_start=lambda: self._serve_hubs(True),
            on_stop=lambda: self._serve_hubs(False),
        )

    def publish_reasoning(self) -> ReasoningPublisher:
        """Publish the registered agents' live reasoning through the store's notification
        channel (PostgreSQL ``NOTIFY``), for a console in another process
        (``context-manager serve --db postgresql://...``): ``async with
        runtime.publish_reasoning():`` around the turns. Agents registered later are not
        published. Nothing is stored.

        Raises:
            TypeError: the store is not a ``PostgresStore`` (SQLite has no channel: a console
                there shows the durable view only).
        """
        if not isinstance(self.store, PostgresStore):
            raise InvalidType(
                f"publish_reasoning needs a PostgresStore, not {type(self.store).__name__}; "
                "serve the console from this runtime instead (Runtime.serve)"
            )
        return ReasoningPublisher(self.store, self._agents.values())

    def _serve_hubs(self, on: bool) -> None:
        self._serving += 1 if on else -1
        for agent in self._agents.values():
            agent.live.serve(on)

    def agents(self) -> list[Agent]:
        """Registered agents, in registration order."""
        return list(self._agents.values())

    @contextlib.asynccontextmanager
    async def ephemeral(self, agent: Agent) -> AsyncIterator[Agent]:
        """A one-off run: its own namespace and told state, both gone when the block ends."""
        check_agent_name(agent.name)
        namespace = f"{agent.name}~{uuid.uuid4().hex[:12]}"
        teller = ReasoningLossTeller(lambda _, mid: agent.context.get_message(mid))
        self._attach(agent, namespace, teller)
        try:
            yield agent
        finally:
            agent.removed = True
            teller.forget(agent.name)
            agent.context.forget_cache()  # nothing of the run stays held in memory
            self.store.drop_namespace(namespace)
