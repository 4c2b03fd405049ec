"""The facade's side of on-demand compaction: when to ask, the call, failures, the fallback.

One ``Compactor`` per ``ContextManager``. It keeps, per branch, the last committing compile
(``note``): the request a compaction repeats (rule 25: exactly a request already sent). A
compaction is due when the strategy is ``Compact`` and that request passed its trigger.
Failures: a ``stop_reason`` other than ``compaction`` stores nothing (``_compact_step``); a
model that cannot compact (a 400 saying so) or ``FAILURE_LIMIT`` failures in a row switch the
manager to the strategy's ``fallback`` with one warning (``compaction_fallback``). Anything else
the call raises (a 529 ``compaction_unavailable`` after the caller's retries) reaches the caller
with the history as it was. In memory only: after a restart the first turn's compile is noted
again, and the compaction waits for it. Under another strategy (a ``Compact`` used once, as the
CLI's ``/compact``) the request is kept only while the branch's hot render is (``release``): a
request shares its objects with that render, and nothing else would bound it.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from context_manager._model._errors import CompactionNotSupported
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import CompileResult

from ._compact_step import CompactionPlan, compaction_plan, store_compaction
from ._host import CompileHost
from ._strategies import Compact, Passthrough

log = library_logger("context_manager.compile")

FAILURE_LIMIT = 3
"""Compactions in a row that returned no block before the fallback is used."""

UNSUPPORTED_TEXT = "does not support on-demand compaction"
"""Part of the provider's 400 for a model that cannot compact (rule 24's model list)."""

Call = Callable[[dict[str, Any]], Awaitable[object]]
"""Sends one compaction request, returns the response (the runtime's retries around it)."""


class Compactor:
    """When and how a manager compacts (see the module docstring)."""

    def __init__(self, host: CompileHost, keeps_hot: Callable[[str], bool]) -> None:
        # a proxy, as the compiler's: a manager the host drops is freed at once
        self._host: CompileHost = weakref.proxy(host)
        self._keeps_hot = keeps_hot
        """Whether a branch's render is counted hot now (``_resident.kept_hot``)."""
        self._sent: dict[str, CompileResult] = {}
        self._failures = 0

    def note(self, result: CompileResult) -> None:
        """``result`` was committed: it is the request the next compaction repeats."""
        if result.dry:
            return
        if self._holds(result.branch):
            self._sent[result.branch] = result
        else:
            self._sent.pop(result.branch, None)

    def release(self, key: str) -> None:
        """Branch ``key``'s hot render is gone: so is its request, unless the strategy is
        ``Compact``."""
        if not isinstance(self._host.strategy, Compact):
            self._sent.pop(key, None)

    def _holds(self, key: str) -> bool:
        # a request is the size of the window and shares its objects with the hot render: kept
        # under ``Compact`` always, otherwise only beside the hot render (whose bound counts it)
        return isinstance(self._host.strategy, Compact) or self._keeps_hot(key)

    def due(self) -> bool:
        """The strategy compacts and the branch's last request passed its trigger."""
        strategy = self._host.strategy
        sent = self._sent.get(self._host.current_branch_key())
        return (
            isinstance(strategy, Compact)
            and sent is not None
            and sent.tokens > strategy.trigger_tokens
        )

    def plan(self) -> CompactionPlan | None:
        """The compaction to ask for now, or ``None`` (not at a boundary)."""
        strategy = self._host.strategy
        if not isinstance(strategy, Compact):
            return None
        if strategy.background:
            raise CompactionNotSupported("Compact(background=True) is not built yet")
        return compaction_plan(
            self._host, self._sent.get(self._host.current_branch_key()), strategy
        )

    def compact(self, client: Any) -> MessageId | None:
        """Compact now with a sync ``anthropic`` client; the stored block's id, or ``None``."""
        plan = self.plan()
        if plan is None:
            return None
        try:
            response = client.beta.messages.create(**plan.request)
        except Exception as err:
            self._failed(err)
            raise
        return self._stored(plan, response)

    async def compact_async(self, client: Any, call: Call | None = None) -> MessageId | None:
        """``compact`` with an async client (or ``call``, which sends the request)."""
        plan = self.plan()
        if plan is None:
            return None
        try:
            if call is not None:
                response = await call(plan.request)
            else:
                response = client.beta.messages.create(**plan.request)
                if inspect.isawaitable(response):
                    response = await response
        except Exception as err:
            self._failed(err)
            raise
        return self._stored(plan, response)

    def _stored(self, plan: CompactionPlan, response: object) -> MessageId | None:
        stored = store_compaction(self._host, plan, response)
        if stored is None:
            self._failures += 1
            if self._failures >= FAILURE_LIMIT:
                self._fall_back(f"{self._failures} compactions in a row returned no block")
        else:
            self._failures = 0
            self._sent.pop(self._host.current_branch_key(), None)
        return stored

    def _failed(self, err: Exception) -> None:
        if getattr(err, "status_code", None) == 400 and UNSUPPORTED_TEXT in str(err):
            self._fall_back(str(err))

    def _fall_back(self, why: str) -> None:
        strategy = self._host.strategy
        if not isinstance(strategy, Compact):
            return
        fallback = strategy.fallback if strategy.fallback is not None else Passthrough()
        log.warning(
            "compaction_fallback",
            namespace=self._host.namespace,
            reason=why[:300],
            fallback=type(fallback).__name__,
        )
        self._host.strategy = fallback


class Compacting:
    """The facade's compaction methods (``ContextManager`` mixes this in)."""

    _compactor: Compactor

    def compaction_due(self) -> bool:
        """The strategy is ``Compact`` and the branch's last request passed its trigger."""
        return self._compactor.due()

    def compact(self, client: Any) -> MessageId | None:
        """Compact the branch now through a sync ``anthropic`` client: the last committing
        compile's request is sent again as a compaction request (provider rule 23) and the
        block stored as a ``compaction`` message, rendered first from the next compile on.
        Returns its id, or ``None``: not at a boundary, or no block came back (history as
        it was). Needs the ``Compact`` strategy.

        Raises:
            CompactionNotSupported: ``Compact(background=True)``.
            anthropic.APIStatusError: the provider refused the request.
        """
        return self._compactor.compact(client)

    async def compact_async(self, client: Any, *, call: Call | None = None) -> MessageId | None:
        """``compact`` through an async client, or ``call(request)`` (the runtime's retries)."""
        return await self._compactor.compact_async(client, call)
