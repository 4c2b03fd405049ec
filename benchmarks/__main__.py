"""``python -m benchmarks [--quick] [--json PATH] [--store postgres]``: run, print, write JSON.

Exits 0 when every target is met, 1 when one is missed. Library log events below ``error`` are
dropped (``quiet_logging``), as a production host would filter them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence

from ._editing import editing_rows
from ._quiet import quiet_logging
from ._report import all_met, describe_machine, table
from ._run import Config, run
from ._telemetry import main as telemetry_main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks; returns 0 when every target is met, 1 when one is missed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions (every size still measured); under 3 minutes",
    )
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="toy sizes, to check the code runs (its figures mean nothing)",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where the histories live (default: sqlite files in a temporary folder)",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("CONTEXT_MANAGER_POSTGRES_DSN"),
        help="for --store postgres: a server whose role may create databases (default: "
        "$CONTEXT_MANAGER_POSTGRES_DSN)",
    )
    parser.add_argument(
        "--only",
        choices=("telemetry",),
        help="run one scenario alone and print its figure (telemetry: telemetry_overhead)",
    )
    args = parser.parse_args(argv)
    if args.only == "telemetry":
        return telemetry_main(["--quick"] if args.quick else [])
    if args.store == "postgres" and not args.dsn:
        parser.error("--store postgres needs --dsn or CONTEXT_MANAGER_POSTGRES_DSN")
    quiet_logging()
    config = Config.tiny() if args.smoke else Config.quick_run() if args.quick else Config.full()
    with tempfile.TemporaryDirectory(prefix="cm-bench-") as workdir:
        report = run(config, workdir, postgres=args.dsn if args.store == "postgres" else None)
    print(f"Machine: {describe_machine(report['machine'])}")
    print(f"Store: {report['store']}")
    kind = "--smoke" if args.smoke else "--quick" if config.quick else "full"
    print(f"Run: {kind}; generation {sum(report['details']['generation_seconds'].values()):.1f} s")
    print()
    print(table(report))
    print()
    print(editing_rows(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2, sort_keys=False)
            out.write("\n")
    return 0 if all_met(report) else 1


if __name__ == "__main__":
    sys.exit(main())
