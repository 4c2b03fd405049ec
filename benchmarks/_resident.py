"""Resident agents in one process: what a compiled window's cache costs in memory (issue 18).

Run in a child process (``spawn``), so memory the parent freed earlier cannot hide the growth:
open the store, warm everything with one manager, then open ``agents`` more managers on the same
agent, compile each once and keep them all. The figure is the RSS growth per manager divided by
the request's wire bytes.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any

from context_manager import ContextManager, Head

from ._history import BINDING
from ._places import Place
from ._quiet import quiet_logging

RESIDENT_AGENTS = 10
"""Managers kept resident at once (each with its compiled window cached)."""


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc``; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def wire_bytes(request: dict[str, Any]) -> int:
    """The request's size as JSON on the wire (compact separators)."""
    return len(json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode())


def resident_memory(
    place: Place, namespace: str, strategy: Any, head: Head, agents: int = RESIDENT_AGENTS
) -> dict[str, float]:
    """RSS growth per resident manager, and the request's wire bytes (run it in a child)."""
    quiet_logging()
    store = place.open()
    try:
        warm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        size = wire_bytes(warm.compile(head, dry_run=True).request)
        del warm
        gc.collect()
        before = rss_bytes()
        kept = []
        for _ in range(agents):
            cm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
            cm.compile(head)
            kept.append(cm)
        gc.collect()
        growth = (rss_bytes() - before) / agents
    finally:
        store.close()
    return {
        "agents": agents,
        "rss_growth_per_agent": growth,
        "request_wire_bytes": size,
        "cache_bytes_per_agent": growth / size if size else 0.0,
    }
