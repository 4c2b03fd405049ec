"""The live reasoning channel: the hub's bound, reset and catch-up, and the runtime feeding it."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
from helpers import FAST_RETRY, PROBE_HEAD, SUMMARIZED, runtime_on, slow_client
from structlog.testing import capture_logs

from context_manager import ASKER_KEY, MemoryStore
from context_manager._reasoning import ReasoningEvent, UntrustedText
from context_manager.runtime import LIVE_BUFFER_CHARS, Agent, ReasoningHub, Runtime
from context_manager.simulator import Simulator

THOUGHT = "I should look at the nightly build's log before I answer anything at all."
HEAD = attrs.evolve(PROBE_HEAD, settings={"max_tokens": 2048, "thinking": SUMMARIZED})


def thinking_script(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": THOUGHT}, {"type": "text", "text": "Done."}]


def listening_hub(bound: int = LIVE_BUFFER_CHARS) -> ReasoningHub:
    hub = ReasoningHub("ada", bound=bound)
    hub.serve(True)
    return hub


async def take(events: Any, n: int) -> list[ReasoningEvent]:
    out = []
    for _ in range(n):
        out.append(await asyncio.wait_for(anext(events), 2))
    return out


def test_the_buffer_keeps_the_newest_text_up_to_its_bound() -> None:
    hub = listening_hub(bound=10)
    hub.begin("c1", None)
    for piece in ("abcd", "efgh", "ijkl"):
        hub.thinking(piece)
        hub._check()
    partial = hub.partial()
    assert partial is not None
    assert partial.text is not None
    assert (partial.text.value, partial.clipped) == ("cdefghijkl", True)


def test_nothing_is_kept_while_nobody_listens() -> None:
    hub = ReasoningHub("ada")
    hub.begin("c1", None)
    hub.thinking("secret")
    partial = hub.partial()
    assert partial is not None
    assert partial.text is not None
    assert partial.text.value == ""


async def test_a_subscriber_that_attaches_mid_call_gets_the_partial_then_increments() -> None:
    hub = listening_hub()
    hub.begin("c1", "bob")
    hub.thinking("first ")
    events = hub.subscribe()
    hub_started = await take(events, 1)
    hub.thinking("second")
    [increment] = await take(events, 1)
    assert [(e.kind, e.text.value if e.text else None) for e in [*hub_started, increment]] == [
        ("partial", "first "),
        ("reasoning", "second"),
    ]
    assert hub_started[0].asker == "bob"
    await events.aclose()


async def test_a_retry_resets_and_the_recorded_reply_clears() -> None:
    hub = listening_hub()
    events = hub.subscribe()
    hub.begin("c1", None)
    hub.thinking("lost")
    hub.restart()
    hub._check()
    hub.thinking("kept")
    hub.end("reply-1")
    hub._check()
    kinds = [(e.kind, e.text.value if e.text else e.reply) for e in await take(events, 4)]
    assert kinds == [
        ("reasoning", "lost"),
        ("reset", None),
        ("reasoning", "kept"),
        ("done", "reply-1"),
    ]
    assert hub.partial() is None
    await events.aclose()


async def test_a_subscriber_that_falls_behind_gets_one_partial_instead() -> None:
    hub = listening_hub()
    hub.begin("c1", None)
    events = hub.subscribe()
    await take(events, 1)  # the empty partial
    for _ in range(2000):
        hub.thinking("x")
    first = await take(events, 1)
    assert first[0].kind == "partial"
    assert first[0].text is not None
    assert len(first[0].text.value) > 1000
    await events.aclose()


async def test_a_turn_streams_its_thinking_to_on_reasoning_as_untrusted_increments() -> None:
    heard: list[UntrustedText] = []
    runtime = runtime_on(Simulator(script=thinking_script))
    agent = runtime.register(Agent("ada", HEAD, on_reasoning=heard.append))
    await agent.run_turn("look", asker="bob")
    assert all(isinstance(piece, UntrustedText) for piece in heard)
    assert "".join(piece.value for piece in heard) == THOUGHT
    assert len(heard) > 1  # increments, not the block at the end
    [reply] = agent.context.messages()[1:]
    assert reply.metadata.extra[ASKER_KEY] == "bob"


async def test_a_failing_reasoning_sink_never_fails_the_turn() -> None:
    def broken(_: UntrustedText) -> None:
        raise RuntimeError("sink down")

    runtime = runtime_on(Simulator(script=thinking_script))
    agent = runtime.register(Agent("ada", HEAD, on_reasoning=broken))
    with capture_logs() as logs:
        result = await agent.run_turn("look")
    assert result.stop_reason == "end_turn"
    assert [e["event"] for e in logs].count("reasoning_sink_failed") == 1


async def test_the_live_channel_is_off_by_default_and_apart_from_text() -> None:
    runtime = runtime_on(Simulator(script=thinking_script))
    agent = runtime.register(Agent("ada", HEAD))
    await agent.run_turn("look")
    assert agent.live.partial() is None
    assert not agent.live.enabled


async def test_reasoning_stream_shows_a_retry_as_a_reset() -> None:
    sim = Simulator(script=thinking_script)
    runtime = Runtime(sim.client(), MemoryStore(), retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", HEAD))
    events = agent.reasoning_stream()
    waiting = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    sim.fail_next(1, 529)
    await agent.run_turn("look")
    seen = [await waiting]
    while seen[-1].kind != "done":
        seen.append(await asyncio.wait_for(anext(events), 2))
    kinds = [e.kind for e in seen]
    assert kinds[0] == "reset"
    assert kinds[-1] == "done"
    text = "".join(e.text.value for e in seen if e.kind == "reasoning" and e.text)
    assert text == THOUGHT
    await events.aclose()


async def test_a_page_opened_mid_call_catches_up_from_the_partial() -> None:
    gate = asyncio.Event()
    sim = Simulator(script=thinking_script)
    runtime = Runtime(slow_client(sim, gate, after=2), MemoryStore(), retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", attrs.evolve(HEAD)))
    agent.live.serve(True)
    turn = asyncio.create_task(agent.run_turn("look", asker="bob"))
    while (p := agent.live.partial()) is None or not p.text or not p.text.value:
        await asyncio.sleep(0.01)
    events = agent.reasoning_stream()
    [partial] = await take(events, 1)
    gate.set()
    rest: list[Any] = []
    while not rest or rest[-1].kind != "done":
        rest.append(await asyncio.wait_for(anext(events), 2))
    await turn
    assert partial.kind == "partial"
    assert partial.text is not None
    streamed = "".join(e.text.value for e in rest if e.kind == "reasoning" and e.text)
    assert partial.text.value + streamed == THOUGHT
    await events.aclose()


async def test_the_asker_is_recorded_on_the_trigger_its_tool_results_and_its_replies() -> None:
    def calls_then_answers(request: dict[str, Any]) -> list[dict[str, Any]]:
        if request["messages"][-1]["content"][-1].get("type") == "tool_result":
            return [{"type": "thinking", "thinking": THOUGHT}, {"type": "text", "text": "Done."}]
        return [
            {"type": "thinking", "thinking": THOUGHT},
            {"type": "tool_use", "name": "probe", "input": {}},
        ]

    runtime = runtime_on(Simulator(script=calls_then_answers))
    agent = runtime.register(Agent("ada", HEAD, tools={"probe": lambda given: "ok"}))
    await agent.run_turn("probe it", asker="bob")
    await agent.run_turn("and again")  # nobody named: nothing recorded
    roles = [(m.role, m.metadata.extra.get(ASKER_KEY)) for m in agent.context.messages()]
    assert roles == [
        ("user", "bob"),
        ("assistant", "bob"),
        ("user", "bob"),
        ("assistant", "bob"),
        ("user", None),
        ("assistant", None),
        ("user", None),
        ("assistant", None),
    ]
