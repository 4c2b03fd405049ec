"""Benchmarks: compile cost must follow what changed, not how long the history is (issue 8).

Run ``python -m benchmarks [--quick] [--json PATH]``. Figures are ratios measured in one run;
the test suite never asserts on times (``tests/test_benchmarks.py`` only runs the code paths).
"""

from __future__ import annotations

from ._baseline import full_recompile
from ._history import History, make_head, mean_message_tokens
from ._quiet import quiet_logging
from ._report import REQUIRED_KEYS, all_met, build_report, describe_machine, machine, table
from ._run import Config, run
from ._told import ToldReport, told_state

__all__ = [
    "REQUIRED_KEYS",
    "Config",
    "History",
    "ToldReport",
    "all_met",
    "build_report",
    "describe_machine",
    "full_recompile",
    "machine",
    "make_head",
    "mean_message_tokens",
    "quiet_logging",
    "run",
    "table",
    "told_state",
]
