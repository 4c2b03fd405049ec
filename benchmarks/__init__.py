"""Benchmarks: compile cost must follow what changed, not how long the history is (issue 8),
and a resident agent's input must be read from the prompt cache (issue 19).

Run ``python -m benchmarks [--quick] [--json PATH]``. Figures are ratios measured in one run;
the test suite never asserts on times (``tests/project/test_benchmarks.py`` only runs the code
paths).
"""

from __future__ import annotations

from ._baseline import full_recompile
from ._cache import POLICIES, CacheConfig, SessionUsage, cache_sessions, run_session
from ._history import History, make_head, mean_message_tokens
from ._quiet import quiet_logging
from ._report import REQUIRED_KEYS, all_met, build_report, describe_machine, machine, table
from ._run import Config, run
from ._told import ToldReport, told_state

__all__ = [
    "POLICIES",
    "REQUIRED_KEYS",
    "CacheConfig",
    "Config",
    "History",
    "SessionUsage",
    "ToldReport",
    "all_met",
    "build_report",
    "cache_sessions",
    "describe_machine",
    "full_recompile",
    "machine",
    "make_head",
    "mean_message_tokens",
    "quiet_logging",
    "run",
    "run_session",
    "table",
    "told_state",
]
