"""Test helpers shared by several suites (one definition each; import them from here).

Readers of what a user can see: a request's texts and thinking, a context's messages and its
``[reasoning]`` notices. Simulator helpers: ``sdk_client`` (the real SDK client in-process or over
the loopback server), ``wire_reply`` (a reply as the assistant message a client sends back) and
``transformations`` (a reply's ``input_transformations`` as ``(type, path, reason)`` triples),
``invalid_calls`` (every call the simulator refused or whose request does not verify). Builders:
``THINKING_HEAD`` and its tools, ``PROBE_HEAD`` (one ``probe`` tool, a model that takes system
messages) and ``head_json``, ``calling_script`` (a simulator script that calls a tool when asked),
``runtime_on`` (a runtime on the simulator's SDK client), ``slow_client`` (the SDK over a stream
that pauses at a gate mid-thinking), ``StoreWithout`` (a store that predates some protocol
methods), ``signed_conversation`` (questions the simulator answers with signed thinking) and
``replies_with_thinking``, ``snapshots_off``; ``framework_params`` (the parameters a framework
builds for one call) and ``framework_copy`` (a framework's own copy of a reply, in one of the
``REPLY_COPIES`` styles) and ``reworded`` (that copy with its words changed). Servers: ``serve``
(an ASGI app under uvicorn on loopback, in a thread) and ``free_port``. Sessions: ``play_session``
plays ``SESSION_STEPS`` (turns, tool rounds, releases, a changed system prompt or model, blank-text
and thinking-only replies) under ``SESSION_BINDING`` and returns each compile's ``visible_outcome``
(``windowed_session``: on a new agent; ``switched_off``: with a short path off);
``differing_fields`` compares two renders field by field. Command line: ``cli`` (the program in a
subprocess, never the real API) and ``snapshot`` (a folder's files, to show nothing was written).
They assert nothing, so a test's meaning stays in the test.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anthropic
import attrs
import httpx2
from hypothesis import strategies as st

from context_manager import (
    REASONING_LOSS_KIND,
    CompileResult,
    ContextManager,
    Head,
    MemoryStore,
    MessageId,
    Store,
    TextBlock,
    ThinkingBinding,
    Window,
    set_render_snapshots,
)
from context_manager._model import strip_cache_control
from context_manager.runtime import Agent, RetryPolicy, Runtime
from context_manager.simulator import BASE_URL, MODEL_MISMATCH, Simulator, default_script

READ_LOG_TOOL = {
    "name": "read_log",
    "description": "Read the log.",
    "input_schema": {"type": "object"},
}
ACTIVATE_TOOL = {
    "name": "activate_skill",
    "description": "Grow tools.",
    "input_schema": {"type": "object"},
}
NO_SYSTEM_MESSAGES_MODEL = "claude-sim-1"
"""An undocumented model: it takes no system messages (VENDOR_RULES 16), so a head change is
not appended but strips (SPEC 7b), and it runs the prefix check (VENDOR_RULES 10, the
conservative reading). Sonnet 5 takes none either, but runs no prefix check."""
GREP_TOOL = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
THINKING_HEAD = Head(
    model=NO_SYSTEM_MESSAGES_MODEL,
    system="You are Ada.",
    tools=[READ_LOG_TOOL],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.002)
PROBE_TOOL = {"name": "probe", "description": "Look.", "input_schema": {"type": "object"}}
PROBE_HEAD = Head(
    model="claude-opus-5-5",  # takes mid-conversation system messages
    system="You are Ada.",
    tools=[PROBE_TOOL],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)


def head_json(head: Head) -> str:
    """``head`` as JSON, for a host in a subprocess to rebuild with ``Head(**json.loads(...))``."""
    fields = {"model": head.model, "system": head.system, "tools": head.tools}
    return json.dumps({**fields, "settings": head.settings})


def invalid_calls(sim: Simulator) -> list[str]:
    """Why each call ``sim`` answered was not clean: refused, answered with thinking dropped, or
    its request fails ``sim.verify``. Empty when every request compiled for it was valid. A
    block the requested model cannot read is not counted: the compiler sends it on purpose
    (VENDOR_RULES 8, ``CompileResult.unreadable``) and the API drops it without an error."""
    bad = []
    for call in sim.calls:
        checks = sim.verify({**call.request, "betas": list(call.betas)})
        bad += [str(c.reason) for c in checks if c.reason not in (None, MODEL_MISMATCH)]
        dropped = [c for c in call.dropped if c.reason != MODEL_MISMATCH]
        bad += [] if call.status == 200 and not dropped else [f"status {call.status}"]
    return bad


def calling_script(
    tool: str = "read_log", *, think: bool = True
) -> Callable[[dict[str, Any]], list[Any]]:
    """A simulator script: call ``tool`` once when the user asks to ``use tool``; else answer."""

    def script(request: dict[str, Any]) -> list[Any]:
        last = [m for m in request["messages"] if m["role"] != "system"][-1]
        content = last["content"] if isinstance(last["content"], list) else []
        thought = [{"type": "thinking", "thinking": "considering"}] if think else []
        if any(b.get("type") == "tool_result" for b in content):
            return [*thought, {"type": "text", "text": "The log says all is well."}]
        said = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
        if "use tool" in said:
            return [*thought, {"type": "tool_use", "name": tool, "input": {}}]
        return [*thought, {"type": "text", "text": f"Noted: {said[:40]}"}]

    return script


def read_log_script(
    thought: str, tool_input: dict[str, Any]
) -> Callable[[dict[str, Any]], list[Any]]:
    """A simulator script: call ``read_log`` (with ``tool_input``, after ``thought``) once per
    user question, then answer once its result is in."""

    def script(request: dict[str, Any]) -> list[Any]:
        last = request["messages"][-1]
        content = last["content"] if isinstance(last["content"], list) else []
        if any(b.get("type") == "tool_result" for b in content):
            return [{"type": "thinking", "thinking": "the log is in"}, "All is well."]
        return [
            {"type": "thinking", "thinking": thought},
            {"type": "tool_use", "name": "read_log", "input": tool_input},
        ]

    return script


def runtime_on(sim: Simulator, store: Store | None = None) -> Runtime:
    """A ``Runtime`` on the simulator's real SDK client, fast retries, a memory store by default."""
    return Runtime(sim.client(), store or MemoryStore(), retry=FAST_RETRY)


