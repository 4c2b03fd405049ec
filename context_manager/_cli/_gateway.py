"""``context-manager gateway``: serve the local Messages API gateway (``adapters.gateway_app``).

Loopback by default (``--host`` another address only with ``--allow-remote``). Calls go to
``--upstream`` with each caller's own credentials; without ``--upstream`` they go to the Claude
API when this process has ``ANTHROPIC_API_KEY`` set (the caller's key is still the one sent), and
to the in-process simulator otherwise, so the demo works offline. The gateway prints where it
listens and never prints or logs a key. uvicorn and starlette come from the ``gateway`` extra.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from context_manager._store._protocol import Store
from context_manager.adapters import AGENT_HEADER, DEFAULT_PORT, LOOPBACK, gateway_app
from context_manager.adapters._gateway import INSTALL_HINT

from ._db import CliError, is_postgres, open_for_writing, open_postgres, url_for_humans
from ._otel import OTEL_CHOICES, tracing_for

CLAUDE_API = "https://api.anthropic.com"
API_KEY_VARIABLE = "ANTHROPIC_API_KEY"


def add_gateway(commands: Any, common: argparse.ArgumentParser, handler: Any) -> None:
    """Add the ``gateway`` command to the ``commands`` subparsers."""
    gateway = commands.add_parser(
        "gateway",
        parents=[common],
        help="serve a local Messages API that manages every agent calling it",
        description="A Messages API (POST /v1/messages, streaming, /v1/messages/count_tokens) "
        "any client can use by setting its base URL. Each call is reconciled with the agent's "
        f"stored transcript (agent named by the {AGENT_HEADER} header, or --agent), compiled "
        "so no thinking block that fails is sent and none that holds is stripped, forwarded "
        "with the caller's own credentials, and recorded.",
    )
    gateway.add_argument(
        "--db", metavar="PATH|URI", required=True, help="the SQLite file or a postgresql:// URI"
    )
    gateway.add_argument("--port", type=int, default=DEFAULT_PORT, help="default: %(default)s")
    gateway.add_argument("--host", default="127.0.0.1", help="default: %(default)s (loopback)")
    gateway.add_argument(
        "--allow-remote", action="store_true", help="allow a --host that is not loopback"
    )
    gateway.add_argument(
        "--upstream",
        metavar="URL",
        help=f"forward to this Messages API (default: {CLAUDE_API} when {API_KEY_VARIABLE} is "
        "set, the local simulator otherwise)",
    )
    gateway.add_argument(
        "--agent", metavar="NAME", help=f"the agent of calls without the {AGENT_HEADER} header"
    )
    gateway.add_argument(
        "--otel",
        choices=OTEL_CHOICES,
        default=None,
        help="print OpenTelemetry spans and metrics with the SDK's console exporter (stderr); "
        "without it, the standard OTEL_* variables are honoured when the SDK is installed",
    )
    gateway.set_defaults(handler=handler)


def upstream_of(args: argparse.Namespace) -> str | None:
    """Where calls go: ``--upstream``, the Claude API when a key is configured, else ``None``
    (the simulator)."""
    if args.upstream:
        return str(args.upstream)
    return CLAUDE_API if os.environ.get(API_KEY_VARIABLE) else None


def open_store(database: str) -> Store:
    """The gateway's store (created when missing)."""
    if is_postgres(database):
        return open_postgres(database, writing=True)
    return open_for_writing(database)


def serve_gateway(args: argparse.Namespace, out: TextIO) -> int:
    """Run the gateway until interrupted."""
    if args.host not in LOOPBACK and not args.allow_remote:
        raise CliError(f"--host {args.host} is not loopback; pass --allow-remote to serve it")
    try:  # both, before the database is opened (created) or anything printed
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as err:
        raise CliError(INSTALL_HINT) from err
    tracing = tracing_for(getattr(args, "otel", None), os.environ)
    store = open_store(args.db)
    upstream = upstream_of(args)
    try:
        app = gateway_app(
            store,
            agent=args.agent or None,
            upstream=upstream,
            tracer_provider=tracing.telemetry(),
        )
    except ImportError as err:
        tracing.close()
        raise CliError(INSTALL_HINT) from err
    where = url_for_humans(args.db) if is_postgres(args.db) else args.db
    target = upstream or "the local simulator (offline)"
    print(
        f"gateway on http://{args.host}:{args.port} -> {target}; transcripts in {where}", file=out
    )
    print(f"set your client's base URL to it and name the agent in {AGENT_HEADER}", file=out)
    out.flush()
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        tracing.close()  # the spans still batched are exported now
        close = getattr(store, "close", None)
        if callable(close):
            close()
    return 0
