"""Serving the console with uvicorn: in the caller's event loop, or blocking for the CLI.

Invariants: loopback (``127.0.0.1``) unless the caller names another host; the socket is bound
before ``url`` is read, so port ``0`` gives a free port; an embedded server never takes over the
process's signal handlers, and stopping it ends open live streams within ``GRACE`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

from context_manager._model._log import library_logger

log = library_logger("context_manager.web")

LOOPBACK = "127.0.0.1"
GRACE = 1
"""Seconds a stopping server waits for open responses (live streams) before closing them."""


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


class ConsoleServer:
    """The console app on ``host:port``; ``async with`` it in a running loop, or ``run()``.

    Args:
        app: the ASGI app (``create_app``).
        host: where to listen (loopback by default; any other host is logged as a warning).
        port: the port, ``0`` for a free one.
        on_start, on_stop: called as serving starts and after it stops.
        in_loop: called with the serving event loop before the first request (``run()`` makes
            its own loop; a console that mirrors another process's events starts there).
    """

    def __init__(
        self,
        app: Any,
        host: str = LOOPBACK,
        port: int = 0,
        *,
        on_start: Callable[[], None] | None = None,
        on_stop: Callable[[], None] | None = None,
        in_loop: Callable[[asyncio.AbstractEventLoop], None] | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._on_start = on_start
        self._on_stop = on_stop
        self._in_loop = in_loop
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (once bound)."""
        if self._sock is None:
            raise RuntimeError("the console is not serving yet")
        port = self._sock.getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    def _build(self, *, embedded: bool) -> Any:
        import uvicorn

        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=GRACE,
        )

        class _Embedded(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:  # the host owns its signals
                yield

        return _Embedded(config) if embedded else uvicorn.Server(config)

    def _open(self) -> socket.socket:
        if not _is_loopback(self.host):
            log.warning("console_not_loopback", host=self.host, note="reachable off this host")
        self._sock = _bind(self.host, self.port)
        if self._on_start is not None:
            self._on_start()
        return self._sock

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._on_stop is not None:
            self._on_stop()

    async def __aenter__(self) -> ConsoleServer:
        sock = self._open()
        if self._in_loop is not None:
            self._in_loop(asyncio.get_running_loop())
        self._server = self._build(embedded=True)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._close()
                await self._task  # raises why it could not start
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._close()

    def run(self, announce: Callable[[str], None] | None = None) -> None:
        """Serve until interrupted (Ctrl-C stops it cleanly); ``announce(url)`` once bound."""
        sock = self._open()
        server = self._build(embedded=False)

        async def serve() -> None:
            if self._in_loop is not None:
                self._in_loop(asyncio.get_running_loop())
            if announce is not None:  # bound, and listening for what in_loop starts
                announce(self.url)
            await server.serve(sockets=[sock])

        try:
            asyncio.run(serve())
        finally:
            self._close()
