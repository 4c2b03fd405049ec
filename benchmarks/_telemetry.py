"""Telemetry's cost (issue 32): a steady compile with OpenTelemetry tracing on, over one without.

One history, its steady steps alternating between tracing on (the real SDK: a ``TracerProvider``
with a ``SimpleSpanProcessor`` into a discarding exporter, and a ``MeterProvider``) and off, so
both sides of the ratio see the same window and the same machine load. Only the compile is timed
(the span, its attributes and events and the export call are inside it).
``python -m benchmarks --only telemetry [--quick]`` runs this scenario alone on a history of its
own (SQLite, 4,000 messages, the suite's window).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from context_manager import SQLiteStore, Window
from context_manager._telemetry import OFF, Telemetry

from ._history import History, mean_message_tokens
from ._quiet import quiet_logging
from ._scenarios import steady_step
from ._timing import median, settle, spread

TELEMETRY_MAX = 1.5
"""Steady compile traced over untraced (issue 32)."""


def _traced() -> tuple[Telemetry, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Discard(SpanExporter):
        """An exporter that sends nowhere: the cost measured is the library's and the SDK's."""

        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Discard()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(tracer_provider, MeterProvider()), exporter


def telemetry_overhead(history: History, repeats: int) -> dict[str, Any]:
    """Median steady compile on ``history`` with tracing on and off (alternating), and their
    ratio; ``history``'s context is left as it was (tracing off)."""
    traced, exporter = _traced()
    samples: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for telemetry in (traced, OFF):  # warm both before anything is timed
            history.cm.telemetry = telemetry
            steady_step(history)
        settle()
        for _ in range(repeats):
            history.cm.telemetry = traced
            samples["on"].append(steady_step(history))
            history.cm.telemetry = OFF
            samples["off"].append(steady_step(history))
    finally:
        history.cm.telemetry = OFF
    on, off = median(samples["on"]), median(samples["off"])
    return {
        "telemetry_overhead": on / off,
        "steady_traced": on,
        "steady_plain": off,
        "messages": history.count,
        "spans_exported": exporter.spans,
        "spread": {side: spread(values) for side, values in samples.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print this scenario's figures alone (``--quick``: fewer repetitions); exit 1 when the
    target is missed."""
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    quiet_logging()
    seed = 20_260_801
    window = Window(max_tokens=int(mean_message_tokens(seed) * 2_000))
    with tempfile.TemporaryDirectory(prefix="cm-bench-") as folder:
        store = SQLiteStore(Path(folder) / "history.db")
        history = History(store, "ada", window, seed=seed)
        history.grow_to(4_000)
        figures = telemetry_overhead(history, 61 if quick else 201)
        store.close()
    print(f"telemetry_overhead {figures['telemetry_overhead']:.3f} (target <= {TELEMETRY_MAX})")
    print(
        f"steady compile traced {figures['steady_traced'] * 1e6:.0f} us, "
        f"plain {figures['steady_plain'] * 1e6:.0f} us, at {figures['messages']:,} messages"
    )
    return 0 if figures["telemetry_overhead"] <= TELEMETRY_MAX else 1
