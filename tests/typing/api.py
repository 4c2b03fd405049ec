"""The public API called as a user would, checked by ``mypy --strict`` in ``.ci/run``.

Never run: it only has to type-check. Every public call shape of SPEC 14 appears once, so a
signature that loses its types (``Any``) or a name that disappears fails CI.
"""

from __future__ import annotations

import asyncio

import anthropic
import attrs

from context_manager import (
    AgentBusy,
    ApiTokenCounter,
    BindingSerials,
    BindingStore,
    Caching,
    CallUsage,
    CompileResult,
    ContextManager,
    Fold,
    Head,
    Hold,
    HoldStore,
    LegacyStamp,
    MemoryStore,
    MessageStore,
    Passthrough,
    PlacedDrops,
    PostgresStore,
    ReadsTogether,
    ReasoningEvent,
    Reconciliation,
    SnapshotStore,
    SQLiteStore,
    Stamp,
    Store,
    Telemetry,
    TextBlock,
    ThinkingBinding,
    ThinkingStrip,
    UntrustedText,
    Window,
    branch_key,
    parse_input_transformations,
    place_thinking_drops,
)
from context_manager.adapters import ManagedAsyncAnthropic
from context_manager.runtime import Agent, Runtime, TurnResult
from context_manager.simulator import Simulator
from context_manager.web import Access, Principal
from notices import ReasoningLossTeller, reasoning_loss_line


def observer(strip: ThinkingStrip, key: str) -> None:
    print(strip.cause, strip.replies, key)


def store_parts() -> None:
    """Each store is each part of the protocol (a method that drifts from it fails here)."""
    messages: MessageStore = SQLiteStore("agent.db")
    bindings: BindingStore = PostgresStore("postgresql://localhost/agents")
    serials: BindingSerials = MemoryStore()
    together: ReadsTogether = MemoryStore()
    snapshots: SnapshotStore = MemoryStore()
    holds: HoldStore = MemoryStore()
    whole: Store = MemoryStore()
    stamp: Stamp | LegacyStamp | None = whole.stamps("ada", ["msg_1"]).get("msg_1")
    print(messages, bindings, serials, together, snapshots, holds, stamp)


async def main() -> None:
    cm = ContextManager.open(
        SQLiteStore("agent.db"),
        namespace="ada",
        binding=ThinkingBinding(binds=True, drop_block=True),
        strategy=Passthrough(),
    )
    cm.add_message("user", [TextBlock("hello")])
    head = Head(
        model="claude-opus-5-5",
        system="You are Ada.",
        tools=[],
        settings={"max_tokens": 4096, "thinking": {"type": "adaptive"}},
    )
    result: CompileResult = cm.compile(head)
    request: dict[str, object] = result.request
    sim = Simulator()
    client = sim.client()
    message = await client.beta.messages.create(**result.request)
    reply_id: str = cm.record_reply(message, result)
    placed: PlacedDrops = cm.place_drops(message, result)
    again = place_thinking_drops(parse_input_transformations(message), result.provenance, ())
    print(request, reply_id, placed, again)
    cm.on_thinking_strip(observer)
    cm.fork("experiment")
    cm.switch_branch("main")
    key, sequence = cm.branch_head()
    print(key, sequence + 1, branch_key(cm.current_branch()))
    print([m.metadata.kind for m in cm.messages(kind="reasoning-loss")])
    ContextManager.open(MemoryStore(), strategy=Window(max_tokens=10_000))
    counted = ContextManager.open(
        MemoryStore(), caching=Caching(ttl="1h"), estimator=ApiTokenCounter(sim.sync_client())
    )
    print(counted.compile(head).tokens)
    ContextManager.open(
        MemoryStore(), strategy=Fold(lambda ms: f"{len(ms)} messages", trigger_tokens=50_000)
    )
    traced = ContextManager.open(MemoryStore(), tracer_provider=True)
    shared: Telemetry = traced.telemetry
    Runtime(client, MemoryStore(), tracer_provider=shared)

    runtime = Runtime(
        client,
        SQLiteStore("agents.db"),
        teller=ReasoningLossTeller(lambda agent, mid: cm.get_message(mid)),
        hold_timeout=5.0,
        holder="worker-3",
    )
    ada = runtime.register(Agent(name="ada", head=head))
    hold: Hold = cm.hold(timeout=1.0, holder="worker-3")
    async with hold:
        cm.add_message("user", "inside a round of my own")
    with SQLiteStore("agents.db").hold("ada", timeout=0) as held:
        print(held.namespace, held.holder, held.timeout)
    try:
        await ada.run_turn("are you free?")
    except AgentBusy as busy:
        print(busy.namespace, busy.holder, busy.timeout, busy.setting)
    turn: TurnResult = await ada.run_turn("what changed?")
    print(turn.replies, turn.stop_reason)
    spent: CallUsage = turn.total_usage
    print(spent.cache_read_input_tokens, [u.output_tokens for u in turn.usage])
    ada.head = attrs.evolve(ada.head, tools=[])
    print(ada.context.current_branch_key())
    print(reasoning_loss_line("ada", "count", count=1))

    reconciled: CompileResult = cm.reconcile(
        {
            "model": "claude-opus-5-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    done: Reconciliation | None = cm.last_reconciliation
    print(reconciled.request["messages"], done)
    managed = ManagedAsyncAnthropic(client, MemoryStore(), agent=("ada", "main"))
    print(managed.context("ada").current_branch().name, managed.agents.waiting("ada"))
    injected: anthropic.AsyncAnthropic = managed  # a drop-in where a framework takes a client
    print(injected.base_url)

    def heard(piece: UntrustedText) -> None:
        print(piece.value)

    bea = runtime.register(Agent(name="bea", head=head, on_reasoning=heard))
    async with bea.reasoning_stream() as events:
        asked: TurnResult = await bea.run_turn("why?", asker="bob")
        event: ReasoningEvent = await anext(events)
        print(asked.replies, event.kind, event.asker, event.text)
    access = Access.of({"an-owner-token-0123": Principal("alice", owner=True)})
    async with runtime.serve(access, port=0) as console:
        print(console.url)


asyncio.run(main())
