"""Logging for a benchmark process: library events below ``error`` are dropped.

A production host filters its logs the same way. With structlog's default configuration every
event is printed, and the teller's alert alone (a warning) would print half a million lines.
"""

from __future__ import annotations

import logging

import structlog


def quiet_logging() -> None:
    """Configure structlog (process-wide) to drop events below ``error``."""
    # No ``cache_logger_on_first_use``: a cached logger would outlive a later reconfiguration
    # (tests that call this reset structlog afterwards, and must get their loggers back).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
