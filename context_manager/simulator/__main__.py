"""``python -m context_manager.simulator``: serve the simulator on loopback until interrupted.

Prints the base URL on one line of stdout once bound (logs go to stderr), then serves until SIGINT
or SIGTERM and exits 0. Configures structlog for this process only: it is an entry point.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import structlog

from ._simulator import DEFAULT_KEY, Simulator


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m context_manager.simulator",
        description="A local Messages API that enforces thinking-block binding (loopback only).",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=0, help="the port (default 0: a free one)")
    parser.add_argument("--key", default=None, help="the signing key (default: the shared key)")
    args = parser.parse_args(argv)
    # stdout carries only the URL (a script reads it); structured logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    key = args.key.encode() if args.key else DEFAULT_KEY
    try:
        server = Simulator(key=key).server(args.host, args.port)
        url = server.start()
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(url, flush=True)
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