TRANSPORTS = ("in-process", "loopback")
"""How a test reaches the simulator: ``sim.client()``, or the SDK over ``sim.serve()``."""


@asynccontextmanager
async def sdk_client(sim: Simulator, transport: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """An ``anthropic.AsyncAnthropic`` talking to ``sim`` over ``transport`` (one of TRANSPORTS)."""
    if transport == "in-process":
        async with sim.client() as client:
            yield client
        return
    with sim.serve() as url:
        async with anthropic.AsyncAnthropic(base_url=url, api_key="sim", max_retries=0) as client:
            yield client


def wire_reply(message: anthropic.types.beta.BetaMessage) -> dict[str, Any]:
    """A reply as the assistant message a client sends back (plain wire dicts)."""
    return {
        "role": "assistant",
        "content": [block.model_dump(exclude_none=True) for block in message.content],
    }


def transformations(message: anthropic.types.beta.BetaMessage) -> list[tuple[str, str, str]]:
    """``(type, path, reason)`` of every ``input_transformations`` entry of a reply, in order."""
    assert message.input_transformations is not None
    return [(t.type, t.path, t.reason) for t in message.input_transformations]


def unmarked(value: Any) -> Any:
    """``value`` (a request, messages, a message) with every ``cache_control`` marker removed:
    what a test about rendering compares, whatever breakpoints the compile placed."""
    return strip_cache_control(value)


def request_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every content block of a request's messages, in order (string contents are skipped)."""
    return [
        block
        for message in request["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
    ]


def request_texts(request: dict[str, Any]) -> list[str]:
    """The text of every text block a request sends, in order."""
    return [b["text"] for b in request_blocks(request) if b.get("type") == "text"]


def thinking_signatures(request: dict[str, Any]) -> list[str]:
    """The signature of every ``thinking`` block a request sends, in order."""
    return [b["signature"] for b in request_blocks(request) if b.get("type") == "thinking"]


def message_texts(cm: ContextManager, **kwargs: Any) -> list[str]:
    """The first text of each message ``cm.messages(**kwargs)`` returns (each must have one)."""
    out = []
    for message in cm.messages(**kwargs):
        block = message.content[0]
        assert isinstance(block, TextBlock)
        out.append(block.text)
    return out


def notice_texts(agent: Agent) -> list[str]:
    """The agent's stored ``[reasoning]`` lines, oldest first."""
    return message_texts(agent.context, kind=REASONING_LOSS_KIND)


CLI_ENV = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {"NO_COLOR": "1"}
"""The command line's environment in tests: never the real API, whatever the shell holds."""


def cli(
    *args: object, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``context-manager ARGS`` in a subprocess (``CLI_ENV``, plus ``env``), feeding it
    ``stdin``."""
    return subprocess.run(
        [sys.executable, "-m", "context_manager", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**CLI_ENV, **(env or {})},
    )


WITHOUT = """import runpy, sys
for name in sys.argv.pop(1).split(","):
    sys.modules[name] = None  # importing it raises ModuleNotFoundError, as when not installed
runpy.run_module("context_manager", run_name="__main__", alter_sys=True)
"""
"""``python -m context_manager`` with some top-level modules made unimportable (argv[1])."""


def cli_without(modules: Sequence[str], *args: object) -> subprocess.CompletedProcess[str]:
    """``cli(*args)`` in an interpreter where ``modules`` cannot be imported (a missing extra)."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, ",".join(modules), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=CLI_ENV,
    )


async def signed_conversation(sim: Simulator, cm: ContextManager, turns: int) -> list[str]:
    """``turns`` questions, each answered by ``sim`` with signed thinking (compiled under
    ``THINKING_HEAD`` and recorded), then one more question; the replies' ids."""
    client = sim.client()
    replies = []
    for n in range(turns):
        cm.add_message("user", f"question {n}")
        result = cm.compile(THINKING_HEAD)
        replies.append(cm.record_reply(await client.beta.messages.create(**result.request), result))
    cm.add_message("user", "and now?")
    return replies


def replies_with_thinking(result: CompileResult) -> list[str]:
    """Stored ids of the replies whose thinking ``result`` sends, oldest first."""
    return [s.message_id for e in result.provenance for s in e.sources if s.signatures]


@contextmanager
def snapshots_off() -> Iterator[None]:
    """Render snapshots off meanwhile (every re-render reads the stored messages)."""
    set_render_snapshots(False)
    try:
        yield
    finally:
        set_render_snapshots(True)


class StoreWithout:
    """A host's own store written against the protocol before some methods: a ``MemoryStore``
    without the ``missing`` ones (reading one raises ``AttributeError``)."""

    def __init__(self, *missing: str) -> None:
        self._inner = MemoryStore()
        self._missing = frozenset(missing)

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise AttributeError(name)
        return getattr(self._inner, name)


class CallCountingStore:
    """A real store, counting the calls of the ``counted`` methods made through it (``calls``):
    to show what a compile reads, never to change it."""

    def __init__(self, inner: Store, *counted: str) -> None:
        self._inner = inner
        self._counted = frozenset(counted)
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name not in self._counted:
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)

        return counted


class RacedStore:
    """A real store where another host (``other``: a second store object on the same database)
    creates each of ``names`` just before this one does, with the same arguments: two hosts
    picking one branch name at once, in the one order that races, made certain. The real store
    then refuses this host's creation (``BranchExists``) as it would."""

    def __init__(self, inner: Store, other: Store, *names: str) -> None:
        self._inner = inner
        self._other = other
        self._pending = set(names)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_branch(self, namespace: str, name: str, **kwargs: Any) -> Any:
        if name in self._pending:
            self._pending.discard(name)
            self._other.create_branch(namespace, name, **kwargs)
        return self._inner.create_branch(namespace, name, **kwargs)


class Interleaved:
    """A real store that runs ``then()`` once, right after the first call of ``method`` made
    through it once ``armed``: another host's write placed between two steps of this host's
    work, in the one order that races."""

    def __init__(self, inner: Store, method: str, then: Callable[[], None]) -> None:
        self._inner = inner
        self._method = method
        self._then = then
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name != self._method:
            return found

        def interleaved(*args: Any, **kwargs: Any) -> Any:
            out = found(*args, **kwargs)
            if self.armed:
                self.armed = False
                self._then()
            return out

        return interleaved


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file directly in ``folder`` with its bytes (to show that nothing was written)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


REPLY_COPIES = ("as-sent", "no-thinking", "tagged-thinking", "no-extras", "string-text")
"""How frameworks keep their own copy of a reply: as the SDK returned it; without thinking
(some drop it); with thinking turned into tagged text (pydantic-ai, for thinking it cannot
replay); without ``caller``, ``citations`` or ``cache_control`` (many); its text as one string."""


def framework_copy(message: Any, style: str) -> dict[str, Any]:
    """The assistant message a framework keeps of ``message`` (an SDK reply), in ``style``."""
    blocks = [block.model_dump(exclude_none=True) for block in message.content]
    if style == "no-thinking":
        blocks = [b for b in blocks if b["type"] != "thinking"]
    elif style == "tagged-thinking":
        blocks = [
            {"type": "text", "text": f"<thinking>\n{b['thinking']}\n</thinking>"}
            if b["type"] == "thinking"
            else b
            for b in blocks
        ]
    elif style == "no-extras":
        blocks = [{k: v for k, v in b.items() if k not in ("caller", "citations")} for b in blocks]
    elif style == "string-text" and all(b["type"] in ("text", "thinking") for b in blocks):
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": blocks}


def reworded(message: dict[str, Any]) -> dict[str, Any]:
    """A framework's copy of a reply with its last words changed (a string copy, or its last
    text block; its other blocks as they were)."""
    content = message["content"]
    if isinstance(content, str):
        return {**message, "content": content + " (reworded)"}
    last = max(k for k, b in enumerate(content) if b["type"] == "text")
    changed = {**content[last], "text": content[last]["text"] + " (reworded)"}
    return {**message, "content": [*content[:last], changed, *content[last + 1 :]]}


def framework_params(
    messages: list[dict[str, Any]], *, system: str = "You are Ada.", **more: Any
) -> dict[str, Any]:
    """The parameters a framework builds for one call on ``PROBE_HEAD``'s model and tools."""
    return {
        "model": PROBE_HEAD.model,
        "system": system,
        "tools": list(PROBE_HEAD.tools),
        "max_tokens": 1024,
        "thinking": {"type": "adaptive"},
        "messages": list(messages),
        **more,
    }


SUMMARIZED = {"type": "adaptive", "display": "summarized"}
"""A thinking setting under which the simulator streams readable thinking text."""


class _GatedChunks(httpx2.AsyncByteStream):
    def __init__(self, chunks: tuple[bytes, ...], gate: asyncio.Event, after: int) -> None:
        self._chunks, self._gate, self._after = chunks, gate, after

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        for chunk in self._chunks:
            yield chunk
            await asyncio.sleep(0)
            if b'"thinking_delta"' in chunk:
                seen += 1
                if seen == self._after:
                    await self._gate.wait()


class GatedTransport(httpx2.AsyncBaseTransport):
    """The simulator's answers, streamed event by event; each streamed answer stops after its
    ``after``-th ``thinking_delta`` until ``gate`` is set (a scripted slow stream)."""

    def __init__(self, sim: Simulator, gate: asyncio.Event, after: int = 1) -> None:
        self._sim, self._gate, self._after = sim, gate, after

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = {k.lower(): v for k, v in request.headers.multi_items()}
        reply = self._sim.handle(request.method, request.url.path, headers, body)
        stream = _GatedChunks(reply.chunks, self._gate, self._after)
        return httpx2.Response(reply.status, headers=list(reply.headers), stream=stream)


def slow_client(sim: Simulator, gate: asyncio.Event, after: int = 1) -> anthropic.AsyncAnthropic:
    """The real SDK client over ``GatedTransport``: each call's stream waits at ``gate``."""
    http_client = httpx2.AsyncClient(transport=GatedTransport(sim, gate, after))
    return anthropic.AsyncAnthropic(
        api_key="sim", base_url=BASE_URL, http_client=http_client, max_retries=0
    )


def interrupt(child: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user presses it: again if the process has not ended a while later.

    Stdin stays open meanwhile (its end of input would end the session with 0 instead). A
    Ctrl-C landing just as a turn's event loop finishes can go unseen (``asyncio.Runner``
    cancels nothing once its task is done, and raises nothing after), and a user would press
    it again.
    """
    for _ in range(5):
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        return
    child.kill()
    raise AssertionError("the session did not end at Ctrl-C")


class Recorder:
    """The simulator's default script, keeping a copy of every request the model saw."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        self.seen.append(copy.deepcopy(request))
        return default_script(request)


class CompactionGate(httpx2.AsyncBaseTransport):
    """The simulator's answers, a compaction request's held back until ``gate`` is set: the
    simulator answers it when it is sent, the client hears the answer late (a slow compaction,
    provider rule 27)."""

    def __init__(self, sim: Simulator, gate: asyncio.Event) -> None:
        self._sim, self.gate = sim, gate

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        headers = {k.lower(): v for k, v in request.headers.multi_items()}
        reply = self._sim.handle(request.method, request.url.path, headers, body)
        if "compaction" in json.loads(body or b"{}"):
            await self.gate.wait()
        stream = httpx2.ByteStream(b"".join(reply.chunks))
        return httpx2.Response(reply.status, headers=list(reply.headers), stream=stream)


def compaction_gated_client(sim: Simulator, gate: asyncio.Event) -> anthropic.AsyncAnthropic:
    """The real SDK client over ``CompactionGate``: compaction answers wait at ``gate``."""
    http_client = httpx2.AsyncClient(transport=CompactionGate(sim, gate))
    return anthropic.AsyncAnthropic(
        api_key="sim", base_url=BASE_URL, http_client=http_client, max_retries=0
    )


LONG_TURN = "The deploy log shows a slow migration again. " * 8
"""About a hundred tokens: with ``Compact(300)`` a few turns pass the trigger."""


def compaction_calls(sim: Simulator) -> list[Any]:
    """The compaction requests ``sim`` answered (top-level ``compaction``), in order."""
    return [c for c in sim.calls if "compaction" in c.request]


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on loopback in a thread; yields its base URL."""
    port = free_port()
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


SESSION_HEAD = Head(
    model="claude-opus-5-5",
    system="You are Ada.",
    tools=[{"name": "read_log", "description": "Read.", "input_schema": {"type": "object"}}],
)
OTHER_SYSTEM = attrs.evolve(SESSION_HEAD, system="You are Ada, on call.")
OTHER_MODEL = "claude-opus-5"
SESSION_BINDING = ThinkingBinding(binds=True, drop_block=True, append_changes=False)

SessionStep = tuple[str, int]
"""One step of a session: ``(kind, size)``; see ``play_session``."""

SESSION_STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["turn", "turn", "turn", "loop", "release", "system", "model", "blank", "bare"]
        ),
        st.integers(min_value=0, max_value=6),
    ),
    min_size=4,
    max_size=30,
)


def _thought(size: int, signatures: Iterator[int]) -> dict[str, Any]:
    return {
        "type": "thinking",
        "thinking": "t" * (40 + 90 * size),
        "signature": f"s{next(signatures)}",
    }


def play_session(cm: ContextManager, steps: list[SessionStep]) -> list[dict[str, Any]]:
    """Run ``steps`` on ``cm``: every compile's user-visible outcome, ids as sequences."""
    signatures = itertools.count()
    calls = itertools.count()
    replies: list[MessageId] = []
    seen: list[dict[str, Any]] = []
    head = SESSION_HEAD

    def compiled() -> CompileResult:
        result = cm.compile(head)
        seen.append(visible_outcome(cm, result))
        return result

    for kind, size in steps:
        if kind == "release" and replies:
            cm.release_thinking(replies[size % len(replies)])
            continue
        if kind == "system":
            other = OTHER_SYSTEM.system if head.system == SESSION_HEAD.system else None
            head = attrs.evolve(head, system=other or SESSION_HEAD.system)
            continue
        if kind == "model":  # a model that cannot read the other's thinking (provider rule 9)
            other = OTHER_MODEL if head.model == SESSION_HEAD.model else None
            head = attrs.evolve(head, model=other or SESSION_HEAD.model)
            continue
        cm.add_message("user", f"question {size} " + "q" * (20 * size))
        for _ in range(size if kind == "loop" else 0):
            call = f"toolu_{next(calls)}"
            use = {"type": "tool_use", "id": call, "name": "read_log", "input": {}}
            replies.append(cm.record_reply([_thought(size, signatures), use], compiled()))
            result = {"type": "tool_result", "tool_use_id": call, "content": "r" * (30 * size)}
            cm.add_message("user", [result])
        last: list[dict[str, Any]] = [_thought(size, signatures)]
        if kind == "blank":
            last.append({"type": "text", "text": "  "})
        elif kind != "bare":
            last.append({"type": "text", "text": f"answer {size}"})
        replies.append(cm.record_reply(last, compiled()))
    compiled()
    return seen


def visible_outcome(cm: ContextManager, result: CompileResult) -> dict[str, Any]:
    """What a user sees of ``result``, message ids as stored sequences (equal across stores)."""

    def at(message_id: MessageId) -> int:
        return cm.store.get(cm.namespace, message_id).sequence

    strip = result.thinking_strip
    return {
        "request": result.request,
        "tokens": result.tokens,
        "shed": [at(m) for m in result.shed],
        "strip": None if strip is None else (strip.cause, [at(m) for m in strip.replies]),
        "sources": [[at(s.message_id) for s in e.sources] for e in result.provenance],
        "unreadable": result.unreadable,
    }


def windowed_session(steps: list[SessionStep], max_tokens: int) -> list[dict[str, Any]]:
    """``play_session`` on a new agent in memory, under a ``Window`` of ``max_tokens``."""
    cm = ContextManager.open(
        MemoryStore(), namespace="ada", binding=SESSION_BINDING, strategy=Window(max_tokens)
    )
    return play_session(cm, steps)


@contextmanager
def switched_off(module: Any) -> Iterator[None]:
    """A compile stage's short path (its module's ``ENABLED``) off, for the duration."""
    module.ENABLED = False
    try:
        yield
    finally:
        module.ENABLED = True


def differing_fields(mine: Any, theirs: Any, **instead: Any) -> dict[str, Any]:
    """The fields of attrs instance ``mine`` (``instead``: these values in place of its own)
    that differ from ``theirs``'s, with ``mine``'s values; fields its equality leaves out
    (``eq=False``, e.g. ``RenderState.signed_from``, a bound) are not compared."""
    compared = {field.name for field in attrs.fields(type(mine)) if field.eq}
    ours = attrs.asdict(mine, recurse=False) | instead
    other = attrs.asdict(theirs, recurse=False)
    return {
        name: value for name, value in ours.items() if name in compared and value != other[name]
    }


def start_console(
    *args: object, seen: list[str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """Start ``context-manager ARGS`` and read its stdout up to the console's URL (the lines
    before it go to ``seen``)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "context_manager", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CLI_ENV,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("console: "):
            return process, line.removeprefix("console: ").strip()
        if seen is not None:
            seen.append(line.rstrip("\n"))
    process.kill()
    _, stderr = process.communicate()
    raise AssertionError(f"no console URL; stderr: {stderr}")


def stop_console(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C it; its exit code and stderr (its pipes read to the end and closed)."""
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    return process.returncode, stderr
