"""One span of this library's, made safe: nothing an exporter or a span processor raises escapes.

``SpanHandle`` wraps an OpenTelemetry span that is current while the handle is open; the null
handle (``NULL_SPAN``, telemetry off) does nothing at all. Every method catches and logs, so a
failing processor or exporter never fails a compile, a call or a turn. A handle is entered and
left in one task (its context token is detached where it was attached).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeAlias

from context_manager._model._log import library_logger

from ._names import ERROR_TYPE

log = library_logger("context_manager.telemetry")

AttributeValue: TypeAlias = str | bool | int | float | Sequence[str] | Sequence[int]
Attributes: TypeAlias = Mapping[str, AttributeValue]

FAILED_EVENT = "telemetry_failed"
"""The structured event (warning) logged when the OpenTelemetry SDK raises inside a hook."""


def failed(what: str, err: BaseException) -> None:
    """Log that telemetry failed at ``what``; the operation it observed goes on."""
    log.warning(FAILED_EVENT, at=what, error=repr(err))


def error_type(err: BaseException) -> str:
    """``error.type`` for an exception: the HTTP status when it has one, else its class name.

    >>> error_type(ValueError("x"))
    'ValueError'
    """
    status = getattr(err, "status_code", None)
    return str(status) if isinstance(status, int) else type(err).__name__


class SpanHandle:
    """A started span, current until ``end`` (or the ``with`` block) closes it."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Any = None, token: object = None) -> None:
        self._span = span
        self._token = token

    @property
    def recording(self) -> bool:
        """Whether attributes and events set on it go anywhere."""
        return self._span is not None

    def set(self, attributes: Attributes) -> None:
        """Set attributes (values of ``None`` are left out)."""
        if self._span is None:
            return
        try:
            self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        except Exception as err:
            failed("set_attributes", err)

    def event(self, name: str, attributes: Attributes) -> None:
        """Add a span event."""
        if self._span is None:
            return
        try:
            self._span.add_event(name, dict(attributes))
        except Exception as err:
            failed("add_event", err)

    def answered(self, message: object, agent: str) -> None:
        """A model call's reply is in (``CallSpan`` records it; any other span ignores it)."""

    def fail(self, err: BaseException) -> None:
        """Mark the span failed with ``err`` (``error.type`` and an error status)."""
        if self._span is None:
            return
        try:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute(ERROR_TYPE, error_type(err))
            self._span.set_status(Status(StatusCode.ERROR, str(err)[:200]))
        except Exception as failure:
            failed("set_status", failure)

    def end(self) -> None:
        """End the span and make its parent current again (twice is harmless)."""
        span, token, self._span, self._token = self._span, self._token, None, None
        if span is None:
            return
        try:
            if token is not None:
                from opentelemetry import context

                context.detach(token)  # type: ignore[arg-type]
        except Exception as err:
            failed("detach", err)
        try:
            span.end()
        except Exception as err:
            failed("end", err)

    def __enter__(self) -> SpanHandle:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(err)

    def close(self, err: BaseException | None) -> None:
        """End the span, failed with ``err`` when the block it covered raised."""
        if err is not None:
            self.fail(err)
        self.end()


NULL_SPAN = SpanHandle()
"""The handle of telemetry that is off: every method returns at once."""
