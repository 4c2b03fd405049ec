"""OpenTelemetry: GenAI spans, ``context_manager.*`` span events and metrics, with the real SDK.

Every test reads what an operator's backend would receive (``InMemorySpanExporter``,
``InMemoryMetricReader``): span names, kinds, parents, attributes and events by value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anthropic
import attrs
import pytest
from helpers import (
    FAST_RETRY,
    GREP_TOOL,
    PROBE_HEAD,
    READ_LOG_TOOL,
    calling_script,
    cli,
    framework_params,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.trace import SpanKind, StatusCode
from structlog.testing import capture_logs

from context_manager import CompileResult, ContextManager, Fold, MemoryStore, TextBlock, Window
from context_manager._telemetry import FAILED_EVENT, Telemetry, capture_from_environment
from context_manager._telemetry import _names as names
from context_manager.adapters import ManagedAsyncAnthropic
from context_manager.runtime import Agent, Runtime, TurnResult
from context_manager.simulator import PREFIX_MISMATCH, Simulator

ROOT = Path(__file__).resolve().parents[2]
HEAD = attrs.evolve(PROBE_HEAD, tools=[READ_LOG_TOOL])
"""A model that takes mid-conversation system messages: a tool change is appended."""
TOOL_OUTPUT = "x" * 400
"""What ``read_log`` returns: long enough that the next compile folds."""
THOUGHT = "considering"
"""The thinking text ``calling_script`` gives every reply."""


@attrs.define
class Otel:
    """An SDK tracer and meter provider recording in memory."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def metrics(self) -> dict[str, Any]:
        got = self.reader.get_metrics_data()
        assert got is not None
        data = json.loads(got.to_json())
        return {
            metric["name"]: metric
            for resource in data["resource_metrics"]
            for scope in resource["scope_metrics"]
            for metric in scope["metrics"]
        }


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def runtime(sim: Simulator, otel: Otel | None, **telemetry: Any) -> Runtime:
    if otel is None:
        return Runtime(sim.client(), MemoryStore(), retry=FAST_RETRY)
    return Runtime(
        sim.client(),
        MemoryStore(),
        retry=FAST_RETRY,
        tracer_provider=Telemetry(otel.tracer_provider, otel.meter_provider, **telemetry),
    )


async def two_turns(rt: Runtime, sim: Simulator) -> tuple[Agent, TurnResult, TurnResult]:
    """Turn 1 answers; then the tools change, the provider drops turn 1's reasoning on the next
    call, and turn 2 runs a tool round whose long result makes the following compile fold."""
    fold = Fold(lambda covered: "Ada was asked to read the log.", trigger_tokens=250)
    ada = rt.register(Agent("ada", HEAD, tools={"read_log": lambda _: TOOL_OUTPUT}, strategy=fold))
    first = await ada.run_turn("Hello there, Ada.")
    ada.head = attrs.evolve(ada.head, tools=[READ_LOG_TOOL, GREP_TOOL])
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    second = await ada.run_turn("please use tool")
    return ada, first, second


def shape(spans: Sequence[ReadableSpan]) -> list[tuple[str, SpanKind, str | None]]:
    """Each span's name, kind and parent's name, in the order they ended."""
    by_id = {s.context.span_id: s.name for s in spans}
    return [(s.name, s.kind, by_id.get(s.parent.span_id) if s.parent else None) for s in spans]


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


