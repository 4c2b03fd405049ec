"""Tracing a resident agent with OpenTelemetry: the spans and events of two turns, on stdout.

Run it (``pip install '.[otel]' opentelemetry-sdk``): the SDK's console exporter
prints one JSON object per span as it ends. Turn one answers; then a tool is added (appended as a
head change) and the simulator drops turn one's reasoning on the next call (a test knob: a
prefix mismatch); turn two calls ``read_log``. ``docs/tracing.md`` shows the output; among
its lines::

    "name": "invoke_agent ada",
    "name": "context_manager.thinking_drop",
    "name": "execute_tool read_log",
"""

import asyncio
from typing import Any

import attrs
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from context_manager import Head, MemoryStore
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import PREFIX_MISMATCH, Simulator

provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))

READ_LOG = {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
GREP = {"name": "grep", "description": "Search the log.", "input_schema": {"type": "object"}}


def script(request: dict[str, Any]) -> list[Any]:
    """The simulator's answers: call read_log when asked about the log, then answer."""
    last = [m for m in request["messages"] if m["role"] != "system"][-1]["content"]
    if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
        return [{"type": "thinking", "thinking": "The log is in."}, "All quiet."]
    if "log" in str(last):
        return [
            {"type": "thinking", "thinking": "I should look."},
            {"type": "tool_use", "name": "read_log", "input": {}},
        ]
    return [{"type": "thinking", "thinking": "A greeting."}, "Hello."]


async def main() -> None:
    sim = Simulator(script=script)
    runtime = Runtime(sim.client(), MemoryStore(), tracer_provider=provider)
    head = Head(
        model="claude-opus-5-5",
        system="You are Ada.",
        tools=[READ_LOG],
        settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
    )
    ada = runtime.register(
        Agent("ada", head, tools={"read_log": lambda _: "no errors"}, reasoning=False)
    )
    await ada.run_turn("Hello, Ada.")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG, GREP])  # appended as a head change
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    await ada.run_turn("Please check the log.")


asyncio.run(main())
