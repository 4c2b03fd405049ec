"""The in-process ``httpx2`` transport: SDK requests answered by a simulator, no sockets.

One class serves both sync and async clients. The simulator's answer is computed in the calling
thread (or event loop); streamed answers are handed over event by event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Protocol

import httpx2

from ._http import HttpReply, lower_headers


class Handler(Protocol):
    """Anything that answers an HTTP request the way ``Simulator.handle`` does."""

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> HttpReply:
        """Answer one request (never raises for bad input)."""
        ...


class _Chunks(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    def __init__(self, chunks: tuple[bytes, ...]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def _response(reply: HttpReply) -> httpx2.Response:
    return httpx2.Response(reply.status, headers=list(reply.headers), stream=_Chunks(reply.chunks))


class SimulatorTransport(httpx2.AsyncBaseTransport, httpx2.BaseTransport):
    """An ``httpx2`` transport (sync and async) whose every request the simulator answers.

    Example:
        ``httpx2.AsyncClient(transport=sim.transport())``
    """

    def __init__(self, handler: Handler) -> None:
        self._handler = handler

    def _answer(self, request: httpx2.Request, body: bytes) -> httpx2.Response:
        headers = lower_headers(request.headers.multi_items())
        return _response(self._handler.handle(request.method, request.url.path, headers, body))

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Answer ``request`` synchronously."""
        return self._answer(request, request.read())

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Answer ``request`` from an async client."""
        return self._answer(request, await request.aread())
