"""The live reasoning hub: one agent's ``thinking_delta`` text, delivered while a call streams.

Invariants: off until something listens (an ``on_reasoning`` callback, an open
``reasoning_stream()``, or a console serving the agent), and then the stream is read event by
event; text is handed out only as ``UntrustedText``; the in-progress buffer holds at most
``LIVE_BUFFER_CHARS`` characters (the oldest dropped first), is emptied by a retry or a resumed
turn (``reset``) and cleared when the reply is recorded (``done``); nothing is stored. A sink or a
subscriber that fails or falls behind never fails the call: a failing sink is logged, a
subscriber more than ``SUBSCRIBER_BACKLOG`` events behind is brought back with one ``partial``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from context_manager._model._errors import InvalidValue
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._reasoning._audit import UntrustedText
from context_manager._reasoning._live import LiveKind, ReasoningEvent

log = library_logger("context_manager.runtime")

LIVE_BUFFER_CHARS = 64 * 1024
"""Characters of in-progress reasoning kept per agent for catch-up; past it the oldest go."""

SUBSCRIBER_BACKLOG = 1024
"""Events a subscriber may have waiting; one further behind gets a fresh ``partial`` instead."""

ReasoningSink = Callable[[UntrustedText], object]
"""``on_reasoning(increment)``: called in the event loop for each increment; must not block."""


class _Subscriber:
    """One reader's queue: bounded; an overflow is replaced by a single catch-up event."""

    def __init__(self) -> None:
        self.pending: deque[ReasoningEvent] = deque()
        self.ready = asyncio.Event()

    def put(self, event: ReasoningEvent, catch_up: Callable[[], ReasoningEvent | None]) -> None:
        if len(self.pending) >= SUBSCRIBER_BACKLOG:
            self.pending.clear()
            again = catch_up()
            if again is not None:
                self.pending.append(again)
            if event.kind == "reasoning":  # already in the catch-up
                self.ready.set()
                return
        self.pending.append(event)
        self.ready.set()


class Subscription:
    """One subscriber's events: an async iterator (and async context manager) that ends only
    when closed."""

    def __init__(self, hub: ReasoningHub, subscriber: _Subscriber) -> None:
        self._hub, self._subscriber = hub, subscriber
        self.closed = False

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> ReasoningEvent:
        subscriber = self._subscriber
        while not subscriber.pending:
            if self.closed:
                raise StopAsyncIteration
            subscriber.ready.clear()
            await subscriber.ready.wait()
        return subscriber.pending.popleft()

    async def aclose(self) -> None:
        """Leave the hub; a waiting ``__anext__`` ends."""
        self.closed = True
        self._hub._leave(self._subscriber)
        self._subscriber.ready.set()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


