"""Exact token counts from the API's ``count_tokens`` endpoint, cached, with a fallback.

``ApiTokenCounter`` is an estimator (``ContextManager.open(..., estimator=...)``) that also counts
whole requests. The compiler asks it once per compile for the finished request
(``count_request``): one ``count_tokens`` call, or none when that request was counted before.
From each answer it learns exact counts by difference: what the request holds beyond the
messages and head it already knows is the count of the ones it does not (split by their
character estimates when there are several), so a steady compile (one new message) learns that
message's exact count. Per-message estimates (``__call__``, what windows and folds are judged
by) are the learned counts, else the character estimate scaled by what was learned so far.
When the endpoint fails it falls back to the character estimate and logs
``token_count_failed`` once per run of failures.

Thread-safe (one lock around the caches); the counting call runs outside it.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import anthropic

from context_manager._model._canonical import canonical_json, strip_cache_control
from context_manager._model._log import library_logger

from ._strategies import estimate_tokens

log = library_logger("context_manager.tokens")

COUNT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "thinking",
        "tool_choice",
        "output_config",
        "context_management",
        "mcp_servers",
        "betas",
    }
)
"""Request fields ``count_tokens`` takes (``max_tokens``, ``metadata``, sampling settings and
``stream`` are left out; ``betas`` goes as the header, as for a call)."""

CACHE_LIMIT = 50_000
"""Counts kept per kind (messages, requests) before that cache is emptied."""

CountFunction: TypeAlias = Callable[[dict[str, Any]], int]
"""``count(params) -> input tokens``: params are ``count_tokens`` keyword arguments."""

PairFunction: TypeAlias = Callable[[dict[str, Any]], tuple[int, int]]
"""``count(params) -> (input tokens as sent, as the API's context edits leave them)``."""


def count_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ``count_tokens`` keyword arguments for a request body (markers removed: they never
    change a count).

    >>> count_params({"model": "m", "max_tokens": 9, "messages": [], "metadata": {}})
    {'model': 'm', 'messages': []}
    """
    return {k: strip_cache_control(v) for k, v in body.items() if k in COUNT_FIELDS}


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _head_key(system: Any, tools: Any) -> str:
    """One key for a head however its system is spelled (a string or its one text block)."""
    system = strip_cache_control(system)
    if isinstance(system, list | tuple) and len(system) == 1:
        only = system[0]
        if isinstance(only, Mapping) and set(only) == {"type", "text"} and only["type"] == "text":
            system = only["text"]
    return _digest({"head": [system or None, list(strip_cache_control(tools or []))]})


def _item_key(value: Any) -> str:
    if (
        isinstance(value, Mapping)
        and "role" not in value
        and ("system" in value or "tools" in value)
    ):
        return _head_key(value.get("system"), value.get("tools"))
    return _digest(strip_cache_control(value))


class ApiTokenCounter:
    """Token counts as the API counts them (``POST /v1/messages/count_tokens``).

    Args:
        client: an ``anthropic.Anthropic`` (a sync client: the compile is sync), or a function
            ``count(params) -> int`` taking ``count_tokens`` keyword arguments. With the async
            runtime, each compile that counts waits one round trip on the event loop; pass a
            function that answers from your own cache, or compile in a worker thread, if that
            matters.
        fallback: the estimate used before anything is learned and when the endpoint fails
            (default: the character estimate, ``estimate_tokens``).

    Example:
        ``cm = ContextManager.open(store, estimator=ApiTokenCounter(anthropic.Anthropic()))``
    """

    def __init__(
        self,
        client: anthropic.Anthropic | CountFunction,
        *,
        fallback: Callable[[Any], int] = estimate_tokens,
    ) -> None:
        self._count: PairFunction = _as_pair(client) if callable(client) else _sdk_count(client)
        self.fallback = fallback
        self.calls = 0
        """``count_tokens`` calls made (successful or not)."""
        self._lock = threading.Lock()
        self._items: dict[str, int] = {}
        self._requests: dict[str, int] = {}
        self._edited: dict[str, int] = {}
        self._learned_exact = 0
        self._learned_estimate = 0
        self._failing = False

    # the estimator
    def __call__(self, value: Any) -> int:
        """The count of one wire message (or of a head, ``{"system": ..., "tools": ...}``):
        exact once learned, else the fallback estimate scaled by what was learned so far."""
        key = _item_key(value)
        with self._lock:
            known = self._items.get(key)
            scale = self._learned_exact / self._learned_estimate if self._learned_estimate else 1.0
        if known is not None:
            return known
        return max(1, round(self.fallback(value) * scale))

    # whole requests
    def count_request(self, body: Mapping[str, Any]) -> int | None:
        """The exact input tokens of a request body, or ``None`` when the endpoint failed.

        One ``count_tokens`` call, or none when the same request (markers aside) was counted
        before. Learns the counts of the messages and head it did not know (see the module).
        Cost besides the call: O(request) to digest it (the request is the window, not the
        history).
        """
        params = count_params(body)
        key = _digest(params)
        with self._lock:
            known = self._requests.get(key)
        if known is not None:
            return known
        self.calls += 1
        try:
            total, edited = self._count(params)
        except Exception as err:  # any failure: fall back, never fail the compile
            with self._lock:
                first, self._failing = not self._failing, True
            if first:
                log.warning("token_count_failed", error=repr(err), fallback="character estimate")
            return None
        with self._lock:
            self._failing = False
            if len(self._requests) > CACHE_LIMIT:
                self._requests.clear()
                self._edited.clear()
            self._requests[key] = total
            self._edited[key] = edited
            self._learn(body, total)
        return total

    def count_edited(self, body: Mapping[str, Any]) -> int | None:
        """The input tokens of ``body`` as the API sees it after its context edits (the
        ``input_tokens`` ``count_tokens`` answers for a request with ``context_management``;
        the same as ``count_request`` without), or ``None`` when the endpoint failed. Shares
        ``count_request``'s call and cache: counting a request both ways costs one call."""
        if self.count_request(body) is None:
            return None
        with self._lock:
            return self._edited.get(_digest(count_params(body)))

    def _learn(self, body: Mapping[str, Any], total: int) -> None:
        parts: list[tuple[str, Any]] = [(_head_key(body.get("system"), body.get("tools")), body)]
        parts += [(_item_key(m), m) for m in body.get("messages", [])]
        unknown: dict[str, int] = {}
        rest = total
        for key, value in parts:
            if key in self._items:
                rest -= self._items[key]
            elif key not in unknown:
                head = value is body
                estimate = self.fallback(
                    {"system": body.get("system"), "tools": list(body.get("tools", []))}
                    if head
                    else value
                )
                unknown[key] = max(1, estimate)
        if not unknown or rest <= 0:
            return
        if len(self._items) > CACHE_LIMIT:
            self._items.clear()
        spread = sum(unknown.values())
        for key, estimate in unknown.items():
            self._items[key] = max(1, round(rest * estimate / spread))
        self._learned_exact += rest
        self._learned_estimate += spread


def _as_pair(count: CountFunction) -> PairFunction:
    """A host's ``count(params) -> int`` as a pair: it counts no edits."""

    def pair(params: dict[str, Any]) -> tuple[int, int]:
        total = int(count(params))
        return total, total

    return pair


def _sdk_count(client: anthropic.Anthropic) -> PairFunction:
    """Counts of requests as sent and as edited: with ``context_management`` the API answers
    the edited count as ``input_tokens`` and the sent one as
    ``context_management.original_input_tokens``; the per-message counts are learned from the
    sent one (the client sends its full history), the pressure passes measure the edited one."""

    def count(params: dict[str, Any]) -> tuple[int, int]:
        counted = client.beta.messages.count_tokens(**params)
        edited = getattr(counted, "context_management", None)
        original = getattr(edited, "original_input_tokens", None)
        sent = int(original if isinstance(original, int) else counted.input_tokens)
        return sent, int(counted.input_tokens)

    return count


def request_tokens(estimator: Callable[[Any], int], body: Mapping[str, Any]) -> int | None:
    """The exact count of ``body`` when ``estimator`` counts whole requests, else ``None``."""
    count = getattr(estimator, "count_request", None)
    return count(body) if callable(count) else None
