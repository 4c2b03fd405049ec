"""Live reasoning across processes on PostgreSQL: a runtime publishes, a console mirrors.

Invariants: what is published is what the agents' hubs deliver (``ReasoningEvent``s as JSON, a
long text split so no payload passes the channel's bound), on the store's own channel; the
console's mirror replays them into hubs of its own, so a page there gets the same catch-up,
increments, ``reset`` and ``done``, and the same audience rule applies. Nothing is stored; a
publish that fails is logged once per agent and never fails a turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from context_manager._model._log import library_logger
from context_manager._reasoning._live import ReasoningEvent
from context_manager._store._postgres import PostgresStore
from context_manager._store._postgres_live import Listener, live_channel, notify

from ._agent import Agent
from ._live import ReasoningHub, Subscription

log = library_logger("context_manager.runtime")

PIECE_CHARS = 1000
"""Characters of text per payload (escaped, at most 6 bytes each: under the 7000-byte bound)."""


def payloads_of(event: ReasoningEvent) -> list[str]:
    """``event`` as JSON payloads: one, or a ``partial`` split into a partial and increments."""
    base: dict[str, Any] = {
        "agent": event.agent,
        "kind": event.kind,
        "call": event.call,
        "asker": event.asker,
        "reply": event.reply,
    }
    if event.text is None:
        return [json.dumps(base, ensure_ascii=False)]
    text = event.text.value  # deliberately: handed on to the console's hub, never shown here
    pieces = [text[at : at + PIECE_CHARS] for at in range(0, len(text), PIECE_CHARS)] or [""]
    out = [json.dumps({**base, "text": pieces[0]}, ensure_ascii=False)]
    later = {**base, "kind": "reasoning"}
    out.extend(json.dumps({**later, "text": piece}, ensure_ascii=False) for piece in pieces[1:])
    return out


class ReasoningPublisher:
    """Publish ``agents``' live reasoning on ``store``'s channel while the block runs.

    ``async with runtime.publish_reasoning():`` (``Runtime.publish_reasoning``).
    """

    def __init__(self, store: PostgresStore, agents: Iterable[Agent]) -> None:
        self.store = store
        self.agents = list(agents)
        self._tasks: list[asyncio.Task[None]] = []
        self._subscriptions: list[Subscription] = []

    async def __aenter__(self) -> ReasoningPublisher:
        channel = await asyncio.to_thread(live_channel, self.store)
        for agent in self.agents:
            agent.live.serve(True)
            subscription = agent.live.subscribe()
            self._subscriptions.append(subscription)
            self._tasks.append(asyncio.create_task(self._pump(agent.name, channel, subscription)))
        return self

    async def _pump(self, agent: str, channel: str, events: Subscription) -> None:
        failed = False
        async for event in events:
            try:
                await asyncio.to_thread(notify, self.store, channel, payloads_of(event))
            except Exception as err:  # the live view degrades; the turn goes on
                if not failed:
                    log.warning("reasoning_publish_failed", agent=agent, error=repr(err))
                failed = True

    async def __aexit__(self, *_: object) -> None:
        for subscription in self._subscriptions:
            await subscription.aclose()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for agent in self.agents:
            agent.live.serve(False)


class MirroredReasoning:
    """A console's hubs, fed from a runtime in another process through ``store``'s channel.

    ``start(loop)`` listens (in a thread; events are applied in ``loop``), ``stop()`` ends it;
    ``hub(agent)`` is the agent's mirrored hub (the console's live source).
    """

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._hubs: dict[str, ReasoningHub] = {}
        self._listener: Listener | None = None

    def hub(self, agent: str) -> ReasoningHub:
        if agent not in self._hubs:
            hub = ReasoningHub(agent)
            hub.serve(True)
            self._hubs[agent] = hub
        return self._hubs[agent]

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Listen from now on. Raises ``StoreUnavailable`` when the server cannot be reached."""

        def heard(payload: str) -> None:
            loop.call_soon_threadsafe(self.apply, payload)

        listener = Listener(self.store, live_channel(self.store), heard)
        listener.start()
        self._listener = listener

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    def apply(self, payload: str) -> None:
        """Replay one published event into the agent's hub (bad payloads are ignored)."""
        try:
            data = json.loads(payload)
            agent, kind, call = str(data["agent"]), data["kind"], data.get("call")
        except (ValueError, KeyError, TypeError):
            log.info("reasoning_payload_ignored")
            return
        hub = self.hub(agent)
        if kind in ("partial", "reasoning"):
            if kind == "partial" or hub.call != call:
                hub.begin(str(call), data.get("asker"))
            hub.thinking(str(data.get("text") or ""))
        elif kind == "reset" and call is not None and hub.call == call:
            hub.restart()
        elif kind == "reset":
            hub.reset()
        elif kind == "done":
            hub.end(data.get("reply") or None)