class ReasoningHub:
    """One agent's live reasoning: the buffer, the sink and the subscribers.

    Args:
        agent: the agent's name (it names the text's origin).
        sink: returns the agent's ``on_reasoning`` callback (read at each increment), or
            ``None``.
        bound: the buffer's bound in characters (default ``LIVE_BUFFER_CHARS``).
    """

    def __init__(
        self,
        agent: str,
        sink: Callable[[], ReasoningSink | None] = lambda: None,
        *,
        bound: int = LIVE_BUFFER_CHARS,
    ) -> None:
        if bound <= 0:
            raise InvalidValue(f"bound must be a positive number of characters, got {bound!r}")
        self.agent = agent
        self.bound = bound
        self._sink = sink
        self._served = 0
        self._subscribers: list[_Subscriber] = []
        self._pieces: deque[str] = deque()
        self._chars = 0
        self._clipped = False
        self._call: str | None = None
        self._asker: str | None = None
        self._sink_failed = False

    # who listens
    @property
    def enabled(self) -> bool:
        """Whether anything listens: a sink, a subscriber, or a console serving the agent."""
        return self._sink() is not None or bool(self._subscribers) or self._served > 0

    @property
    def call(self) -> str | None:
        """The compile id of the call streaming now, or ``None``."""
        return self._call

    def serve(self, on: bool) -> None:
        """A console starts (``True``) or stops serving the agent: keep a buffer meanwhile."""
        self._served = max(0, self._served + (1 if on else -1))

    def subscribe(self) -> Subscription:
        """Events from now on, the first a ``partial`` when a call is streaming (catch-up).

        Registered at once (nothing published after this call is missed). Stop with
        ``aclose()`` or by leaving an ``async with``; until then the hub keeps its events.
        """
        subscriber = _Subscriber()
        first = self.partial()
        if first is not None:
            subscriber.pending.append(first)
        self._subscribers.append(subscriber)
        return Subscription(self, subscriber)

    def _leave(self, subscriber: _Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    # what the runtime tells it
    def begin(self, call: str, asker: str | None) -> None:
        """A model call starts streaming; a buffer left from an earlier call is reset."""
        if self._call is not None or self._chars:
            self.reset()
        self._call, self._asker = call, asker
        self._sink_failed = False

    def restart(self) -> None:
        """The call is retried: what it streamed so far is dropped (``reset``)."""
        call, asker = self._call, self._asker
        self.reset()
        self._call, self._asker = call, asker

    def thinking(self, text: str) -> None:
        """One ``thinking_delta``: buffered, handed to the sink and to every subscriber."""
        if not text or not self.enabled:
            return  # display "omitted" streams nothing readable; nobody listens: keep nothing
        self._keep(text)
        increment = UntrustedText(text, self._origin())
        self._deliver(increment)
        self._publish("reasoning", increment)

    def reset(self) -> None:
        """Empty the buffer and tell subscribers to drop what they show (a retry, a resume)."""
        self._clear()
        self._publish("reset", None)
        self._call = self._asker = None

    def end(self, reply: MessageId | None) -> None:
        """The call is over: its reply recorded (``reply``) or failed (``None``). Clears."""
        if self._call is None and not self._chars:
            return
        self._clear()
        self._publish("done" if reply is not None else "reset", None, reply)
        self._call = self._asker = None

    def partial(self) -> ReasoningEvent | None:
        """The streaming call's reasoning so far, or ``None`` when no call streams."""
        if self._call is None:
            return None
        text = UntrustedText("".join(self._pieces), self._origin())
        return ReasoningEvent(
            "partial", self.agent, self._call, self._asker, text, clipped=self._clipped
        )

    def _check(self) -> None:
        """The buffer's invariants (tests call it after each step)."""
        assert self._chars == sum(len(p) for p in self._pieces)
        assert self._chars <= self.bound
        assert all(self._pieces)
        assert self._call is not None or self._chars == 0

    # inside
    def _origin(self) -> str:
        return f"live-reasoning:{self.agent}:{self._call}"

    def _keep(self, text: str) -> None:
        self._pieces.append(text)
        self._chars += len(text)
        while self._chars > self.bound:
            over = self._chars - self.bound
            oldest = self._pieces[0]
            if len(oldest) <= over:
                self._pieces.popleft()
                self._chars -= len(oldest)
            else:
                self._pieces[0] = oldest[over:]
                self._chars -= over
            self._clipped = True

    def _clear(self) -> None:
        self._pieces.clear()
        self._chars = 0
        self._clipped = False

    def _deliver(self, increment: UntrustedText) -> None:
        sink = self._sink()
        if sink is None:
            return
        try:
            sink(increment)
        except Exception as err:  # a failing sink never fails the call
            if not self._sink_failed:
                log.warning(
                    "reasoning_sink_failed", agent=self.agent, call=self._call, error=repr(err)
                )
            self._sink_failed = True

    def _publish(
        self, kind: LiveKind, text: UntrustedText | None, reply: MessageId | None = None
    ) -> None:
        if not self._subscribers:
            return
        event = ReasoningEvent(kind, self.agent, self._call, self._asker, text, reply)
        for subscriber in list(self._subscribers):
            subscriber.put(event, self.partial)
