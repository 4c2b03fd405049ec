"""Live reasoning across processes on PostgreSQL: a runtime publishes, a console mirrors it."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from helpers import (
    FAST_RETRY,
    PROBE_HEAD,
    SUMMARIZED,
    slow_client,
    start_console,
    stop_console,
)
from postgres_server import Server, drop_schema, fresh_schema

from context_manager import MemoryStore, PostgresStore
from context_manager.runtime import Agent, MirroredReasoning, Runtime
from context_manager.simulator import Simulator

THOUGHT = "The parser step failed after the merge; the lockfile moved it to 2.4, so pin it back."
HEAD = attrs.evolve(PROBE_HEAD, settings={"max_tokens": 2048, "thinking": SUMMARIZED})


def script(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": THOUGHT}, {"type": "text", "text": "Pinned."}]


@pytest.fixture
def other_schema(postgres_server: Server) -> Iterator[str]:
    schema, dsn = fresh_schema(postgres_server.dsn)
    yield dsn
    drop_schema(postgres_server.dsn, schema)


async def until(check: Any, timeout: float = 10) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_console_in_another_process_mirrors_the_live_reasoning_and_its_catch_up(
    postgres_dsn: str, other_schema: str
) -> None:
    host, console, elsewhere = (
        PostgresStore(postgres_dsn),
        PostgresStore(postgres_dsn),
        PostgresStore(other_schema),
    )
    gate = asyncio.Event()
    runtime = Runtime(slow_client(Simulator(script=script), gate, after=2), host, retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", HEAD))
    mirror, stranger = MirroredReasoning(console), MirroredReasoning(elsewhere)
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(mirror.start, loop)
    await asyncio.to_thread(stranger.start, loop)
    quiet = stranger.hub("ada").subscribe()
    try:
        async with runtime.publish_reasoning():
            turn = asyncio.create_task(agent.run_turn("why?", asker="bob"))
            hub = mirror.hub("ada")
            await until(lambda: (p := hub.partial()) is not None and p.text and p.text.value)
            events = hub.subscribe()  # a page attaching mid-call
            partial = await asyncio.wait_for(anext(events), 5)
            gate.set()
            reply = (await turn).replies[0]
            rest: list[Any] = []
            while not rest or rest[-1].kind != "done":
                rest.append(await asyncio.wait_for(anext(events), 5))
            await events.aclose()
            with pytest.raises(TimeoutError):  # another schema's console hears nothing
                await asyncio.wait_for(anext(quiet), 0.5)
    finally:
        await asyncio.to_thread(mirror.stop)
        await asyncio.to_thread(stranger.stop)
        for store in (host, console, elsewhere):
            store.close()
    assert partial.kind == "partial"
    assert partial.asker == "bob"
    assert partial.text is not None
    streamed = "".join(e.text.value for e in rest if e.kind == "reasoning" and e.text)
    assert partial.text.value + streamed == THOUGHT
    assert rest[-1].reply == reply


def test_publishing_needs_postgresql() -> None:
    runtime = Runtime(Simulator().client(), MemoryStore())
    with pytest.raises(TypeError, match="needs a PostgresStore"):
        runtime.publish_reasoning()


async def test_context_manager_serve_on_postgresql_streams_what_a_runtime_publishes(
    postgres_dsn: str, tmp_path: Any
) -> None:

    tokens = tmp_path / "tokens.txt"
    tokens.write_text("owner-token-0123456789 alice *\n")
    host = PostgresStore(postgres_dsn)
    gate = asyncio.Event()
    runtime = Runtime(slow_client(Simulator(script=script), gate, after=2), host, retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", HEAD))
    process, entry = await asyncio.to_thread(
        start_console, "serve", "--db", postgres_dsn, "--tokens", tokens, "--port", 0
    )

    def first_frame(expected: str) -> list[str]:
        """The first event frame a page gets on connecting, once the console's mirror has
        heard all the call streamed so far (``expected``: it waits at the gate meanwhile)."""
        for _ in range(40):
            request = urllib.request.Request(f"{entry.rstrip('/')}/agents/ada/live")
            request.add_header("Authorization", "Bearer owner-token-0123456789")
            try:
                with urllib.request.urlopen(request, timeout=1) as stream:
                    lines: list[str] = []
                    while len(lines) < 2:
                        line = stream.readline().decode().strip()
                        if line and not line.startswith(":"):
                            lines.append(line)
                if expected in lines[1]:
                    return lines
            except TimeoutError:
                continue
        raise AssertionError("no frame")

    try:
        async with runtime.publish_reasoning():
            turn = asyncio.create_task(agent.run_turn("why?", asker="bob"))
            await until(
                lambda: (p := agent.live.partial()) is not None and bool(p.text and p.text.value)
            )
            held = agent.live.partial()
            assert held is not None
            assert held.text is not None
            frame = await asyncio.to_thread(first_frame, held.text.value)
            gate.set()
            await turn
    finally:
        await asyncio.to_thread(stop_console, process)
        host.close()
    name, data = frame
    assert name == "event: reasoning-partial"
    text = json.loads(data.removeprefix("data: "))["text"]
    assert text == held.text.value
    assert THOUGHT.startswith(text)
