"""The ``context-manager`` command line: argument parsing, logging set-up and dispatch.

The only place logging is configured (never at library import): structlog events go to stderr,
human-readable, warnings and up unless ``--verbose``; stdout carries only the program's output.
Exit codes: 0 done, 1 a non-interactive `run` in which a turn failed, 2 bad input (one line on
stderr), 130 interrupted or stopped (Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO, TypeAlias

import structlog

from context_manager._model._errors import ContextManagerError

from ._db import SIDECAR_SUFFIX, CliError
from ._demo import run_demo
from ._gateway import add_gateway, serve_gateway
from ._otel import OTEL_CHOICES
from ._run import COMMANDS, Stopped, run_session
from ._serve import add_serve_commands, demo_then_serve
from ._transcript import show_transcript
from ._verify import add_verify, verify_branch

PROG = "context-manager"
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
"""128 + SIGINT, as shells report a process stopped by Ctrl-C."""

Handler = Callable[[argparse.Namespace, TextIO], int]


def configure_logging(verbose: bool, stream: TextIO | None = None) -> None:
    """Send structlog events to ``stream`` (stderr), readable, warnings and up (info: verbose)."""
    target = stream if stream is not None else sys.stderr
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            structlog.dev.ConsoleRenderer(colors=target.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.INFO if verbose else logging.WARNING
        ),
        logger_factory=structlog.PrintLoggerFactory(target),
        cache_logger_on_first_use=False,
    )


def _color(out: TextIO) -> bool:
    return out.isatty() and "NO_COLOR" not in os.environ


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    if args.serve:
        return demo_then_serve(args, out, color=_color(out))
    return run_demo(args, out, color=_color(out))


def _run(args: argparse.Namespace, out: TextIO) -> int:
    return run_session(args, out, sys.stdin, color=_color(out))


def _transcript(args: argparse.Namespace, out: TextIO) -> int:
    return show_transcript(args, out, color=_color(out))


def _gateway(args: argparse.Namespace, out: TextIO) -> int:
    return serve_gateway(args, out)


def build_parser() -> argparse.ArgumentParser:
    """The parser for every command (``--help`` on each)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Keep a resident Claude agent's signed reasoning valid, and tell it when "
        "reasoning goes.",
        epilog="Exit codes: 0 done, 2 bad input, 130 interrupted (Ctrl-C).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", help="log info events too (stderr)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = _add_demo(commands, common)
    _add_run(commands, common)
    _add_transcript(commands, common)
    add_gateway(commands, common, _gateway)
    add_verify(commands, common, verify_branch)
    add_serve_commands(commands, common, demo)
    return parser


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""``argparse``'s sub-parsers action."""


def _add_demo(commands: Commands, common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the scenes that produce every [reasoning] line form (no API key)",
        description="Run a resident agent on SQLite against the local simulator, through scenes "
        "that produce every [reasoning] line form, printing the transcript as it goes and a "
        "summary. No API key, no network.",
    )
    demo.add_argument(
        "--db",
        metavar="PATH",
        help="keep the transcript in this SQLite file (must not hold an agent 'ada' yet); "
        f"its reasoning sidecar goes to PATH{SIDECAR_SUFFIX}. Default: a temporary file",
    )
    demo.set_defaults(handler=_demo)
    return demo


def _add_run(commands: Commands, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser(
        "run",
        parents=[common],
        help="talk to a resident agent over stdin",
        description="An interactive resident agent, one line of stdin per turn (a pipe works). "
        "The real API when ANTHROPIC_API_KEY is set, the local simulator otherwise. Everything "
        "is stored as it happens; a second run on the same file continues the same agent and "
        f"branch. Commands: {COMMANDS}.",
        epilog="Exit codes: 0 at /quit or end of input, 1 at the end of input when a turn failed "
        "(stdin not a terminal), 2 bad input, 130 at Ctrl-C (nothing "
        "stored is lost; an interrupted turn is finished by the next run).",
    )
    run.add_argument(
        "--db",
        metavar="PATH",
        required=True,
        help=f"the SQLite file (created when missing; sidecar at PATH{SIDECAR_SUFFIX}), or a "
        "postgresql:// URI (reasoning text then stays in the shared transcript)",
    )
    run.add_argument("--agent", metavar="NAME", required=True, help="the agent's name")
    run.add_argument(
        "--model", metavar="M", default=None, help="the model (default: claude-opus-5-5)"
    )
    run.add_argument(
        "--otel",
        choices=OTEL_CHOICES,
        default=None,
        help="print OpenTelemetry spans and metrics with the SDK's console exporter (stderr); "
        "without it, the standard OTEL_* variables are honoured when the SDK is installed",
    )
    run.set_defaults(handler=_run)


def _add_transcript(commands: Commands, common: argparse.ArgumentParser) -> None:
    transcript = commands.add_parser(
        "transcript",
        parents=[common],
        help="read a transcript and its notices",
        description="Read an agent's transcript (and its [reasoning] notices) from a database "
        "without writing to it.",
    )
    transcript.add_argument("path", metavar="PATH", help="the SQLite file, or a postgresql:// URI")
    transcript.add_argument(
        "--agent", metavar="NAME", help="the agent (default: the only one in the file)"
    )
    transcript.add_argument(
        "--branch", metavar="NAME", help="the branch (default: the agent's current one)"
    )
    transcript.add_argument(
        "--kind", metavar="KIND", help="only messages of this kind (e.g. reasoning-loss)"
    )
    transcript.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line: id, sequence, branch, role, kind, target, text, "
        "summary, blocks, created_at",
    )
    transcript.add_argument(
        "--reasoning",
        action="store_true",
        help="show the audit reader's view of the replies' reasoning instead (text marked "
        "untrusted)",
    )
    transcript.add_argument(
        "--usage",
        action="store_true",
        help="sum each turn's tokens instead: uncached input, cache read, cache write, output "
        "(from the usage stored with each reply); with --json, one object per turn and a total",
    )
    transcript.add_argument(
        "--sidecar",
        metavar="PATH",
        help=f"the reasoning sidecar for --reasoning (default: the database's PATH{SIDECAR_SUFFIX}"
        ", when it exists)",
    )
    transcript.set_defaults(handler=_transcript)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("thinking-context-manager")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without install
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    configure_logging(args.verbose)
    try:
        return handler(args, sys.stdout)
    except (CliError, ContextManagerError) as err:
        print(f"{PROG}: error: {_one_line(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as err:
        said = "stopped" if isinstance(err, Stopped) else "interrupted"
        print(f"{PROG}: {said}; {after_interrupt(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `| head`: the reader left; not an error of ours
        _silence_stdout()
        return 0


def after_interrupt(args: argparse.Namespace) -> str:
    """What became of the command's files at Ctrl-C, said after "interrupted; "."""
    if args.command == "demo":
        if args.db is None:
            return "the demo's temporary database was removed (pass --db PATH to keep one)"
        return f"what the demo stored so far is kept in {args.db}"
    if args.command in ("transcript", "verify"):
        return "nothing was written"
    if args.command == "serve":
        return "the console stopped; nothing was written"
    return "everything stored so far is kept"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _silence_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
