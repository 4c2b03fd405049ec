"""``Telemetry``: this library's spans, span events and metrics over the OpenTelemetry API.

One home for the tracer, the meter and the instruments. ``Telemetry.off()`` (the default
everywhere) imports nothing and every hook returns at once; ``Telemetry(...)`` imports
``opentelemetry`` (the API only) when it is made. Invariant: no hook raises. A span processor,
an exporter or a metric reader that fails is logged (``telemetry_failed``) and the compile, call
or turn it observed goes on. Message text is recorded only with content capture on, reasoning
text never (see ``_content``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from context_manager._binding._drops import PlacedDrops
from context_manager._model._content import Block, TextBlock, ToolResultBlock, ToolUseBlock
from context_manager._model._errors import TelemetryUnavailable
from context_manager._model._messages import (
    REASONING_LOSS_KIND,
    MessageId,
    MessageMeta,
    StoredMessage,
    line_form,
)
from context_manager._model._results import CompileResult
from context_manager._model._usage import usage_of

from . import _chat, _content, _events
from . import _names as n
from ._span import NULL_SPAN, Attributes, SpanHandle, error_type, failed

INSTRUMENTATION = "context_manager"
"""The instrumentation scope name of every span and metric."""


def _version() -> str:
    try:
        return metadata.version("context-manager")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0"


class CallSpan(SpanHandle):
    """A model call's span: records the conventions' duration and token metrics when it ends."""

    __slots__ = ("_attributes", "_started", "_watch")

    def __init__(
        self, watch: Telemetry, handle: SpanHandle, attributes: dict[str, Any], started: int
    ) -> None:
        super().__init__(handle._span, handle._token)
        self._watch = watch
        self._attributes = attributes
        self._started = started

    def answered(self, message: object, agent: str) -> None:
        """The reply is in: its model, id, finish reason and usage go on the span and metrics."""
        try:
            response = _chat.response_attributes(message, self._watch.capture_content)
            self._attributes.update(response)
            self.set(response)
            self._watch._usage(message, self._attributes, agent)
        except Exception as err:
            failed("answered", err)

    def close(self, err: BaseException | None) -> None:
        if err is not None:
            self._attributes[n.ERROR_TYPE] = error_type(err)
        self._watch._duration((time.time_ns() - self._started) / 1e9, self._attributes)
        super().close(err)


class PendingSpan(SpanHandle):
    """A span made only when it ends, backdated to when it began: what is set on it meanwhile is
    kept here and given to the SDK in one go (one attribute pass, no context switch). For a
    span nothing is started inside: the compile's."""

    __slots__ = ("_kept", "_name", "_since", "_watch")

    def __init__(self, watch: Telemetry, name: str, attributes: Attributes) -> None:
        super().__init__()
        self._watch = watch
        self._name = name
        self._since = time.time_ns()
        self._kept: tuple[dict[str, Any], list[tuple[str, Attributes, int]]] = (
            dict(attributes),
            [],
        )

    @property
    def recording(self) -> bool:
        return True

    def set(self, attributes: Attributes) -> None:
        self._kept[0].update((k, v) for k, v in attributes.items() if v is not None)

    def event(self, name: str, attributes: Attributes) -> None:
        self._kept[1].append((name, attributes, time.time_ns()))

    def close(self, err: BaseException | None) -> None:
        attributes, events = self._kept
        try:
            from opentelemetry import trace

            span = self._watch._tracer.start_span(
                self._name,
                kind=trace.SpanKind.INTERNAL,
                attributes=attributes,
                start_time=self._since,
            )
            for name, event_attributes, at in events:
                span.add_event(name, dict(event_attributes), timestamp=at)
        except Exception as failure:
            failed("start_span", failure)
            return
        handle = SpanHandle(span)
        if err is not None:
            handle.fail(err)
        handle.end()


