"""``ManagedAnthropic`` / ``ManagedAsyncAnthropic``: a real ``anthropic`` client, managed.

A framework that takes an injected client (pydantic-ai's ``AnthropicProvider(anthropic_client=)``,
Microsoft Agent Framework, Google ADK, Strands) gets this one instead. Its ``messages`` and
``beta.messages`` ``create``, ``stream`` and ``count_tokens`` reconcile the framework's parameters
(``ContextManager.reconcile``), call the real client with the compiled request, record the reply
(streamed or not), place its drops and tell the notices; the framework gets the real response
object back. Every other attribute is the real client's, untouched (``models``, ``batches``,
``with_raw_response``, ...). A framework's own ``drop_block`` goes out as it set it; the compiler
still never sends a block it knows fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from context_manager._compile._caching import Caching
from context_manager._compile._strategies import Strategy
from context_manager._manager import ContextManager, TracerProviderOption
from context_manager._model._errors import InvalidType
from context_manager._model._head import ThinkingBinding
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._protocol import Store
from notices import ReasoningLossTeller

from ._agents import AgentSpec, ManagedAgents, Prepared
from ._calls import SplitCall, call_kwargs, split_call
from ._streams import (
    ManagedAsyncStream,
    ManagedAsyncStreamManager,
    ManagedStream,
    ManagedStreamManager,
)


@attrs.frozen
class _Call:
    """A framework call made ready: its split, its compile, and the real method's keywords."""

    split: SplitCall
    prepared: Prepared
    kwargs: dict[str, Any]


