"""OpenTelemetry for this library: GenAI spans, ``context_manager.*`` span events, metrics.

Behind the ``otel`` extra (``opentelemetry-api`` only). Off unless ``tracer_provider=`` is given
to ``ContextManager.open`` or ``Runtime``; off, nothing here imports ``opentelemetry``.
"""

from __future__ import annotations

from ._content import capture_from_environment
from ._span import FAILED_EVENT, NULL_SPAN, SpanHandle
from ._watch import OFF, CallSpan, Telemetry, telemetry_for

__all__ = [
    "FAILED_EVENT",
    "NULL_SPAN",
    "OFF",
    "CallSpan",
    "SpanHandle",
    "Telemetry",
    "capture_from_environment",
    "telemetry_for",
]
