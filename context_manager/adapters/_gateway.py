"""A local Messages API gateway: any client that takes a base URL gets a managed agent.

``POST /v1/messages`` (JSON or a server-sent event stream) and ``POST /v1/messages/count_tokens``
answer as the Messages API does; each call is reconciled, compiled, forwarded, recorded, its drops
placed and its notices told (``ManagedAgents``), exactly as through ``ManagedAsyncAnthropic``.
Built on starlette (the ``gateway`` extra), imported when the app is made.

Invariants: the caller's own credentials (``x-api-key`` or ``authorization``) go upstream with
its call and nowhere else: never stored, never logged, never kept past the request; the agent is
the ``x-context-manager-agent`` header (and ``x-context-manager-branch``), or the configured rule;
an upstream error is answered with the upstream's own status and body, a body the library
cannot read with a 400 ``invalid_request_error`` saying why (nothing stored); a call whose agent
another host holds past the hold timeout is answered 409 (which the SDKs retry); without an
upstream the gateway answers from the in-process simulator (the offline demo), whatever key the
caller sends.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anthropic
import httpx2

from context_manager._compile._strategies import Strategy
from context_manager._manager import TracerProviderOption
from context_manager._model._errors import AgentBusy, InvalidType
from context_manager._model._head import ThinkingBinding
from context_manager._model._log import library_logger
from context_manager._store._protocol import Store
from context_manager.simulator import Simulator

from ._agents import AgentRef, AgentSpec, AgentUnknown, ManagedAgents
from ._client import ManagedAsyncAnthropic

log = library_logger("context_manager.gateway")

AGENT_HEADER = "x-context-manager-agent"
BRANCH_HEADER = "x-context-manager-branch"
DEFAULT_PORT = 8787
INSTALL_HINT = (
    "the gateway needs starlette and uvicorn: pip install 'thinking-context-manager[gateway]'"
)
"""What ``gateway_app`` (and ``context-manager gateway``) says when the extra is missing."""
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
FORWARDED_HEADERS = ("anthropic-version",)
"""Request headers passed on as they came (besides the credentials and the betas)."""

_CALLER: contextvars.ContextVar[AgentRef | None] = contextvars.ContextVar(
    "context_manager_gateway_agent", default=None
)


UPSTREAM_TIMEOUT = httpx2.Timeout(None)
"""The upstream call's timeout: none of the gateway's own (the caller's client keeps its own).
Given explicitly, it also keeps the ``anthropic`` SDK from refusing a long call the caller sends
without streaming (its client-side "Streaming is required" check), which the API accepts."""

THREAD_UNSUPPORTED = "thread_unsupported_request"
"""The error code an SDK reads as "send the whole history without a thread" (it then does)."""


class NoAgent(AgentUnknown):
    """A call named no agent and no rule gives one."""


def _agent_rule(rule: AgentSpec | None) -> Callable[[Mapping[str, Any]], AgentRef]:
    def agent(params: Mapping[str, Any]) -> AgentRef:
        named = _CALLER.get()
        if named is not None:
            return named
        if rule is None:
            raise NoAgent(f"name the agent in the {AGENT_HEADER} header")
        return rule(params) if callable(rule) else rule

    return agent


def _caller_agent(headers: Mapping[str, str]) -> AgentRef | None:
    name = headers.get(AGENT_HEADER, "").strip()
    if not name:
        return None
    branch = headers.get(BRANCH_HEADER, "").strip()
    return (name, branch) if branch else name


CREDENTIAL_HEADERS = ("x-api-key", "authorization")
"""The caller's credentials: sent upstream exactly as they came, with its own call only."""

_CREDENTIALS: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "context_manager_gateway_credentials", default=()
)


async def _caller_credentials(request: httpx2.Request) -> None:
    """The upstream request carries the caller's credentials and no other (none the SDK found
    in this process's environment)."""
    for name in CREDENTIAL_HEADERS:
        if name in request.headers:
            del request.headers[name]
    request.headers.update(dict(_CREDENTIALS.get()))


def _error(status: int, kind: str, message: str, **details: Any) -> Any:
    from starlette.responses import JSONResponse

    error: dict[str, Any] = {"type": kind, "message": message}
    if details:
        error["details"] = details
    return JSONResponse({"type": "error", "error": error}, status_code=status)


def _sse(event: Any) -> bytes:
    data = event.to_dict(mode="json") if hasattr(event, "to_dict") else dict(event)
    return f"event: {data.get('type')}\ndata: {json.dumps(data)}\n\n".encode()