class _Messages:
    """What the sync and async ``messages`` resources share: preparing a call."""

    def __init__(self, inner: Any, agents: ManagedAgents) -> None:
        self._inner = inner
        self._agents = agents

    def _ready(self, method: Callable[..., Any], kwargs: dict[str, Any]) -> _Call:
        split = split_call(kwargs)
        prepared = self._agents.prepare(split.body)
        return _Call(split, prepared, call_kwargs(method, prepared.result.request, split.transport))

    def _counted(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        split = split_call(kwargs)
        prepared = self._agents.prepare(split.body, dry_run=True)
        method = self._inner.count_tokens
        return call_kwargs(method, prepared.result.request, split.transport, keep_unknown=False)

    def _done(self, prepared: Prepared) -> Callable[[object], None]:
        def done(message: object) -> None:
            self._agents.finish(prepared, message)

        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AsyncManagedMessages(_Messages):
    """``messages`` / ``beta.messages`` of ``ManagedAsyncAnthropic``."""

    async def create(self, **kwargs: Any) -> Any:
        """Reconcile, compile, call the real ``create``, record the reply; returns the real one."""
        call = self._ready(self._inner.create, kwargs)
        if call.split.stream:
            raw = await self._inner.create(**call.kwargs, stream=True)
            return ManagedAsyncStream(raw, self._done(call.prepared))
        message = await self._inner.create(**call.kwargs)
        self._agents.finish(call.prepared, message)
        return message

    def stream(self, **kwargs: Any) -> ManagedAsyncStreamManager:
        """The real ``stream(...)`` manager for the compiled request, recorded when it ends."""
        call = self._ready(self._inner.stream, kwargs)
        return ManagedAsyncStreamManager(
            self._inner.stream(**call.kwargs), self._done(call.prepared)
        )

    async def count_tokens(self, **kwargs: Any) -> Any:
        """The real ``count_tokens`` of the request this call would send (nothing is stored)."""
        return await self._inner.count_tokens(**self._counted(kwargs))


class SyncManagedMessages(_Messages):
    """``messages`` / ``beta.messages`` of ``ManagedAnthropic``."""

    def create(self, **kwargs: Any) -> Any:
        """Reconcile, compile, call the real ``create``, record the reply; returns the real one."""
        call = self._ready(self._inner.create, kwargs)
        if call.split.stream:
            raw = self._inner.create(**call.kwargs, stream=True)
            return ManagedStream(raw, self._done(call.prepared))
        message = self._inner.create(**call.kwargs)
        self._agents.finish(call.prepared, message)
        return message

    def stream(self, **kwargs: Any) -> ManagedStreamManager:
        """The real ``stream(...)`` manager for the compiled request, recorded when it ends."""
        call = self._ready(self._inner.stream, kwargs)
        return ManagedStreamManager(self._inner.stream(**call.kwargs), self._done(call.prepared))

    def count_tokens(self, **kwargs: Any) -> Any:
        """The real ``count_tokens`` of the request this call would send (nothing is stored)."""
        return self._inner.count_tokens(**self._counted(kwargs))


class _Beta:
    """``client.beta``: its ``messages`` managed, everything else the real one's."""

    def __init__(self, inner: Any, messages: _Messages) -> None:
        self._inner = inner
        self.messages = messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Managed:
    """What both managed clients share: the real client, the agents, the pass-through."""

    _resource: type[_Messages] = _Messages

    def __init__(
        self,
        client: Any,
        store: Store | None = None,
        *,
        agent: AgentSpec | None = None,
        binding: ThinkingBinding | None = None,
        strategy: Strategy | None = None,
        reasoning: ReasoningCapture | None = None,
        caching: Caching | None = None,
        teller: ReasoningLossTeller | None = None,
        agents: ManagedAgents | None = None,
        tracer_provider: TracerProviderOption = None,
    ) -> None:
        if agents is None:
            if store is None or agent is None:
                raise InvalidType("a managed client needs a store and an agent")
            agents = ManagedAgents(
                store,
                agent,
                binding=binding,
                strategy=strategy,
                reasoning=reasoning,
                caching=caching,
                teller=teller,
                tracer_provider=tracer_provider,
            )
        self._client = client
        self.agents: ManagedAgents = agents
        """The agents this client serves (their contexts, the teller, waiting notices)."""
        self.messages = self._resource(client.messages, agents)
        self.beta = _Beta(client.beta, self._resource(client.beta.messages, agents))

    @property
    def client(self) -> Any:
        """The real ``anthropic`` client underneath."""
        return self._client

    def context(self, namespace: str, branch: str | None = None) -> ContextManager:
        """The ``ContextManager`` of agent ``namespace`` (on ``branch`` when given)."""
        return self.agents.context(namespace, branch)

    def with_options(self, **options: Any) -> Any:
        """The real client's ``with_options`` copy, managed by the same agents."""
        return type(self)(self._client.with_options(**options), agents=self.agents)

    copy = with_options

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


if TYPE_CHECKING:  # a drop-in to type checkers: it is used wherever the real client is
    from anthropic import Anthropic as _SyncClient
    from anthropic import AsyncAnthropic as _AsyncClient
else:
    _SyncClient = _AsyncClient = object


class ManagedAsyncAnthropic(_Managed, _AsyncClient):  # type: ignore[misc]
    """An ``anthropic.AsyncAnthropic`` for one agent, managed (see the module docstring).

    Args:
        client: the real ``anthropic.AsyncAnthropic`` (or one over the simulator).
        store: where the agent's transcript lives.
        agent: its namespace, ``(namespace, branch)``, or ``agent(params)`` returning one.
        binding: the ``ThinkingBinding`` (default ``ThinkingBinding()``).
        strategy: a window the library manages (``Window``, ``Fold``); ``None`` (the default)
            follows the framework's own window (messages it drops, a summary it writes) as a
            host fold, reported in the compile's strip.
        reasoning: the reasoning sidecar, if any.
        caching: where prompt-cache breakpoints go (default ``Caching()``).
        teller: the ``ReasoningLossTeller`` to tell with (default: its own).
    """

    _resource = AsyncManagedMessages

    async def __aenter__(self) -> ManagedAsyncAnthropic:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


class ManagedAnthropic(_Managed, _SyncClient):  # type: ignore[misc]
    """An ``anthropic.Anthropic`` (sync) for one agent, managed; the arguments are
    ``ManagedAsyncAnthropic``'s."""

    _resource = SyncManagedMessages

    def __enter__(self) -> ManagedAnthropic:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()