async def test_a_turn_with_a_tool_round_a_head_change_a_drop_and_a_fold_gives_these_spans(
    otel: Otel,
) -> None:
    sim = Simulator(script=calling_script())
    ada, first, second = await two_turns(runtime(sim, otel), sim)
    spans = otel.spans()
    internal, client = SpanKind.INTERNAL, SpanKind.CLIENT
    chat = "chat claude-opus-5-5"
    assert shape(spans) == [
        ("compile", internal, "invoke_agent ada"),
        (chat, client, "invoke_agent ada"),
        ("invoke_agent ada", internal, None),
        ("compile", internal, "invoke_agent ada"),
        (chat, client, "invoke_agent ada"),
        ("execute_tool read_log", internal, "invoke_agent ada"),
        ("compile", internal, "invoke_agent ada"),
        (chat, client, "invoke_agent ada"),
        ("invoke_agent ada", internal, None),
    ]
    branch = ada.context.current_branch_key()
    conversation = f"ada/{branch}"
    turn_one, compile_head, call_drop, tool, compile_fold, call_last, turn_two = (
        spans[2],
        spans[3],
        spans[4],
        spans[5],
        spans[6],
        spans[7],
        spans[8],
    )
    assert dict(turn_one.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.agent.name": "ada",
        "gen_ai.conversation.id": conversation,
    }
    usage = second.usage[0]
    response = sim.responses[1]
    assert dict(call_drop.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-opus-5-5",
        "gen_ai.request.max_tokens": 2048,
        "gen_ai.request.stream": True,
        "gen_ai.conversation.id": conversation,
        "context_manager.compile.id": dict(compile_head.attributes or {})[names.COMPILE_ID],
        "gen_ai.response.model": "claude-opus-5-5",
        "gen_ai.response.id": response["id"],
        "gen_ai.response.finish_reasons": ("tool_use",),
        "gen_ai.usage.input_tokens": usage.total_input,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_write.input_tokens": usage.cache_creation_input_tokens,
    }
    (reply_one,) = first.replies
    assert events(compile_head) == [
        (
            "context_manager.head_change",
            {
                "context_manager.message_id": second.head_changes[0],
                "context_manager.branch": branch,
                "context_manager.tools_added": ("grep",),
                "context_manager.tools_removed": (),
                "context_manager.system_changed": False,
            },
        )
    ]
    assert dict(compile_head.attributes or {})[names.COMPILE_APPENDED] == 1
    assert events(call_drop) == [
        (
            "context_manager.thinking_drop",
            {
                "context_manager.placed": True,
                "context_manager.reason": PREFIX_MISMATCH,
                "context_manager.path": "messages.1.content.0",
                "context_manager.message_id": reply_one,
                "context_manager.branch": branch,
            },
        ),
        (
            "context_manager.release",
            {
                "context_manager.branch": branch,
                "context_manager.message_id": reply_one,
                "context_manager.from_block": 0,
                "context_manager.origin": "drop",
            },
        ),
    ]
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read_log",
        "gen_ai.tool.call.id": second.tool_calls[0].id,
        "gen_ai.tool.type": "function",
    }
    fold_attributes = dict(compile_fold.attributes or {})
    # folded: turn 1's question and reply, the head change, turn 2's question, its tool call
    # and the tool's result
    assert fold_attributes[names.COMPILE_FOLDED] == 6
    assert names.COMPILE_SHED not in fold_attributes  # nothing shed: the count is left out
    assert events(compile_fold) == [
        (
            "context_manager.thinking_strip",
            {
                "context_manager.cause": "messages",
                "context_manager.changed": (),
                "context_manager.replies": (reply_one, second.replies[0]),
                "context_manager.blocks": 2,
                "context_manager.branch": branch,
                "context_manager.compile.id": fold_attributes[names.COMPILE_ID],
            },
        )
    ]
    assert events(call_last) == []
    assert events(turn_two) == [
        (
            "context_manager.notice",
            {
                "context_manager.branch": branch,
                "context_manager.message_id": notice,
                "context_manager.form": "count",
            },
        )
        for notice in second.notices
    ]
    assert len(second.notices) == 2


