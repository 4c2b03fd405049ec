"""The facade's side of on-demand compaction: when to ask, the call, failures, the fallback.

One ``Compactor`` per ``ContextManager``. It keeps, per branch, the last committing compile
(``note``): the request a compaction repeats (rule 25: exactly a request already sent). A
compaction is due when the strategy is ``Compact`` and that request passed its trigger. A
background compaction (rule 27) is ``pending`` from ``begin`` to ``finish``: meanwhile no second
one is asked on the branch, and an edit (``edited``, or any writer's: the store's change serial),
a branch switch, or a compaction or fold another writer stored on the branch (rule 24: only the
newest block is sent) abandons it; the block is stored in one append when it arrives, or not at
all.
Failures: a ``stop_reason`` other than ``compaction`` stores nothing (``_compact_step``); a
model that cannot compact (a 400 saying so) or ``FAILURE_LIMIT`` failures in a row switch the
manager to the strategy's ``fallback`` with one warning (``compaction_fallback``). Anything
else the call raises (a 529 ``compaction_unavailable`` after the caller's retries) reaches
the caller with the history as it was. In memory only: after a restart the first turn's
compile is noted again, and the compaction waits for it; a background compaction running at a
crash was never stored, so it is simply asked again. Under another strategy (a ``Compact`` used
once, as the CLI's ``/compact``) the requests are kept only while the branch's hot render is
(``release``): a request shares most of its objects with that render, and nothing else would
bound it.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import CompileResult

from ._compact_step import (
    CompactionPlan,
    changed_after,
    compaction_plan,
    opened_after,
    starts,
    store_compaction,
)
from ._host import CompileHost
from ._strategies import KEEP_TURNS_LIMIT, Compact, Passthrough

log = library_logger("context_manager.compile")

FAILURE_LIMIT = 3
"""Compactions in a row that returned no block before the fallback is used."""

UNSUPPORTED_TEXT = "does not support on-demand compaction"
"""Part of the provider's 400 for a model that cannot compact (rule 24's model list)."""

Call = Callable[[dict[str, Any]], Awaitable[object]]
"""Sends one compaction request, returns the response (the runtime's retries around it)."""


@attrs.frozen(eq=False)
class PendingCompaction:
    """A compaction request sent in the background (provider rule 27), not yet answered.

    ``request`` is what to send; ``plan.messages`` how many messages it held (exactly those
    are swapped out when the block arrives). Give the answer to ``cm.finish_compaction``.
    """

    plan: CompactionPlan
    edits: int
    """The manager's edit count when it was asked (an edit since abandons it)."""
    serial: int | None = None
    """The store's change serial when it was asked: an edit since by any writer (another
    process or host) abandons it too (``None``: not read)."""

    @property
    def request(self) -> dict[str, Any]:
        """The compaction request to send."""
        return self.plan.request


class Compactor:
    """When and how a manager compacts (see the module docstring)."""

    def __init__(self, host: CompileHost, keeps_hot: Callable[[str], bool]) -> None:
        # a proxy, as the compiler's: a manager the host drops is freed at once
        self._host: CompileHost = weakref.proxy(host)
        self._keeps_hot = keeps_hot
        """Whether a branch's render is counted hot now (``_resident.kept_hot``)."""
        self._sent: dict[str, list[CompileResult]] = {}
        self._pending: dict[str, PendingCompaction] = {}
        self._diverged: dict[str, str] = {}
        """Branches whose history a compile rendered otherwise while their compaction ran."""
        self._failures = 0
        self._edits = 0

    def note(self, result: CompileResult) -> None:
        """``result`` was committed: the newest request a compaction may repeat (a retry of
        the same messages replaces the request it retries)."""
        if result.dry:
            return
        pending = self._pending.get(result.branch)
        if pending is not None and not starts(pending.plan.request, result.request):
            # rule 27: append-only on the full history while it runs; a strip or a jump
            # sent the summarized messages otherwise, so the block would not stand for them
            self._diverged[result.branch] = "the history it summarizes was sent otherwise"
        if not self._holds(result.branch):
            self._sent.pop(result.branch, None)
            return
        sent = self._sent.setdefault(result.branch, [])
        if sent and sent[-1].last_sequence == result.last_sequence:
            sent.pop()
        sent.append(result)
        strategy = self._host.strategy
        keep = strategy.keep_turns if isinstance(strategy, Compact) else 1
        del sent[: max(0, len(sent) - min(max(keep, 1), KEEP_TURNS_LIMIT))]

    def release(self, key: str) -> None:
        """Branch ``key``'s hot render is gone: so are its requests, unless the strategy is
        ``Compact``."""
        if not isinstance(self._host.strategy, Compact):
            self._sent.pop(key, None)

    def _holds(self, key: str) -> bool:
        # a request is the size of the window and shares its objects with the hot render: kept
        # under ``Compact`` always, otherwise only beside the hot render (whose bound counts it)
        return isinstance(self._host.strategy, Compact) or self._keeps_hot(key)

    def edited(self) -> None:
        """A stored message was edited: a compaction running now is abandoned when it ends."""
        self._edits += 1

    def pending(self) -> PendingCompaction | None:
        """The current branch's background compaction, while it runs."""
        return self._pending.get(self._host.current_branch_key())

    def due(self) -> bool:
        """The strategy compacts, none is running on the branch, and the branch's last request
        passed its trigger."""
        strategy = self._host.strategy
        key = self._host.current_branch_key()
        sent = self._sent.get(key)
        return (
            isinstance(strategy, Compact)
            and key not in self._pending
            and sent is not None
            and bool(sent)
            and sent[-1].tokens > strategy.trigger_tokens
        )

    def plan(self) -> CompactionPlan | None:
        """The compaction to ask for now, or ``None`` (not at a boundary, or one is running)."""
        strategy = self._host.strategy
        key = self._host.current_branch_key()
        if not isinstance(strategy, Compact) or key in self._pending:
            return None
        return compaction_plan(self._host, self._sent.get(key, ()), strategy)

    def begin(self) -> PendingCompaction | None:
        """Start a background compaction (see ``Compacting.begin_compaction``)."""
        plan = self.plan()
        if plan is None:
            return None
        serial = self._host.store.change_serial(self._host.namespace)
        pending = PendingCompaction(plan, self._edits, serial)
        self._pending[plan.branch] = pending
        self._diverged.pop(plan.branch, None)
        log.info(
            "compaction_started",
            namespace=self._host.namespace,
            branch=plan.branch,
            held=plan.messages,
            covers_upto=plan.covers_upto,
        )
        return pending

    def finish(self, pending: PendingCompaction, answer: object) -> MessageId | None:
        """Swap in the block ``answer`` carries (see ``Compacting.finish_compaction``)."""
        if self._pending.get(pending.plan.branch) is not pending:
            return None  # abandoned already
        del self._pending[pending.plan.branch]
        why = self._diverged.pop(pending.plan.branch, None) or self._spoiled(pending, answer)
        if why is not None:
            self._abandoned(pending, why)
            return None
        stored = self._stored(pending.plan, answer)
        if stored is not None:
            self._sent.pop(pending.plan.branch, None)  # requests sent meanwhile carry no block
        return stored

    def _spoiled(self, pending: PendingCompaction, answer: object) -> str | None:
        """Why ``pending``'s answer cannot be swapped in, or ``None``."""
        if isinstance(answer, BaseException):
            self._failed(answer)
            return f"the compaction call failed: {answer!r}"
        if pending.edits != self._edits or self._edited_elsewhere(pending):
            return "a stored message was edited while it ran"
        if self._host.current_branch_key() != pending.plan.branch:
            return "the current branch changed while it ran"
        plan = pending.plan
        if opened_after(self._host, plan.covers_upto):
            # another writer compacted or folded meanwhile: only the newest block is sent
            # (rule 24), and this older one would stand before turns that one summarized
            return "another compaction or fold was stored on the branch while it ran"
        if plan.summarizes_changes and changed_after(self._host, plan.covers_upto):
            return "a head change was appended while it ran, after one it summarizes (rule 26)"
        return None

    def _edited_elsewhere(self, pending: PendingCompaction) -> bool:
        """Whether a stored message was edited since ``pending`` was asked, by any writer."""
        if pending.serial is None:
            return False
        return self._host.store.changed_since(self._host.namespace, pending.serial) is not None

    def abandon(self, pending: PendingCompaction, why: str) -> None:
        """Forget ``pending``: its answer, if one comes, is not swapped in."""
        if self._pending.get(pending.plan.branch) is pending:
            del self._pending[pending.plan.branch]
            self._diverged.pop(pending.plan.branch, None)
            self._abandoned(pending, why)

    def _abandoned(self, pending: PendingCompaction, why: str) -> None:
        """Log ``compaction_abandoned``; the history is as it was (returns ``None``)."""
        log.warning(
            "compaction_abandoned",
            namespace=self._host.namespace,
            branch=pending.plan.branch,
            reason=why[:300],
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

    def _failed(self, err: BaseException) -> None:
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
        """The strategy is ``Compact``, no background compaction runs on the branch, and the
        branch's last request passed its trigger."""
        return self._compactor.due()

    @property
    def compaction_pending(self) -> PendingCompaction | None:
        """The current branch's background compaction while it runs, else ``None``."""
        return self._compactor.pending()

    def compact(self, client: Any) -> MessageId | None:
        """Compact the branch now through a sync ``anthropic`` client: a request already sent
        (the one whose reply starts the ``keep_turns`` newest replies) is sent again as a
        compaction request (provider rule 23) and the block stored as a ``compaction``
        message, rendered first from the next compile on. Returns its id, or ``None``: not at
        a boundary, a background compaction is running, or no block came back (history as it
        was). Needs the ``Compact`` strategy.

        Raises:
            anthropic.APIStatusError: the provider refused the request.
        """
        return self._compactor.compact(client)

    async def compact_async(self, client: Any, *, call: Call | None = None) -> MessageId | None:
        """``compact`` through an async client, or ``call(request)`` (the runtime's retries)."""
        return await self._compactor.compact_async(client, call)

    def begin_compaction(self) -> PendingCompaction | None:
        """Start a background compaction (provider rule 27): the request to send now, while
        the agent goes on, or ``None`` (not at a boundary, one already running, no
        ``Compact`` strategy). Until ``finish_compaction`` or ``abandon_compaction`` the
        branch stays append-only: no second compaction is asked, and an edit abandons it.
        Nothing is stored: a crash meanwhile loses nothing (the next trigger asks again)."""
        return self._compactor.begin()

    def finish_compaction(self, pending: PendingCompaction, answer: object) -> MessageId | None:
        """Swap in the block of ``answer`` (the response, or the exception the call raised):
        stored as a ``compaction`` message covering exactly the messages the request held,
        everything appended since kept after it; the next compile sends the swapped history.
        ``None`` when no block came back (``compaction_skipped``) or the compaction was
        abandoned (``compaction_abandoned``: the call failed, a message was edited, the branch
        changed, or another writer compacted or folded it while it ran); the history is then as
        it was."""
        return self._compactor.finish(pending, answer)

    def abandon_compaction(self, pending: PendingCompaction, why: str = "abandoned") -> None:
        """Forget a background compaction; its answer, if one comes, is not swapped in."""
        self._compactor.abandon(pending, why)
