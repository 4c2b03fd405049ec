"""The loopback HTTP server: the simulator over real sockets, bound to loopback only.

One thread per connection (``ThreadingHTTPServer``); every answer closes its connection, so
``stop()`` leaves no thread or socket behind. Streamed answers go out chunked, one chunk per event.
Refuses to bind anything but a loopback address: the simulator has no authentication.
"""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from context_manager import InvalidValue, library_logger

from ._http import lower_headers
from ._transport import Handler

# The library's public logger (stdlib-bridged: silent unless the application asks, never on
# stdout); the simulator shares no code with the layers it checks, only public names.
logger = library_logger("context_manager.simulator")

STOP_TIMEOUT_SECONDS = 5.0
"""How long ``stop()`` waits for the serving thread; it ends within one poll interval normally."""

POLL_INTERVAL_SECONDS = 0.05
"""How often the serving loop checks for ``stop()``: short, so stopping is quick in tests."""

_LOCALHOST = "localhost"


def loopback_address(host: str) -> str:
    """``host`` as a loopback IP address string (``"localhost"`` is ``127.0.0.1``).

    Raises:
        ValueError: ``host`` is not a loopback address.
    """
    literal = "127.0.0.1" if host == _LOCALHOST else host
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise InvalidValue(
            f"the simulator binds only to loopback; {host!r} is not a loopback address "
            "(use 127.0.0.1 or ::1)"
        )
    return str(address)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    handler: Handler

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup that can stall);
        # a loopback server has no use for it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.exception("simulator_server_error", client=str(client_address))


class _Server6(_Server):
    address_family = socket.AF_INET6


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        self._answer("POST")

    def do_GET(self) -> None:
        self._answer("GET")

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        headers = lower_headers(self.headers.items())
        reply = self.server.handler.handle(method, urlsplit(self.path).path, headers, body)
        self.close_connection = True
        try:
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            if reply.streamed:
                self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in reply.chunks:
                if reply.streamed:
                    chunk = f"{len(chunk):X}\r\n".encode() + chunk + b"\r\n"
                self.wfile.write(chunk)
                self.wfile.flush()
            if reply.streamed:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            logger.info("simulator_client_gone", path=self.path)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("simulator_http", line=format % args)


class SimulatorServer:
    """The simulator served over HTTP on a loopback address.

    Example:
        ``server = SimulatorServer(sim, port=0); url = server.start(); ...; server.stop()``
        or ``with SimulatorServer(sim) as server: server.url``.

    Args:
        handler: the simulator (anything with ``handle``).
        host: a loopback address (``127.0.0.1``, ``::1`` or ``localhost``).
        port: the port; ``0`` picks a free one.

    Raises:
        ValueError: ``host`` is not loopback.
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0) -> None:
        self._handler = handler
        self._host = loopback_address(host)
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients use (``http://127.0.0.1:PORT``).

        Raises:
            RuntimeError: the server is not running.
        """
        if self._server is None:
            raise RuntimeError("the simulator server is not running; call start() first")
        port = self._server.server_address[1]
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{port}"

    def start(self) -> str:
        """Bind, start serving in a background thread and return the URL.

        Raises:
            RuntimeError: already running.
            OSError: the address cannot be bound.
        """
        if self._server is not None:
            raise RuntimeError("the simulator server is already running")
        cls = _Server6 if ":" in self._host else _Server
        server = cls((self._host, self._port), _RequestHandler)
        server.handler = self._handler
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            args=(POLL_INTERVAL_SECONDS,),
            name="context-manager-simulator",
            daemon=True,
        )
        self._thread.start()
        logger.info("simulator_server_started", url=self.url)
        return self.url

    def stop(self) -> None:
        """Stop serving and release the socket. Idempotent."""
        server, thread = self._server, self._thread
        if server is None:
            return
        url = self.url
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(STOP_TIMEOUT_SECONDS)
        self._server = self._thread = None
        logger.info("simulator_server_stopped", url=url)

    def __enter__(self) -> SimulatorServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