async def test_the_metrics_are_the_conventions_histograms_and_this_librarys_counters(
    otel: Otel,
) -> None:
    sim = Simulator(script=calling_script())
    _, first, second = await two_turns(runtime(sim, otel), sim)
    metrics = otel.metrics()
    usages = [*first.usage, *second.usage]
    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens["unit"] == "{token}"
    points = {p["attributes"]["gen_ai.token.type"]: p for p in tokens["data"]["data_points"]}
    assert points["input"]["sum"] == sum(u.total_input for u in usages)
    assert points["output"]["sum"] == sum(u.output_tokens for u in usages)
    assert points["input"]["count"] == 3
    assert points["input"]["explicit_bounds"] == list(names.TOKEN_BUCKETS)
    assert points["input"]["attributes"] == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-opus-5-5",
        "gen_ai.response.model": "claude-opus-5-5",
        "gen_ai.token.type": "input",
    }
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration["unit"] == "s"
    (call_point,) = duration["data"]["data_points"]
    assert call_point["count"] == 3
    assert call_point["explicit_bounds"] == list(names.DURATION_BUCKETS)

    def counted(name: str, key: str) -> dict[Any, int]:
        return {p["attributes"][key]: p["value"] for p in metrics[name]["data"]["data_points"]}

    assert counted("context_manager.thinking.strips", "context_manager.cause") == {"messages": 1}
    assert counted("context_manager.thinking.drops", "context_manager.reason") == {
        PREFIX_MISMATCH: 1
    }
    assert counted("context_manager.notices", "context_manager.form") == {"count": 2}
    read = sum(u.cache_read_input_tokens for u in usages)
    share = counted("context_manager.cache.read_share", "gen_ai.agent.name")
    assert share == {"ada": pytest.approx(read / sum(u.total_input for u in usages))}


class FailingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        raise RuntimeError("the collector is down")


class FailingProcessor(SpanProcessor):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("on_start broke")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("on_end broke")


def stored_view(ada: Agent) -> list[tuple[str, str | None, int]]:
    return [(m.role, m.metadata.kind, len(m.content)) for m in ada.context.messages()]


async def test_a_failing_exporter_or_span_processor_never_fails_a_turn_or_changes_it() -> None:
    plain_sim = Simulator(script=calling_script())
    plain, _, _ = await two_turns(runtime(plain_sim, None), plain_sim)
    for processor in (SimpleSpanProcessor(FailingExporter()), FailingProcessor()):
        provider = TracerProvider()
        provider.add_span_processor(processor)
        sim = Simulator(script=calling_script())
        rt = Runtime(sim.client(), MemoryStore(), retry=FAST_RETRY, tracer_provider=provider)
        with capture_logs() as logs:
            ada, _, second = await two_turns(rt, sim)
        assert stored_view(ada) == stored_view(plain)
        assert len(second.notices) == 2
        if isinstance(processor, FailingProcessor):
            assert any(e["event"] == FAILED_EVENT for e in logs)
        provider.shutdown()


def every_attribute_value(spans: Sequence[ReadableSpan]) -> list[str]:
    values: list[str] = []
    for span in spans:
        attribute_maps = [span.attributes or {}, *(e.attributes or {} for e in span.events)]
        for attributes in attribute_maps:
            for value in attributes.values():
                items = value if isinstance(value, tuple) else (value,)
                values += [str(item) for item in items]
    return values


async def test_with_content_capture_off_no_message_or_reasoning_text_is_in_any_attribute(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(names.CAPTURE_CONTENT_VARIABLE, raising=False)
    sim = Simulator(script=calling_script())
    ada, _, _ = await two_turns(runtime(sim, otel), sim)
    texts = {b.text for m in ada.context.messages() for b in m.content if isinstance(b, TextBlock)}
    texts |= {THOUGHT, TOOL_OUTPUT, "You are Ada."}
    values = every_attribute_value(otel.spans())
    assert len(values) > 100
    leaked = [(t, v) for t in texts for v in values if t and t in v]
    assert leaked == []


async def test_with_content_capture_on_messages_are_recorded_and_reasoning_text_never(
    otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(names.CAPTURE_CONTENT_VARIABLE, "true")
    sim = Simulator(script=calling_script())
    await two_turns(runtime(sim, otel), sim)
    values = every_attribute_value(otel.spans())
    assert not [v for v in values if THOUGHT in v]
    chat = [s for s in otel.spans() if s.name.startswith("chat ")]
    inputs = json.loads(str(dict(chat[0].attributes or {})["gen_ai.input.messages"]))
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": "Hello there, Ada."}]}]
    outputs = json.loads(str(dict(chat[0].attributes or {})["gen_ai.output.messages"]))
    assert outputs == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Noted: Hello there, Ada."}],
            "finish_reason": "end_turn",
        }
    ]
    system = json.loads(str(dict(chat[0].attributes or {})["gen_ai.system_instructions"]))
    assert system == [{"type": "text", "content": "You are Ada."}]
    tool = next(s for s in otel.spans() if s.name == "execute_tool read_log")
    assert dict(tool.attributes or {})["gen_ai.tool.call.result"] == TOOL_OUTPUT


