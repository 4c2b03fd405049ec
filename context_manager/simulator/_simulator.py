"""The stateful simulator: records calls, holds the fault knobs and answers HTTP requests.

Thread-safe: one lock guards the records, the knobs, the remembered replies (for the open tool loop
check) and the organization / end user; scripts run outside it. Every request gets an answer in the
API's shapes (a bug in the simulator itself is logged and answered with a 500 ``api_error``).
Invariants (``_check``): every recorded call holds its request and its reply; the fault queues hold
only valid entries; the remembered replies stay within their capacity.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import anthropic
import attrs
import httpx2

from context_manager import InvalidValue, library_logger

from ._api import (
    BINDING_BETA,
    DIAGNOSTICS,
    DROP_MODE,
    MESSAGES_PATH,
    PREFIX_MISMATCH,
    PREVIOUS_MESSAGE_ID,
    SIGNED_TYPES,
)
from ._cache import DEFAULT_MIN_TOKENS, PromptCache
from ._call import Call
from ._compaction import CompactionLedger
from ._count import COUNT_PATH, answer_count, count_input, items
from ._diagnose import DiagnosticsLedger, fingerprint
from ._errors import InvalidRequest, NotFound, SimulatedApiError
from ._faults import Faults
from ._http import VERSION_HEADER, HttpReply, betas_of, error_reply, framed_reply, json_reply
from ._intake import new_id, parse_body, split_betas
from ._limits import DEFAULT_CONTEXT_WINDOW, check_model, check_window
from ._loop import IssuedReplies
from ._models import (
    SYSTEM_MESSAGE_MODELS,
    PrefixCheck,
    Readability,
    documented_prefix_check,
    documented_readability,
)
from ._reply import Script, default_script
from ._respond import answer, transformations
from ._server import SimulatorServer
from ._summarize import COMPACTION_MODELS, check_request, compaction_reply
from ._transport import SimulatorTransport
from ._validate import validate_request
from ._verify import (
    BlockCheck,
    BlockPredicate,
    ForcedDrop,
    Verifier,
    behavior,
    content_blocks,
    walk,
)
from ._wire import SignedBlock, to_wire

# The library's public logger (stdlib-bridged: silent unless the application asks, never on
# stdout); the simulator shares no code with the layers it checks, only public names.
logger = library_logger("context_manager.simulator")

DEFAULT_KEY = b"context-manager-simulator-key-v1"
"""The key when none is given: fixed, so separate simulators (and processes) read each other's
blocks. Pass your own key to make a simulator that refuses every other one's blocks."""

BASE_URL = "http://simulator.invalid"
"""The base URL of in-process clients (``.invalid`` never resolves: nothing leaks to a network)."""

API_KEY = "sim"
"""The API key in-process clients send; the simulator does not check it."""

DEFAULT_ORGANIZATION = "org-simulator"
"""The organization requests are made under until ``Simulator.organization`` is changed."""


def _with_families(base: Readability, families: Mapping[str, str]) -> Readability:
    def readable(reader: str, producer: str) -> bool:
        same = families.get(reader, reader) == families.get(producer, producer)
        return same or base(reader, producer)

    return readable


