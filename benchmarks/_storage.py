"""Storage scenarios: durable append throughput and reopen time of a large store.

Appends go through ``add_message`` outside any batch, so each is its own durable commit (WAL,
``synchronous=FULL``), as a resident agent writes. Reopen is what a restarted host pays before
its first request: open the file, open the agent, compile once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from context_manager import ContextManager, Head, Store, TextBlock

from ._history import BINDING
from ._timing import clock, settle, timed

APPEND_NAMESPACE = "appender"
"""Appends go to their own agent in the same file, so the measured agent's transcript stays a
conversation (a long run of user messages would merge into one huge rendered message)."""

APPEND_TEXT = "A new log line arrived: the replica caught up and the queue is empty again."


def append_throughput(opener: Callable[[], Store], count: int) -> float:
    """Durable appends per second to the store ``opener`` opens (one commit, one fsync, each)."""
    store = opener()
    try:
        cm = ContextManager.open(store, namespace=APPEND_NAMESPACE)
        content = [TextBlock(APPEND_TEXT)]
        settle()
        started = clock()
        for _ in range(count):
            cm.add_message("user", content)
        return count / (clock() - started)
    finally:
        store.close()


def reopen(
    opener: Callable[[], Store], namespace: str, strategy: Any, head: Head, repeats: int
) -> list[float]:
    """Seconds from nothing to the first compiled request: new store, open agent, compile."""

    def first_request() -> Store:
        store = opener()
        cm = ContextManager.open(store, namespace=namespace, binding=BINDING, strategy=strategy)
        cm.compile(head)
        return store

    settle()
    samples: list[float] = []
    for _ in range(repeats):
        seconds, store = timed(first_request)
        store.close()
        samples.append(seconds)
    return samples