def test_the_content_capture_setting_reads_the_conventions_variable() -> None:
    variable = names.CAPTURE_CONTENT_VARIABLE
    assert variable == "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert capture_from_environment({variable: "SPAN_ONLY"}) is True
    assert capture_from_environment({variable: "false"}) is False
    assert capture_from_environment({variable: "NO_CONTENT"}) is False


def first_compile(otel: Otel) -> tuple[ContextManager, CompileResult]:
    """A traced context through ``ContextManager.open``, after its first compile."""
    cm = ContextManager.open(
        MemoryStore(),
        namespace="ada",
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    cm.add_message("user", "hello")
    return cm, cm.compile(HEAD)


def test_a_direct_compile_and_a_host_release_are_traced_through_context_manager_open(
    otel: Otel,
) -> None:
    cm, result = first_compile(otel)
    reply = cm.record_reply(
        [{"type": "thinking", "thinking": "hm", "signature": "sig"}, TextBlock("hi")], result
    )
    cm.add_message("user", "again")
    cm.release_thinking(reply)
    cm.compile(HEAD, dry_run=True)
    spans = otel.spans()
    assert [s.name for s in spans] == ["compile", "release_thinking", "compile"]
    assert dict(spans[0].attributes or {})[names.COMPILE_ID] == result.compile_id
    assert dict(spans[0].attributes or {})[names.COMPILE_DRY] is False
    assert dict(spans[2].attributes or {})[names.COMPILE_DRY] is True
    assert events(spans[1]) == [
        (
            "context_manager.release",
            {
                "context_manager.branch": cm.current_branch_key(),
                "context_manager.message_id": reply,
                "context_manager.from_block": 0,
                "context_manager.origin": "host",
            },
        )
    ]
    assert events(spans[2]) == []  # a dry compile's strip is nobody's event


def test_a_compile_after_a_compaction_marks_its_call_compacted(otel: Otel) -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("user", "hello")
    result = cm.compile(HEAD)
    telemetry = Telemetry(otel.tracer_provider, otel.meter_provider)
    for compacted in (False, True):
        with telemetry.call(attrs.evolve(result, compacted=compacted)):
            pass
    plain, after = (dict(s.attributes or {}) for s in otel.spans())
    assert "gen_ai.conversation.compacted" not in plain  # the conventions set it only when true
    assert after["gen_ai.conversation.compacted"] is True


def test_the_gen_ai_names_are_the_conventions_names() -> None:
    ours = {
        value
        for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith("gen_ai.")
    }
    known = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_")}
    # the semantic-conventions package predates these two (semantic-conventions-genai #440 and
    # the compaction flag); their names come from the GenAI conventions repository
    newer = {"gen_ai.usage.cache_write.input_tokens", "gen_ai.conversation.compacted"}
    metrics = {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"}
    assert ours - known - metrics == newer


OFF_SCRIPT = """
import asyncio, sys
sys.path[:0] = [{root!r}, {tests!r}]
import anthropic
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
before = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
from helpers import PROBE_HEAD, calling_script
from context_manager import ContextManager, MemoryStore
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator
cm = ContextManager.open(MemoryStore(), namespace="solo")
cm.add_message("user", "hello")
cm.compile(PROBE_HEAD)
sim = Simulator(script=calling_script("probe"))
rt = Runtime(sim.client(open_telemetry=False), MemoryStore(), tracer_provider={switch})
ada = rt.register(Agent("ada", PROBE_HEAD, tools={{"probe": lambda _: "ok"}}))
asyncio.run(ada.run_turn("please use tool"))
after = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
print(sorted(set(after) - set(before)))
print(sorted(s.name for s in exporter.get_finished_spans()))
"""


def run_script(switch: str) -> list[str]:
    script = OFF_SCRIPT.format(root=str(ROOT), tests=str(ROOT / "tests"), switch=switch)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip().splitlines()[-2:]


def test_with_tracing_off_the_library_imports_nothing_of_opentelemetry_and_makes_no_span() -> None:
    # anthropic itself depends on and imports opentelemetry-api: what is measured is what this
    # library adds to it, under a global SDK provider the application set
    imported, spans = run_script("None")
    assert imported == "[]"
    assert spans == "[]"


def test_tracer_provider_true_uses_the_applications_global_provider() -> None:
    _, spans = run_script("True")
    chat = "chat claude-opus-5-5"
    expected = ["invoke_agent ada", "compile", chat, "execute_tool probe", "compile", chat]
    assert spans == str(sorted(expected))


def span_names(text: str) -> list[str]:
    """The names of the console exporter's spans in ``text`` (one JSON object each)."""
    decoder = json.JSONDecoder()
    found, at = [], text.find("{")
    while at != -1:
        value, end = decoder.raw_decode(text, at)
        if isinstance(value, dict) and "context" in value:
            found.append(value["name"])
        at = text.find("{", end)
    return found


def test_run_with_otel_console_prints_the_span_tree_on_stderr_and_keeps_stdout_the_transcript(
    tmp_path: Path,
) -> None:
    done = cli(
        "run",
        "--db",
        tmp_path / "a.db",
        "--agent",
        "ada",
        "--otel",
        "console",
        stdin="hello there\n",
    )
    assert done.returncode == 0, done.stderr
    assert span_names(done.stderr) == ["compile", "chat claude-opus-5-5", "invoke_agent ada"]
    assert "{" not in done.stdout
    assert "You said: hello there" in done.stdout


def test_run_honours_the_standard_otel_variables_when_the_sdk_is_installed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    quiet = cli("run", "--db", db, "--agent", "ada", stdin="hello\n")
    assert span_names(quiet.stdout + quiet.stderr) == []
    done = cli(
        "run",
        "--db",
        db,
        "--agent",
        "ada",
        stdin="hello again\n",
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ada-host"},
    )
    assert done.returncode == 0, done.stderr
    assert span_names(done.stdout) == ["compile", "chat claude-opus-5-5", "invoke_agent ada"]
    assert '"service.name": "ada-host"' in done.stdout
    off = cli(
        "run",
        "--db",
        db,
        "--agent",
        "ada",
        stdin="and again\n",
        env={"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"},
    )
    assert span_names(off.stdout) == []


async def test_the_managed_client_traces_each_call_with_its_compile_and_drops(otel: Otel) -> None:
    sim = Simulator()
    telemetry = Telemetry(otel.tracer_provider, otel.meter_provider)
    client = ManagedAsyncAnthropic(
        sim.client(), MemoryStore(), agent="ada", tracer_provider=telemetry
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "one"}]
    first = await client.messages.create(**framework_params(messages))
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "two"},
    ]
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    async with client.beta.messages.stream(**framework_params(messages)) as stream:
        await stream.get_final_message()
    spans = otel.spans()
    assert [s.name for s in spans] == ["compile", "chat claude-opus-5-5"] * 2
    first_call, second_call = spans[1], spans[3]
    assert first_call.kind == SpanKind.CLIENT
    assert first_call.start_time is not None
    assert spans[0].end_time is not None
    assert first_call.start_time >= spans[0].end_time  # begun when the call was prepared
    assert first_call.end_time is not None
    assert first_call.end_time - first_call.start_time > 0
    assert dict(first_call.attributes or {})["gen_ai.response.id"] == first.id
    assert [name for name, _ in events(second_call)] == [
        "context_manager.thinking_drop",
        "context_manager.release",
    ]