class Telemetry:
    """Spans, span events and metrics for one ``Runtime`` or ``ContextManager``.

    Args:
        tracer_provider: an OpenTelemetry ``TracerProvider``; ``None``: the global one.
        meter_provider: a ``MeterProvider``; ``None``: the global one.
        capture_content: record message text (``gen_ai.input.messages`` and the like); ``None``
            reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. Reasoning text is
            never recorded.

    Raises:
        TelemetryUnavailable: ``opentelemetry-api`` is not installed.
    """

    enabled: bool
    capture_content: bool

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        capture_content: bool | None = None,
    ) -> None:
        try:
            from opentelemetry import metrics, trace
        except ImportError as err:
            raise TelemetryUnavailable() from err
        self.enabled = True
        self.capture_content = (
            _content.capture_from_environment() if capture_content is None else capture_content
        )
        tracers = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        meters = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        self._tracer = tracers.get_tracer(INSTRUMENTATION, _version())
        self._make_instruments(meters.get_meter(INSTRUMENTATION, _version()))
        self._cache: dict[str, tuple[int, int]] = {}

    def _make_instruments(self, meter: Any) -> None:
        self._tokens = meter.create_histogram(
            n.TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self._durations = meter.create_histogram(
            n.OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self._strips = meter.create_counter(
            n.STRIPS_METRIC, unit="{strip}", description="Thinking strips, by cause."
        )
        self._drops = meter.create_counter(
            n.DROPS_METRIC,
            unit="{block}",
            description="Thinking blocks the provider dropped, by reason and placement.",
        )
        self._notices = meter.create_counter(
            n.NOTICES_METRIC, unit="{notice}", description="[reasoning] notices stored, by form."
        )
        self._share = meter.create_gauge(
            n.CACHE_READ_SHARE_METRIC,
            unit="1",
            description="Share of an agent's input tokens read from the prompt cache so far.",
        )

    @classmethod
    def off(cls) -> Telemetry:
        """Telemetry that records nothing and imports nothing."""
        off = cls.__new__(cls)
        off.enabled = False
        off.capture_content = False
        return off

    # spans
    def start(
        self, name: str, kind: str, attributes: Attributes, *, since: int | None = None
    ) -> SpanHandle:
        """Start span ``name`` (``kind``: ``"client"`` or ``"internal"``) as the current one,
        backdated to ``since`` (``time.time_ns()``) when given."""
        if not self.enabled:
            return NULL_SPAN
        try:
            from opentelemetry import context, trace

            span_kind = trace.SpanKind.CLIENT if kind == "client" else trace.SpanKind.INTERNAL
            span = self._tracer.start_span(
                name, kind=span_kind, attributes=dict(attributes), start_time=since
            )
        except Exception as err:
            failed("start_span", err)
            return NULL_SPAN
        try:
            token = context.attach(trace.set_span_in_context(span))
        except Exception as err:
            failed("attach", err)
            token = None
        return SpanHandle(span, token)

    def _here(self, operation: str, events: Sequence[tuple[str, Attributes]]) -> None:
        """Add ``events`` to the current span, or to a short ``operation`` span of their own."""
        if not events:
            return
        try:
            from opentelemetry import trace

            current = trace.get_current_span()
            if current.is_recording():
                for name, attributes in events:
                    current.add_event(name, dict(attributes))
                return
        except Exception as err:
            failed("add_event", err)
            return
        with self.start(operation, "internal", {}) as span:
            for name, attributes in events:
                span.event(name, attributes)

    # the context manager's hooks
    def compiling(self, dry: bool) -> SpanHandle:
        """The ``compile`` span (internal), made when the compile returns and backdated to its
        start (never the current span: what a compile reports goes on it directly, which keeps
        a steady compile's cost down)."""
        if not self.enabled:
            return NULL_SPAN
        return PendingSpan(self, n.COMPILE_SPAN, {n.COMPILE_DRY: dry})

    def compiled(
        self, span: SpanHandle, result: CompileResult, read: Callable[[MessageId], StoredMessage]
    ) -> None:
        """A compile returned: its attributes, its strip and the head changes it appended."""
        if not self.enabled:
            return
        try:
            span.set(_events.compile_attributes(result))
            strip = result.thinking_strip
            if strip is not None and not result.dry:
                span.event(n.STRIP_EVENT, _events.strip_attributes(strip))
                self._strips.add(1, {n.CAUSE: strip.cause})
            for message_id in result.appended:
                span.event(n.HEAD_CHANGE_EVENT, _events.head_change_attributes(read(message_id)))
            for message_id in result.shed:
                span.event(
                    n.RELEASE_EVENT,
                    _events.release_attributes(result.branch, message_id, None, "shed"),
                )
        except Exception as err:
            failed("compiled", err)

    def drops_placed(
        self, placed: PlacedDrops, releases: Sequence[tuple[MessageId, int]], branch: str
    ) -> None:
        """A response's drops were placed: one event per block, and one per release."""
        if not self.enabled:
            return
        try:
            events: list[tuple[str, Attributes]] = []
            for drop in _events.drop_events(placed):
                events.append((n.DROP_EVENT, {**drop, n.BRANCH: branch}))
                self._drops.add(1, {n.REASON: drop[n.REASON], n.PLACED: drop[n.PLACED]})
            events += [
                (n.RELEASE_EVENT, _events.release_attributes(branch, mid, block, "drop"))
                for mid, block in releases
            ]
            self._here("place_drops", events)
        except Exception as err:
            failed("drops_placed", err)

    def released(self, branch: str, message_id: MessageId, from_block: int) -> None:
        """The host released a reply's thinking (``release_thinking``)."""
        if not self.enabled:
            return
        attributes = _events.release_attributes(branch, message_id, from_block, "host")
        self._here("release_thinking", [(n.RELEASE_EVENT, attributes)])

    def stored(
        self, branch: str, message_id: MessageId, meta: MessageMeta, blocks: Sequence[Block]
    ) -> None:
        """A message was stored: a ``[reasoning]`` notice is an event (its form, never its text)."""
        if not self.enabled or meta.kind != REASONING_LOSS_KIND:
            return
        try:
            text = next((b.text for b in blocks if isinstance(b, TextBlock)), "")
            form = line_form(text)
            self._notices.add(1, {n.FORM: form or "other"})
            attributes = _events.notice_attributes(branch, message_id, form)
            self._here("store_notice", [(n.NOTICE_EVENT, attributes)])
        except Exception as err:
            failed("stored", err)

    # the runtime's hooks
    def turn(self, agent: str, namespace: str, branch: str) -> SpanHandle:
        """The ``invoke_agent {agent}`` span of one turn (internal: the agent runs here)."""
        if not self.enabled:
            return NULL_SPAN
        attributes = {
            n.OPERATION_NAME: n.OP_INVOKE_AGENT,
            n.PROVIDER_NAME: n.PROVIDER,
            n.AGENT_NAME: agent,
            n.CONVERSATION_ID: _chat.conversation_id(namespace, branch),
        }
        return self.start(f"{n.OP_INVOKE_AGENT} {agent}", "internal", attributes)

    def call(self, result: CompileResult, *, since: int | None = None) -> SpanHandle:
        """The ``chat {model}`` span (client) of one model call of ``result``'s request; a
        host that sees the call only once it is over (the managed client) passes when it began
        as ``since`` (``time.time_ns()``)."""
        if not self.enabled:
            return NULL_SPAN
        try:
            attributes = _chat.request_attributes(result, self.capture_content)
        except Exception as err:
            failed("call", err)
            return NULL_SPAN
        started = time.time_ns() if since is None else since
        name = f"{n.OP_CHAT} {attributes[n.REQUEST_MODEL]}"
        handle = self.start(name, "client", attributes, since=started)
        return CallSpan(self, handle, attributes, started)

    def tool(self, use: ToolUseBlock) -> SpanHandle:
        """The ``execute_tool {name}`` span (internal) of one tool run."""
        if not self.enabled:
            return NULL_SPAN
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.OP_EXECUTE_TOOL,
            n.TOOL_NAME: use.name,
            n.TOOL_CALL_ID: use.id,
            n.TOOL_TYPE: "function",
        }
        if self.capture_content:
            attributes[n.TOOL_CALL_ARGUMENTS] = _content.as_json(dict(use.input))
        return self.start(f"{n.OP_EXECUTE_TOOL} {use.name}", "internal", attributes)

    def tool_done(self, span: SpanHandle, result: ToolResultBlock) -> None:
        """A tool answered: an error result marks the span; the result text only with capture."""
        if not span.recording:
            return
        if result.is_error:
            span.set({n.ERROR_TYPE: "tool_error"})
        if self.capture_content:
            span.set({n.TOOL_CALL_RESULT: _content.as_json(result.content)})

    # metrics
    def _usage(self, message: object, attributes: dict[str, Any], agent: str) -> None:
        usage = usage_of(message)
        if usage is None:
            return
        base = _chat.metric_attributes(attributes)
        self._tokens.record(usage.total_input, {**base, n.TOKEN_TYPE: "input"})
        self._tokens.record(usage.output_tokens, {**base, n.TOKEN_TYPE: "output"})
        read, total = self._cache.get(agent, (0, 0))
        read, total = read + usage.cache_read_input_tokens, total + usage.total_input
        self._cache[agent] = (read, total)
        if total:
            self._share.set(read / total, {n.AGENT_NAME: agent})

    def _duration(self, seconds: float, attributes: dict[str, Any]) -> None:
        try:
            self._durations.record(seconds, _chat.metric_attributes(attributes))
        except Exception as err:
            failed("duration", err)


OFF = Telemetry.off()
"""The telemetry of everything made without ``tracer_provider=``."""


def telemetry_for(tracer_provider: object, meter_provider: object = None) -> Telemetry:
    """The ``Telemetry`` the ``tracer_provider=`` switch asks for.

    ``None`` or ``False``: off (nothing imported). ``True``: the application's global providers.
    A ``Telemetry``: itself (shared, e.g. by a runtime's agents). Anything else: a
    ``TracerProvider`` (with ``meter_provider``, or the global one, for the metrics).

    Raises:
        TelemetryUnavailable: on is asked for and ``opentelemetry-api`` is not installed.
    """
    if tracer_provider is None or tracer_provider is False:
        return OFF
    if isinstance(tracer_provider, Telemetry):
        return tracer_provider
    if tracer_provider is True:
        return Telemetry(None, meter_provider)
    return Telemetry(tracer_provider, meter_provider)
