"""The stateful simulator: records calls, holds the fault knobs and answers HTTP requests.

Thread-safe: one lock guards the records, the knobs and nothing else; scripts run outside it. Every
request gets an answer in the API's shapes (a bug in the simulator itself is logged and answered
with a 500 ``api_error``). Invariants (``_check``): every recorded call holds its request and its
reply; the fault queues hold only valid entries.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import anthropic
import attrs
import httpx2
import structlog

from context_manager._model._content import block_to_wire, to_block

from ._api import MESSAGES_PATH, PREFIX_MISMATCH, SIGNED_TYPES
from ._errors import InvalidRequest, NotFound, SimulatedApiError
from ._faults import Faults
from ._http import VERSION_HEADER, HttpReply, betas_of, error_reply, json_reply, sse_reply
from ._intake import new_id, parse_body, split_betas
from ._reply import Script, default_script
from ._respond import answer
from ._server import SimulatorServer
from ._transport import SimulatorTransport
from ._validate import validate_request
from ._verify import BlockCheck, BlockPredicate, Verifier, content_blocks, walk

logger = structlog.get_logger("context_manager.simulator")

DEFAULT_KEY = b"context-manager-simulator-key-v1"
"""The key when none is given: fixed, so separate simulators (and processes) read each other's
blocks. Pass your own key to make a simulator that refuses every other one's blocks."""

BASE_URL = "http://simulator.invalid"
"""The base URL of in-process clients (``.invalid`` never resolves: nothing leaks to a network)."""

API_KEY = "sim"
"""The API key in-process clients send; the simulator does not check it."""


@attrs.frozen
class Call:
    """One answered request.

    Attributes:
        request: the parsed request body, as received.
        betas: the names in its ``anthropic-beta`` header, sorted.
        status: the HTTP status answered.
        response: the reply message, or the error body.
        stream: the request asked for a stream.
        dropped: the blocks removed in drop mode, in request order.
    """

    request: dict[str, Any]
    betas: tuple[str, ...]
    status: int
    response: dict[str, Any]
    stream: bool
    dropped: tuple[BlockCheck, ...] = ()