def test_the_gateway_takes_otel_console_too() -> None:
    shown = cli("gateway", "--help")
    assert "--otel {console}" in shown.stdout
    refused = cli("gateway", "--db", "x.db", "--otel", "jaeger")
    assert refused.returncode == 2
    assert "invalid choice: 'jaeger'" in refused.stderr


def test_an_unplaced_drop_is_an_event_with_why_it_could_not_be_placed(otel: Otel) -> None:
    cm, result = first_compile(otel)
    report = {
        "input_transformations": [
            {
                "type": "thinking_dropped",
                "path": "messages.9.content.0",
                "reason": "prefix_binding_mismatch",
            }
        ]
    }
    placed = cm.place_drops(report, result)
    (unplaced,) = placed.unplaced
    spans = otel.spans()
    assert [s.name for s in spans] == ["compile", "place_drops"]
    assert events(spans[1]) == [
        (
            "context_manager.thinking_drop",
            {
                "context_manager.placed": False,
                "context_manager.reason": "prefix_binding_mismatch",
                "context_manager.path": "messages.9.content.0",
                "context_manager.why": unplaced.why,
                "context_manager.branch": cm.current_branch_key(),
            },
        )
    ]
    drops = otel.metrics()["context_manager.thinking.drops"]["data"]["data_points"]
    assert [p["attributes"] for p in drops] == [
        {"context_manager.reason": "prefix_binding_mismatch", "context_manager.placed": False}
    ]


