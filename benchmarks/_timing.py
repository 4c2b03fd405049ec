"""Timing helpers: a monotonic clock and medians. Nothing here knows what it times."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

clock = time.perf_counter
"""The clock every figure is read from (monotonic, highest resolution available)."""


def median(samples: Sequence[float]) -> float:
    """The median of ``samples``.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("no samples to take a median of; run at least one repetition")
    return float(statistics.median(samples))


def spread(samples: Sequence[float]) -> dict[str, float]:
    """How many samples, and their fastest, median, 90th percentile and slowest (seconds)."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, (len(ordered) * 9) // 10)]
    return {
        "n": len(ordered),
        "min": ordered[0],
        "median": median(ordered),
        "p90": p90,
        "max": ordered[-1],
    }


def timed(action: Callable[[], T]) -> tuple[float, T]:
    """``(seconds, result)`` of one call of ``action``."""
    started = clock()
    result = action()
    return clock() - started, result


def settle() -> None:
    """Collect garbage before a series, so one scenario's garbage is not timed in the next."""
    gc.collect()