class Simulator:
    """A local Messages API that signs, verifies and drops thinking blocks like the real one.

    Args:
        script: ``script(request) -> reply blocks`` (wire dicts, ``context_manager`` blocks, SDK
            blocks or strings). ``request`` is the body as the model sees it (dropped blocks
            removed). A thinking block needs only its text; the simulator signs it. Tool-use ids
            are generated when missing. Default: think one line, answer one line.
        key: the HMAC key signatures are made and checked with.
        model_families: model id to family name; blocks bind to the family, so models of one
            family read each other's blocks. A model not listed is its own family.

    Example:
        ``sim = Simulator(); async with sim.client() as client: await client.beta.messages
        .create(...)``
    """

    def __init__(
        self,
        script: Script | None = None,
        key: bytes = DEFAULT_KEY,
        *,
        model_families: Mapping[str, str] | None = None,
    ) -> None:
        if not key:
            raise ValueError("key must be non-empty bytes")
        self._script: Script = script or default_script
        self._verifier = Verifier(bytes(key), dict(model_families or {}))
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._faults = Faults()

    # Records -----------------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every answered request with a parseable body, oldest first (a copy)."""
        with self._lock:
            return list(self._calls)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received (parsed), oldest first."""
        return [call.request for call in self.calls]

    @property
    def responses(self) -> list[dict[str, Any]]:
        """Every reply (message or error body), in the order of ``requests``."""
        return [call.response for call in self.calls]

    # Fault knobs -------------------------------------------------------------------------------

    def fail_next(self, n: int = 1, status: int = 529) -> None:
        """Answer the next ``n`` requests with ``status`` in the API's error shape.

        429 is a ``rate_limit_error``, 500 an ``api_error``, 529 an ``overloaded_error``. Failed
        requests are recorded; they consume no other knob.

        Raises:
            ValueError: ``status`` is not 429, 500 or 529, or ``n`` is negative.
        """
        with self._lock:
            self._faults.fail(n, status)

    def force_drop(
        self,
        paths: Iterable[str | tuple[int, int]] | None = None,
        reason: str = PREFIX_MISMATCH,
        predicate: BlockPredicate | None = None,
    ) -> None:
        """Make the next validated call fail chosen signed blocks with ``reason``, even if valid.

        A block is taken when its path (``"messages.i.content.j"`` or ``(i, j)``, as sent) is in
        ``paths`` or ``predicate(i, j, block)`` is true; with neither, every signed block is taken.
        Drop mode removes and reports them (error mode refuses with a 400, as for any failure).
        Only the chosen blocks are forced; a later block made while a forced one was present
        then fails its own check (``prefix_binding_mismatch``), exactly as after a real drop.
        When a block also fails naturally, the reason first in the API's precedence
        (organization, end user, model, prefix) is reported. Calls accumulate until consumed:
        the next call that passes request validation takes them all (even if its binding check
        then refuses it); a call failed by ``fail_next`` does not.

        Raises:
            ValueError: ``reason`` is not a drop reason, or a path is malformed.
        """
        with self._lock:
            self._faults.force(paths, reason, predicate)

    def malformed_transformations_next(self, entries: Iterable[Any]) -> None:
        """Append ``entries`` (any JSON values) as given to the next ``input_transformations``.

        Consumed like ``force_drop``'s blocks, by the next call that passes validation. The list
        is then present even without the binding beta.
        """
        with self._lock:
            self._faults.append_entries(entries)

    # Verifier ----------------------------------------------------------------------------------

    def verify(self, request: Mapping[str, Any]) -> list[BlockCheck]:
        """Check every signed block of ``request`` exactly as a drop-mode call would.

        Nothing is recorded and no knob is consumed (forced drops do not apply).

        Args:
            request: a body, or SDK keyword arguments (a ``betas`` entry is the beta header).

        Returns:
            One ``BlockCheck`` per signed block, in request order (``reason`` is ``None`` when
            the block verifies).

        Raises:
            InvalidRequest: the API would refuse the request (its message says why), including
                an empty, malformed or foreign signature.
        """
        body, betas = split_betas(request)
        validate_request(body, betas)
        return list(walk(self._verifier, body).checks)

    def verify_block(self, request: Mapping[str, Any], i: int, j: int, block: Any) -> str | None:
        """Would ``block`` verify if inserted at ``messages[i].content[j]`` of ``request``?

        Everything before it is as in ``request``, after the drops a drop-mode call would make.

        Args:
            request: a body, or SDK keyword arguments.
            i: index of an existing message.
            j: index in its content (``0`` to its length).
            block: a thinking or redacted thinking block (wire dict, block or SDK block).

        Returns:
            ``None`` when it would verify, else the drop reason.

        Raises:
            IndexError: ``i`` or ``j`` is out of range.
            ValueError: ``block`` is not a signed block.
            InvalidRequest: ``block`` or an earlier signed block has an invalid signature.
        """
        body, _ = split_betas(request)
        wire = block_to_wire(to_block(block))
        if wire.get("type") not in SIGNED_TYPES:
            raise ValueError(f"only thinking blocks are bound; got a {wire.get('type')!r} block")
        messages = list(body.get("messages", []))
        if not 0 <= i < len(messages):
            raise IndexError(f"message index {i} out of range (0..{len(messages) - 1})")
        content = content_blocks(messages[i].get("content"))
        if not 0 <= j <= len(content):
            raise IndexError(f"content index {j} out of range (0..{len(content)})")
        content.insert(j, wire)
        messages[i] = {**messages[i], "content": content}
        walked = walk(self._verifier, {**body, "messages": messages}, stop_at=(i, j))
        return walked.checks[-1].reason

    # HTTP --------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Answer one HTTP request (what the transport and the server call).

        Args:
            method: the HTTP method.
            path: the URL path (a query string is ignored).
            headers: request headers.
            body: the raw request body.

        Returns:
            The answer; never raises.
        """
        request_id = new_id("req")
        headers = {name.lower(): value for name, value in headers.items()}
        parsed: dict[str, Any] | None = None
        betas: frozenset[str] = frozenset()
        try:
            if method != "POST" or path.split("?")[0] != MESSAGES_PATH:
                raise NotFound(method, path)
            if VERSION_HEADER not in headers:
                raise InvalidRequest(f"{VERSION_HEADER}: header is required")
            parsed = parse_body(body)
            betas = betas_of(headers)
            reply, response, dropped = self._answer(parsed, betas, request_id)
        except SimulatedApiError as err:
            logger.info(
                "simulator_refused", status=err.status, error=err.error_type, why=err.message
            )
            reply, response, dropped = error_reply(err, request_id), err.body(), ()
        except Exception:  # a simulator bug: answer like the API would, never crash the caller
            logger.exception("simulator_failed", path=path)
            bug = SimulatedApiError(500, "api_error", "internal simulator error (see its log)")
            reply, response, dropped = error_reply(bug, request_id), bug.body(), ()
        if parsed is not None:
            call = Call(
                parsed,
                tuple(sorted(betas)),
                reply.status,
                response,
                parsed.get("stream") is True,
                dropped,
            )
            with self._lock:
                self._calls.append(call)
        return reply

    def _answer(
        self, body: dict[str, Any], betas: frozenset[str], request_id: str
    ) -> tuple[HttpReply, dict[str, Any], tuple[BlockCheck, ...]]:
        with self._lock:
            failure = self._faults.take_failure()
        if failure is not None:
            raise failure
        validate_request(body, betas)
        with self._lock:
            knobs = self._faults.take_knobs()
        result = answer(
            body, betas, verifier=self._verifier, script=self._script, knobs=knobs, new_id=new_id
        )
        dropped = result.walk.dropped
        if dropped:
            logger.info(
                "simulator_thinking_dropped",
                paths=[check.path_text for check in dropped],
                reasons=[check.reason for check in dropped],
            )
        if body.get("stream") is True:
            return sse_reply(result.message, request_id), result.message, dropped
        return json_reply(200, result.message, request_id), result.message, dropped

    # Clients -----------------------------------------------------------------------------------

    def transport(self) -> SimulatorTransport:
        """An ``httpx2`` transport (sync and async) answered by this simulator, no sockets."""
        return SimulatorTransport(self)

    def client(self, *, max_retries: int = 0, **options: Any) -> anthropic.AsyncAnthropic:
        """An ``anthropic.AsyncAnthropic`` talking to this simulator in-process.

        Args:
            max_retries: SDK retries (0 by default, so a knob's failure reaches the caller).
            **options: other ``AsyncAnthropic`` options (``timeout``, ``default_headers``, ...).
        """
        http_client = httpx2.AsyncClient(transport=self.transport())
        return anthropic.AsyncAnthropic(
            api_key=API_KEY,
            base_url=BASE_URL,
            http_client=http_client,
            max_retries=max_retries,
            **options,
        )

    def sync_client(self, *, max_retries: int = 0, **options: Any) -> anthropic.Anthropic:
        """An ``anthropic.Anthropic`` (sync) talking to this simulator in-process."""
        http_client = httpx2.Client(transport=self.transport())
        return anthropic.Anthropic(
            api_key=API_KEY,
            base_url=BASE_URL,
            http_client=http_client,
            max_retries=max_retries,
            **options,
        )

    def server(self, host: str = "127.0.0.1", port: int = 0) -> SimulatorServer:
        """A loopback HTTP server for this simulator, not yet started (``start()`` / ``stop()``).

        Raises:
            ValueError: ``host`` is not a loopback address.
        """
        return SimulatorServer(self, host, port)

    @contextlib.contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Serve over HTTP on loopback for the ``with`` block; yields the base URL.

        Example:
            ``with sim.serve() as url: anthropic.AsyncAnthropic(base_url=url, api_key="x")``

        Raises:
            ValueError: ``host`` is not a loopback address.
            OSError: the port cannot be bound.
        """
        server = self.server(host, port)
        url = server.start()
        try:
            yield url
        finally:
            server.stop()

    def _check(self) -> None:
        """Assert the structural invariants (tests call this after mutations)."""
        with self._lock:
            self._faults._check()
            assert all(isinstance(call.response, dict) for call in self._calls)
