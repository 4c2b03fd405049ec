"""``--otel``: the command line's OpenTelemetry, from the flag or the standard ``OTEL_*`` variables.

``--otel console`` prints every span (and, at exit, the metrics) with the SDK's console
exporters on stderr, so stdout stays the transcript. Without the flag, tracing is on only when
the OpenTelemetry SDK is installed and the environment asks for it: a global provider already set
(``opentelemetry-instrument``), or ``OTEL_TRACES_EXPORTER`` naming exporters the SDK knows
(``console``, or ``otlp`` with its package installed; ``OTEL_METRICS_EXPORTER`` likewise). The
SDK then reads the rest (``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_ENDPOINT``, sampling...).
``OTEL_SDK_DISABLED=true`` turns it off. Nothing here imports ``opentelemetry`` when it is off.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, TextIO

import attrs

from context_manager._telemetry import Telemetry, telemetry_for

from ._db import CliError

OTEL_CHOICES = ("console",)
"""What ``--otel`` accepts."""

TRACES_VARIABLE = "OTEL_TRACES_EXPORTER"
METRICS_VARIABLE = "OTEL_METRICS_EXPORTER"
DISABLED_VARIABLE = "OTEL_SDK_DISABLED"


@attrs.frozen
class Tracing:
    """What the runtime is given, and what flushes it at exit."""

    tracer_provider: Any = None
    meter_provider: Any = None
    close: Callable[[], None] = lambda: None

    def telemetry(self) -> Telemetry:
        """The ``Telemetry`` of these providers (off when tracing is)."""
        return telemetry_for(self.tracer_provider, self.meter_provider)


def _names(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip() and v.strip() != "none"]


def _exporter(group: str, name: str) -> Any:
    found = list(entry_points(group=group, name=name))
    if not found:
        raise CliError(
            f"{group.removeprefix('opentelemetry_').replace('_', ' ')} {name!r} is not "
            f"installed (for otlp: pip install opentelemetry-exporter-otlp)"
        )
    return found[0].load()


def _providers(spans: list[Any], metrics: list[Any]) -> Tracing:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    tracer_provider = TracerProvider()
    for exporter, simple in spans:
        processor = SimpleSpanProcessor if simple else BatchSpanProcessor
        tracer_provider.add_span_processor(processor(exporter))
    readers = [PeriodicExportingMetricReader(m, export_interval_millis=60_000) for m in metrics]
    meter_provider = MeterProvider(metric_readers=readers)

    def close() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return Tracing(tracer_provider, meter_provider, close)


def _console(err: TextIO) -> Tracing:
    try:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError as missing:
        raise CliError(
            "--otel console needs the OpenTelemetry SDK: pip install opentelemetry-sdk"
        ) from missing
    return _providers([(ConsoleSpanExporter(out=err), True)], [ConsoleMetricExporter(out=err)])


def _from_environment(environ: Mapping[str, str]) -> Tracing:
    if environ.get(DISABLED_VARIABLE, "").strip().lower() == "true":
        return Tracing()
    from opentelemetry import trace  # the API: anthropic has imported it already

    if not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return Tracing(tracer_provider=True)  # the application (or its launcher) set one
    spans = _names(environ.get(TRACES_VARIABLE))
    if not spans:
        return Tracing()
    try:
        import opentelemetry.sdk.trace  # noqa: F401  (only whether it is there)
    except ImportError:  # no SDK: the variables are for another process
        return Tracing()
    exporters = [(_exporter("opentelemetry_traces_exporter", s)(), False) for s in spans]
    metrics = [
        _exporter("opentelemetry_metrics_exporter", m)()
        for m in _names(environ.get(METRICS_VARIABLE))
    ]
    return _providers(exporters, metrics)


def tracing_for(
    choice: str | None, environ: Mapping[str, str], err: TextIO | None = None
) -> Tracing:
    """The tracing ``--otel choice`` (or, without it, the environment) asks for.

    Raises:
        CliError: the SDK or a named exporter is not installed.
    """
    if choice == "console":
        return _console(err or sys.stderr)
    return _from_environment(environ)
