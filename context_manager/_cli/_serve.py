"""``context-manager serve`` and ``demo --serve``: the operator console on a database.

Read-only: the database (and its sidecar) are checked and opened as ``transcript`` opens them and
never written. Loopback unless ``--host`` names another address. Without ``--tokens`` one owner
token is made for the run and printed with the URL (it is the only way in: no token, no page).
On PostgreSQL the console also mirrors the live reasoning runtimes publish there
(``Runtime.publish_reasoning``). Registered by ``add_serve_commands`` (one call in
``build_parser``), so this module owns all of it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from context_manager._reasoning._store import ReasoningStore
from context_manager._store._postgres import PostgresStore
from context_manager._store._protocol import Store
from context_manager.runtime import MirroredReasoning
from context_manager.web import (
    LOOPBACK,
    Access,
    CallbackSource,
    ConsoleServer,
    ConsoleSource,
    Principal,
    StoreSource,
    create_app,
)
from context_manager.web._app import INSTALL_HINT

from ._db import (
    SIDECAR_SUFFIX,
    CliError,
    is_postgres,
    open_for_reading,
    open_postgres,
    open_sidecar,
    sidecar_path,
)
from ._demo import run_demo

DEFAULT_PORT = 8377
"""The console's port unless ``--port`` says otherwise (``0``: any free one)."""

RUN_OWNER = "owner"
"""The principal of the token made for a run without ``--tokens``."""


def add_serve_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    demo: argparse.ArgumentParser,
) -> None:
    """Add ``serve`` to ``commands`` and ``--serve`` (with the console's options) to ``demo``."""
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="open the operator console in the browser on a database",
        description="Serve the operator console (agents, transcripts with thinking markers, "
        "notices, usage per turn, reasoning for its readers) on loopback, reading the database "
        "without writing to it.",
    )
    serve.add_argument(
        "--db",
        metavar="PATH|URI",
        required=True,
        help=f"the SQLite file (its sidecar PATH{SIDECAR_SUFFIX} is read when present), or a "
        "postgresql:// URI",
    )
    _console_options(serve)
    serve.set_defaults(handler=serve_command)
    demo.add_argument(
        "--serve",
        action="store_true",
        help="after the scenes, keep the console open on the demo's database (Ctrl-C stops)",
    )
    _console_options(demo)


def _console_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help="the tokens file: one `TOKEN PRINCIPAL [AGENT ...]` per line, `*` for the owner "
        "(default: one owner token made for this run and printed)",
    )
    parser.add_argument("--host", default=LOOPBACK, help=f"where to listen (default {LOOPBACK})")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"the port (default {DEFAULT_PORT})"
    )


def _access(args: argparse.Namespace) -> tuple[Access, str | None]:
    """The tokens, and the token made for this run (``None`` with ``--tokens``)."""
    if args.tokens is not None:
        return Access.from_file(args.tokens), None
    token = secrets.token_urlsafe(24)
    return Access.of({token: Principal(RUN_OWNER, owner=True)}), token


@contextlib.contextmanager
def _database(where: str) -> Iterator[tuple[Store, ReasoningStore | None]]:
    if is_postgres(where):
        postgres = open_postgres(where, writing=False)
        try:
            yield postgres, None
        finally:
            postgres.close()
        return
    with open_for_reading(where) as store:
        sidecar = open_sidecar(sidecar_path(where), create=False)
        try:
            yield store, sidecar
        finally:
            if sidecar is not None:
                sidecar.close()


def serve_on(where: str, args: argparse.Namespace, out: TextIO) -> int:
    """Serve the console on the database ``where`` until Ctrl-C; returns 0."""
    access, token = _access(args)
    with _database(where) as (store, sidecar):
        durable = StoreSource(store, sidecar)
        mirror = MirroredReasoning(store) if isinstance(store, PostgresStore) else None
        source: ConsoleSource = durable
        if mirror is not None:
            source = CallbackSource(durable.agents, durable.context, mirror.hub)
        server = ConsoleServer(
            create_app(source, access),
            args.host,
            args.port,
            in_loop=mirror.start if mirror is not None else None,
            on_stop=mirror.stop if mirror is not None else None,
        )

        def announce(url: str) -> None:
            entry = f"{url}/?token={token}" if token is not None else f"{url}/"
            print(f"console: {entry}", file=out)
            if token is not None:
                print(
                    "(an owner token made for this run; --tokens FILE names principals)", file=out
                )
            print("Ctrl-C stops it.", file=out, flush=True)

        try:
            server.run(announce)
        except OSError as err:
            raise CliError(f"cannot listen on {args.host}:{args.port} ({err})") from err
    return 0


def require_web_extra() -> None:
    """Refuse in one line (exit 2), before anything runs, when the ``web`` extra is missing.

    Raises:
        CliError: starlette or uvicorn cannot be imported.
    """
    for module in ("starlette", "uvicorn"):
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise CliError(INSTALL_HINT) from err


def serve_command(args: argparse.Namespace, out: TextIO) -> int:
    """The ``serve`` command."""
    require_web_extra()
    return serve_on(args.db, args, out)


def demo_then_serve(args: argparse.Namespace, out: TextIO, *, color: bool) -> int:
    """``demo --serve``: the scenes, then the console on their database until Ctrl-C."""
    require_web_extra()  # before the scenes: a console that cannot start is said first
    if args.db is not None:
        run_demo(args, out, color=color)
        return serve_on(args.db, args, out)
    with tempfile.TemporaryDirectory(prefix="context-manager-demo-") as scratch:
        path = str(Path(scratch) / "demo.db")  # args.db stays None: Ctrl-C says it is removed
        scenes = argparse.Namespace(**{**vars(args), "db": path})
        run_demo(scenes, out, color=color, removed_when="the console stops")
        return serve_on(path, args, out)