class Gateway:
    """The gateway's state: the agents, and where calls go.

    Args:
        agents: the ``ManagedAgents`` every call is reconciled for (its ``agent`` rule reads
            the call's header first: see ``gateway_app``).
        upstream: the Messages API base URL calls are forwarded to; ``None``: the simulator.
        simulator_client: the client used without an upstream (default: a new ``Simulator``'s).
    """

    def __init__(
        self,
        agents: ManagedAgents,
        *,
        upstream: str | None = None,
        simulator_client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self.agents = agents
        self.upstream = upstream
        self._http = (
            httpx2.AsyncClient(timeout=None, event_hooks={"request": [_caller_credentials]})
            if upstream
            else None
        )
        if upstream is None and simulator_client is None:
            simulator_client = Simulator().client()
        self._simulator = simulator_client

    def client(self, headers: Mapping[str, str]) -> ManagedAsyncAnthropic:
        """A managed client for one call: the caller's credentials, or the simulator."""
        if self.upstream is None:
            assert self._simulator is not None
            return ManagedAsyncAnthropic(self._simulator, agents=self.agents)
        passed = {h: headers[h] for h in FORWARDED_HEADERS if h in headers}
        real = anthropic.AsyncAnthropic(
            api_key="caller",  # replaced by the caller's own credentials on the way out
            base_url=self.upstream,
            http_client=self._http,
            max_retries=0,
            default_headers=passed,
        )
        return ManagedAsyncAnthropic(real, agents=self.agents)

    async def messages(self, request: Any) -> Any:
        """``POST /v1/messages``."""
        return await self._answer(request, count=False)

    async def count_tokens(self, request: Any) -> Any:
        """``POST /v1/messages/count_tokens``."""
        return await self._answer(request, count=True)

    async def _answer(self, request: Any, *, count: bool) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "invalid_request_error", "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request_error", "the body is not a JSON object")
        if body.get("thread") is not None:  # the history must come whole, every call
            message = "the gateway does not hold threads: send the whole history without one"
            return _error(
                400,
                "invalid_request_error",
                message,
                error_code=THREAD_UNSUPPORTED,
                unsupported=["thread"],
            )
        betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
        if betas:
            body["betas"] = betas
        body = {**body, "timeout": UPSTREAM_TIMEOUT}  # the caller's client keeps its own
        token = _CALLER.set(_caller_agent(headers))
        _CREDENTIALS.set(tuple((h, headers[h]) for h in CREDENTIAL_HEADERS if h in headers))
        try:
            messages = self.client(headers).beta.messages
            if count:
                counted = await messages.count_tokens(**body)
                return JSONResponse(counted.to_dict(mode="json"))
            if body.get("stream") is True:
                stream = await messages.create(**body)
                return StreamingResponse(_events(stream), media_type="text/event-stream")
            reply = await messages.create(**body)
            return JSONResponse(reply.to_dict(mode="json"))
        except NoAgent as err:
            return _error(400, "invalid_request_error", str(err))
        except AgentBusy as err:  # another host holds the agent: worth a retry (the SDK's own)
            return _error(409, "api_error", str(err), holder=err.holder)
        except anthropic.APIStatusError as err:
            return JSONResponse(err.body, status_code=err.status_code)
        except (ValueError, InvalidType) as err:  # a body reconcile cannot read
            return _error(400, "invalid_request_error", str(err))
        except anthropic.APIConnectionError as err:
            log.warning(
                "gateway_upstream_unreachable", upstream=self.upstream, error=type(err).__name__
            )
            return _error(502, "api_error", "the upstream could not be reached")
        finally:
            _CALLER.reset(token)

    async def close(self) -> None:
        """Close the upstream connections."""
        if self._http is not None:
            await self._http.aclose()


async def _events(stream: Any) -> AsyncIterator[bytes]:
    try:
        async for event in stream:
            yield _sse(event)
    except anthropic.APIStatusError as err:
        body = err.body if isinstance(err.body, dict) else {}
        error = {"type": "error", "error": body.get("error", {})}
        yield f"event: error\ndata: {json.dumps(error)}\n\n".encode()


def gateway_app(
    store: Store,
    *,
    agent: AgentSpec | None = None,
    upstream: str | None = None,
    binding: ThinkingBinding | None = None,
    strategy: Strategy | None = None,
    simulator_client: anthropic.AsyncAnthropic | None = None,
    tracer_provider: TracerProviderOption = None,
) -> Any:
    """The gateway as a starlette app (serve it with uvicorn).

    Args:
        store: where every agent's transcript lives.
        agent: the rule for calls without the agent header: a namespace, ``(namespace,
            branch)``, or ``agent(params)``; ``None``: such calls are refused (400).
        upstream: the Messages API to forward to (e.g. ``https://api.anthropic.com``); ``None``:
            answer from the simulator.
        binding: the agents' ``ThinkingBinding``.
        strategy: a window the library manages; ``None`` follows each framework's own.
        simulator_client: the simulator's client to answer with when there is no upstream.
        tracer_provider: OpenTelemetry for every agent (``docs/tracing.md``).

    Raises:
        ModuleNotFoundError: starlette is not installed; the message is ``INSTALL_HINT`` (how to
            install the ``gateway`` extra).
    """
    try:
        from starlette.applications import Starlette
        from starlette.routing import Route
    except ImportError as err:
        raise ModuleNotFoundError(INSTALL_HINT, name=err.name) from err

    agents = ManagedAgents(
        store,
        _agent_rule(agent),
        binding=binding,
        strategy=strategy,
        tracer_provider=tracer_provider,
    )
    gateway = Gateway(agents, upstream=upstream, simulator_client=simulator_client)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gateway.close()

    routes = [
        Route("/v1/messages", gateway.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", gateway.count_tokens, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = gateway
    return app
