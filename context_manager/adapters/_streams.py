"""Streams handed to the framework: the real SDK stream, watched so the reply is recorded.

Each wrapper yields the real events, unchanged and in order, and keeps a snapshot of the message
they build (the SDK's own accumulation, so thinking signatures, tool inputs and
``input_transformations`` come out as the SDK reads them). When the stream reaches
``message_stop`` the snapshot is handed to ``done`` exactly once; a stream closed or failed before
that records nothing (no partial reply is stored). Anything else is passed through to the real
stream (``response``, ``close``, ``get_final_message``, ...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2
from anthropic.lib.streaming._beta_messages import accumulate_event

from context_manager._model._log import library_logger

log = library_logger("context_manager.adapters")

Done = Callable[[object], None]
"""``done(message)``: the streamed reply, complete."""


class _Snapshot:
    """The message a stream's events build, and whether it was handed on."""

    def __init__(self, done: Done) -> None:
        self._done = done
        self._message: Any = None
        self._buffers: dict[int, bytes] = {}
        self.finished = False

    def see(self, event: Any) -> None:
        if self.finished:
            return
        try:
            raw = event.to_dict() if hasattr(event, "to_dict") else event
            self._message = accumulate_event(
                event=raw,
                current_snapshot=self._message,
                json_bufs=self._buffers,
                request_headers=httpx2.Headers(),
            )
        except Exception as err:  # an event the SDK cannot fold never breaks the framework
            log.warning("managed_stream_event_unread", error=repr(err))
            return
        if getattr(event, "type", None) == "message_stop" and self._message is not None:
            self.finished = True
            self._done(self._message)


class ManagedAsyncStream:
    """An ``AsyncStream`` of raw events (``create(stream=True)``), watched."""

    def __init__(self, inner: Any, done: Done) -> None:
        self._inner = inner
        self._snapshot = _Snapshot(done)
        self._events: AsyncIterator[Any] | None = None

    async def _watch(self) -> AsyncIterator[Any]:
        async for event in self._inner:
            self._snapshot.see(event)
            yield event

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._events is None:
            self._events = self._watch()
        return self._events

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def __aenter__(self) -> ManagedAsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ManagedStream:
    """A sync ``Stream`` of raw events (``create(stream=True)``), watched."""

    def __init__(self, inner: Any, done: Done) -> None:
        self._inner = inner
        self._snapshot = _Snapshot(done)
        self._events: Iterator[Any] | None = None

    def _watch(self) -> Iterator[Any]:
        for event in self._inner:
            self._snapshot.see(event)
            yield event

    def __iter__(self) -> Iterator[Any]:
        if self._events is None:
            self._events = self._watch()
        return self._events

    def __next__(self) -> Any:
        return next(self.__iter__())

    def __enter__(self) -> ManagedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _hand_on(stream: Any, done: Done) -> None:
    """Hand the helper stream's message to ``done`` if the stream reached its end."""
    try:
        message = stream.current_message_snapshot
    except Exception:  # nothing arrived
        return
    if getattr(message, "stop_reason", None) is not None:
        done(message)


class ManagedAsyncStreamManager:
    """``messages.stream(...)``'s async context manager: the real one, recorded on exit."""

    def __init__(self, inner: Any, done: Done) -> None:
        self._inner = inner
        self._done = done
        self._stream: Any = None

    async def __aenter__(self) -> Any:
        self._stream = await self._inner.__aenter__()
        return self._stream

    async def __aexit__(self, *exc: Any) -> Any:
        _hand_on(self._stream, self._done)
        return await self._inner.__aexit__(*exc)


class ManagedStreamManager:
    """``messages.stream(...)``'s sync context manager: the real one, recorded on exit."""

    def __init__(self, inner: Any, done: Done) -> None:
        self._inner = inner
        self._done = done
        self._stream: Any = None

    def __enter__(self) -> Any:
        self._stream = self._inner.__enter__()
        return self._stream

    def __exit__(self, *exc: Any) -> Any:
        _hand_on(self._stream, self._done)
        return self._inner.__exit__(*exc)