def test_the_tracing_example_prints_the_span_tree_docs_tracing_shows(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tracing.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # this tree, not an installed copy
    )
    assert done.returncode == 0, done.stderr
    decoder = json.JSONDecoder()
    spans, at = [], done.stdout.find("{")
    while at != -1:
        span, end = decoder.raw_decode(done.stdout, at)
        spans.append(span)
        at = done.stdout.find("{", end)
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span["parent_id"], []).append(span)

    def tree(parent: str | None, depth: int) -> list[str]:
        lines = []
        for span in sorted(children.get(parent, []), key=lambda s: s["start_time"]):
            lines.append(
                "  " * depth + " ".join([span["name"], *(e["name"] for e in span["events"])])
            )
            lines += tree(span["context"]["span_id"], depth + 1)
        return lines

    chat = "chat claude-opus-5-5"
    assert tree(None, 0) == [
        "invoke_agent ada",
        "  compile",
        f"  {chat}",
        "invoke_agent ada context_manager.notice",
        "  compile context_manager.head_change",
        f"  {chat} context_manager.thinking_drop context_manager.release",
        "  execute_tool read_log",
        "  compile context_manager.thinking_strip",
        f"  {chat}",
    ]
    assert "The log is in." not in done.stdout  # reasoning text: never


def test_a_shed_is_on_its_compile_span_with_one_release_per_reply(otel: Otel) -> None:
    cm = ContextManager.open(
        MemoryStore(),
        namespace="ada",
        strategy=Window(1_000),
        tracer_provider=otel.tracer_provider,
        meter_provider=otel.meter_provider,
    )
    results: list[CompileResult] = []
    for n in range(12):  # replies whose thinking dominates the tokens
        cm.add_message("user", f"question {n}")
        results.append(cm.compile(HEAD))
        thought = {"type": "thinking", "thinking": "x" * 400, "signature": f"sig{n}"}
        cm.record_reply([thought, {"type": "text", "text": f"a{n}"}], results[-1])
    shedding = [r for r in results if r.shed]
    assert shedding  # the window sheds the oldest thinking as the history grows
    spans = {dict(s.attributes or {})[names.COMPILE_ID]: s for s in otel.spans()}
    for result in results:
        span = spans[result.compile_id]
        assert dict(span.attributes or {}).get(names.COMPILE_SHED, 0) == len(result.shed)
        releases = [a for name, a in events(span) if name == "context_manager.release"]
        assert releases == [
            {
                "context_manager.branch": result.branch,
                "context_manager.message_id": reply,
                "context_manager.origin": "shed",
            }
            for reply in result.shed
        ]


async def test_a_refused_call_ends_its_spans_failed_with_the_status_as_error_type(
    otel: Otel,
) -> None:
    sim = Simulator(script=calling_script())
    ada = runtime(sim, otel).register(Agent("ada", HEAD))
    sim.fail_next(FAST_RETRY.attempts, status=529)
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        await ada.run_turn("hello")
    compile_span, chat, turn = otel.spans()
    assert (compile_span.name, chat.name, turn.name) == (
        "compile",
        "chat claude-opus-5-5",
        "invoke_agent ada",
    )
    assert dict(chat.attributes or {})["error.type"] == "529"
    assert chat.status.status_code == StatusCode.ERROR
    assert turn.status.status_code == StatusCode.ERROR
    (point,) = otel.metrics()["gen_ai.client.operation.duration"]["data"]["data_points"]
    assert point["attributes"]["error.type"] == "529"
    assert "gen_ai.client.token.usage" not in otel.metrics()  # no reply, no usage