class Simulator:
    """A local Messages API that signs, verifies and drops thinking blocks like the real one.

    Args:
        script: ``script(request) -> reply blocks`` (wire dicts, ``context_manager`` blocks, SDK
            blocks or strings). ``request`` is the body as the model sees it (dropped blocks
            removed). A thinking block needs only its text; the simulator signs it. Tool-use ids
            are generated when missing. Default: think one line, answer one line.
        key: the HMAC key signatures are made and checked with.
        model_families: model id to family name; models of one family read each other's blocks
            (on top of ``readability``). A model not listed is its own family.
        readability: ``readable(reader, producer) -> bool``, the model check (provider rules 8-9).
            Default: the documented table (``documented_readability``); a model always reads
            its own blocks and anything undocumented is unreadable. An unreadable block is
            always dropped (``model_binding_mismatch``), never a 400.
        prefix_check: ``runs_check(model) -> bool``, whether the requested model runs the
            prefix and order checks (provider rule 10). Default: the documented list
            (``documented_prefix_check``): Mythos 5.1 and models before Fable 5.1 do not (their
            requests report only model-check drops); any other id does.
        enforced: the account enforces the prefix check (an account created on or after
            2026-08-31). ``False``: a request without ``thinking.block_binding`` lets failing
            blocks reach the model and reports them as ``thinking_mismatch_allowed``.
        system_message_models: the models that accept mid-conversation ``role: "system"``
            messages. Default: the documented list ``SYSTEM_MESSAGE_MODELS``; pass a superset
            to extend it.
        organization: the organization requests are made under (settable later).
        end_user: the end user requests are made for (settable later).
        clock: seconds, monotonic, for the prompt cache's TTLs (default ``time.monotonic``;
            pass your own to move time in a test).
        cache_min_tokens: the shortest prefix the prompt cache stores (``_cache``).
        extra_models: model ids to serve beside the documented ones (``DOCUMENTED_MODELS``,
            their dated ids and ``-latest`` aliases, and the test ids ``claude-sim-<n>``);
            any other id is the API's 404 ``not_found_error``. Models named in
            ``model_families`` or ``system_message_models`` are served too.
        context_window: the most input tokens a request may carry (the API's 400 ``prompt is
            too long`` beyond it).
        compaction_models: the models that take on-demand compaction. Default: the documented
            list ``COMPACTION_MODELS``; pass a superset to extend it.

    Cache diagnostics (``_diagnose``): a request naming an earlier reply's id in
    ``diagnostics.previous_message_id`` gets back the first divergence from that request.

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
        readability: Readability | None = None,
        prefix_check: PrefixCheck | None = None,
        enforced: bool = True,
        system_message_models: Iterable[str] | None = None,
        organization: str = DEFAULT_ORGANIZATION,
        end_user: str = "",
        clock: Callable[[], float] | None = None,
        cache_min_tokens: int = DEFAULT_MIN_TOKENS,
        extra_models: Iterable[str] = (),
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        compaction_models: Iterable[str] | None = None,
    ) -> None:
        if not key:
            raise InvalidValue("key must be non-empty bytes")
        self._script: Script = script or default_script
        readable = readability or documented_readability
        if model_families:
            readable = _with_families(readable, dict(model_families))
        self._compactions = CompactionLedger()
        self._verifier = Verifier(
            bytes(key),
            readable,
            organization,
            end_user,
            prefix_check or documented_prefix_check,
            self._compactions.lookup,
        )
        self.enforced = enforced
        """Whether the account enforces the prefix check without ``block_binding``."""
        self.system_message_models = frozenset(
            SYSTEM_MESSAGE_MODELS if system_message_models is None else system_message_models
        )
        """Models that accept mid-conversation system messages (a frozenset of ids)."""
        self.extra_models = frozenset(
            [*extra_models, *(model_families or {}), *(system_message_models or ())]
        )
        """Model ids served beside the documented ones."""
        self.context_window = context_window
        """The most input tokens a request may carry."""
        self.compaction_models = frozenset(
            COMPACTION_MODELS if compaction_models is None else compaction_models
        )
        """Models that take on-demand compaction (a frozenset of ids)."""
        self._lock = threading.Lock()
        self._calls: list[Call] = []
        self._counts: list[Call] = []
        self._faults = Faults()
        self._issued = IssuedReplies()
        self.cache = PromptCache(clock or time.monotonic, min_tokens=cache_min_tokens)
        """The prompt cache (``_cache.PromptCache``): prefixes written at breakpoints."""
        self.diagnostics = DiagnosticsLedger()
        """Cache diagnostics (``_diagnose.DiagnosticsLedger``): a fingerprint per response id of
        every request that carried ``diagnostics``."""

    # Identity ----------------------------------------------------------------------------------

    @property
    def organization(self) -> str:
        """The organization requests are made under. Setting it makes every block produced
        under another one drop with ``organization_binding_mismatch`` (provider rule 11)."""
        return self._verifier.organization

    @organization.setter
    def organization(self, value: str) -> None:
        with self._lock:
            self._verifier = attrs.evolve(self._verifier, organization=str(value))

    @property
    def end_user(self) -> str:
        """The end user requests are made for. Setting it makes every block produced for another
        one drop with ``end_user_binding_mismatch`` (provider rule 11)."""
        return self._verifier.end_user

    @end_user.setter
    def end_user(self, value: str) -> None:
        with self._lock:
            self._verifier = attrs.evolve(self._verifier, end_user=str(value))

    # Records -----------------------------------------------------------------------------------

    @property
    def calls(self) -> list[Call]:
        """Every answered request with a parseable body, oldest first (a copy)."""
        with self._lock:
            return list(self._calls)

    @property
    def count_calls(self) -> list[Call]:
        """Every ``count_tokens`` request with a parseable body, oldest first (a copy)."""
        with self._lock:
            return list(self._counts)

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
        records it as its predecessor, so leaving the forced one out later fails it (a gap,
        ``prefix_binding_mismatch``), exactly as after a real drop.
        When a block also fails naturally, the reason first in the API's precedence
        (organization, end user, model, prefix) is reported. Calls accumulate until consumed:
        the next call that passes request validation takes them all (even if its binding check
        then refuses it); a call failed by ``fail_next`` does not.

        Raises:
            ValueError: ``reason`` is not a drop reason, or a path is malformed.
        """
        with self._lock:
            self._faults.force(paths, reason, predicate)

    def fail_compaction_next(self, n: int = 1, outcome: str = "compaction_unavailable") -> None:
        """Make the next ``n`` compaction requests that pass validation fail (provider rule 23):
        ``outcome`` is ``"compaction_unavailable"`` (a 529 ``overloaded_error``, ``error.details
        .error_code`` naming it) or a ``stop_reason`` of no summary (``"max_tokens"``,
        ``"model_context_window_exceeded"``, ``"tool_use"``, ``"refusal"``, ``"end_turn"``: a
        200 with empty content).

        Raises:
            ValueError: ``n`` is negative or ``outcome`` is none of these.
        """
        with self._lock:
            self._faults.fail_compactions(n, outcome)

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

        Nothing is recorded and no knob is consumed (forced drops do not apply). A block after
        a failing one is reported failing too (drop mode removes every later thinking block).

        Args:
            request: a body, or SDK keyword arguments (a ``betas`` entry is the beta header).

        Returns:
            One ``BlockCheck`` per signed block, in request order (``reason`` is ``None`` when
            the block verifies).

        Raises:
            InvalidRequest: the API would refuse the request (its message says why), including
                an empty, malformed or foreign signature, or altered thinking in an open
                tool loop (provider rule 6).
        """
        body, betas = split_betas(request)
        validate_request(body, betas, self.system_message_models)
        with self._lock:
            self._issued.check(body)
        return list(walk(self._verifier, body, mode=DROP_MODE).checks)

    def verify_block(
        self, request: Mapping[str, Any], i: int, j: int, block: SignedBlock
    ) -> str | None:
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
        wire = to_wire(block)
        if wire.get("type") not in SIGNED_TYPES:
            raise InvalidValue(f"only thinking blocks are bound; got a {wire.get('type')!r} block")
        messages = list(body.get("messages", []))
        if not 0 <= i < len(messages):
            raise IndexError(f"message index {i} out of range (0..{len(messages) - 1})")
        content = content_blocks(messages[i].get("content"))
        if not 0 <= j <= len(content):
            raise IndexError(f"content index {j} out of range (0..{len(content)})")
        content.insert(j, wire)
        messages[i] = {**messages[i], "content": content}
        body = {**body, "messages": messages}
        walked = walk(self._verifier, body, mode=DROP_MODE, stop_at=(i, j))
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
        dropped: tuple[BlockCheck, ...] = ()
        unoffered: tuple[str, ...] = ()
        endpoint = path.split("?")[0]
        try:
            if method != "POST" or endpoint not in (MESSAGES_PATH, COUNT_PATH):
                raise NotFound(method, path)
            if VERSION_HEADER not in headers:
                raise InvalidRequest(f"{VERSION_HEADER}: header is required")
            parsed = parse_body(body)
            betas = betas_of(headers)
            if endpoint == COUNT_PATH:
                response = self._count(parsed, betas)
                reply = json_reply(200, response, request_id)
            else:
                reply, response, dropped, unoffered = self._answer(parsed, betas, request_id)
        except SimulatedApiError as err:
            logger.info(
                "simulator_refused", status=err.status, error=err.error_type, why=err.message
            )
            reply, response, dropped, unoffered = error_reply(err, request_id), err.body(), (), ()
        except Exception:  # a simulator bug: answer like the API would, never crash the caller
            logger.exception("simulator_failed", path=path)
            bug = SimulatedApiError(500, "api_error", "internal simulator error (see its log)")
            reply, response, dropped, unoffered = error_reply(bug, request_id), bug.body(), (), ()
        if parsed is not None:
            call = Call(
                parsed,
                tuple(sorted(betas)),
                reply.status,
                response,
                parsed.get("stream") is True,
                dropped,
                unoffered,
            )
            with self._lock:
                (self._counts if endpoint == COUNT_PATH else self._calls).append(call)
        return reply

    def _count(self, body: dict[str, Any], betas: frozenset[str]) -> dict[str, Any]:
        def check_issued(checked: dict[str, Any]) -> None:
            with self._lock:
                self._issued.check(checked)

        counted = answer_count(
            body,
            betas,
            verifier=self._verifier,
            enforced=self.enforced,
            system_message_models=self.system_message_models,
            check_issued=check_issued,
        )
        check_model(body["model"], self.extra_models)
        return counted

    def _answer(
        self, body: dict[str, Any], betas: frozenset[str], request_id: str
    ) -> tuple[HttpReply, dict[str, Any], tuple[BlockCheck, ...], tuple[str, ...]]:
        with self._lock:
            failure = self._faults.take_failure()
        if failure is not None:
            raise failure
        validate_request(body, betas, self.system_message_models)
        check_model(body["model"], self.extra_models)
        check_window(count_input(body), self.context_window)
        if "compaction" in body:
            check_request(body, betas, self.compaction_models)
        with self._lock:
            knobs = self._faults.take_knobs()
            self._issued.check(body)
            verifier = self._verifier
            outcome = self._faults.take_compaction_outcome() if "compaction" in body else None
        if "compaction" in body:
            return self._compact(body, betas, request_id, verifier, (outcome, knobs.forced))
        result = answer(
            body,
            betas,
            verifier=verifier,
            enforced=self.enforced,
            script=self._script,
            knobs=knobs,
            new_id=new_id,
        )
        positions = items(body, result.view, organization=verifier.organization)
        shape = (
            fingerprint(body, {check.path for check in result.walk.dropped})
            if DIAGNOSTICS in body
            else None
        )
        with self._lock:
            self._issued.remember(result.message["content"])
            result.message["usage"].update(self.cache.process(positions).usage_fields())
            if shape is not None:
                previous = body[DIAGNOSTICS].get(PREVIOUS_MESSAGE_ID)
                result.message[DIAGNOSTICS] = self.diagnostics.answer(
                    verifier.organization, previous, result.message["id"], shape
                )
        dropped = result.walk.dropped
        unoffered = result.unoffered_calls
        if unoffered:
            logger.info("simulator_unoffered_tool_called", tools=list(unoffered))
        if dropped:
            logger.info(
                "simulator_thinking_dropped",
                paths=[check.path_text for check in dropped],
                reasons=[check.reason for check in dropped],
            )
        return framed_reply(body, result.message, request_id), result.message, dropped, unoffered

    def _compact(
        self,
        body: dict[str, Any],
        betas: frozenset[str],
        request_id: str,
        verifier: Verifier,
        knobs: tuple[str | None, tuple[ForcedDrop, ...]],
    ) -> tuple[HttpReply, dict[str, Any], tuple[BlockCheck, ...], tuple[str, ...]]:
        """Answer a compaction request that passed ``check_request`` (provider rule 23):
        ``knobs`` is the scripted outcome and the forced drops."""
        outcome, forced = knobs
        mode = behavior(body, enforced=self.enforced)
        walked = walk(verifier, body, mode=mode, forced=forced)
        report = transformations(walked) if BINDING_BETA in betas else None
        done = compaction_reply(
            body,
            walked,
            verifier=verifier,
            outcome=outcome,
            input_tokens=count_input(body, walked.messages),
            new_id=new_id,
            transformations=report,
        )
        positions = items(body, walked.messages, organization=verifier.organization)
        with self._lock:
            usage = self.cache.process(positions)
        entry = done.message["usage"]["iterations"][0]
        entry.update({k: v for k, v in usage.usage_fields().items() if k in entry})
        entry["cache_creation"] = usage.usage_fields()["cache_creation"]
        if done.nonce is not None and done.coverage is not None:
            self._compactions.remember(done.nonce, done.coverage)
        logger.info("simulator_compacted", stop_reason=done.message["stop_reason"])
        return framed_reply(body, done.message, request_id), done.message, walked.dropped, ()

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
            self._issued._check()
            self.cache._check()
            self.diagnostics._check()
            self._compactions._check()
            assert all(isinstance(call.response, dict) for call in self._calls)
