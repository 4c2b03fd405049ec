"""The runtime's server compaction: foreground at a turn's end, or in the background (rule 27).

Called only where no tool round is open (the turn ended without a tool call). Every compaction
call goes through the runtime's retry policy (a 529 ``compaction_unavailable`` is retried); a
failure never fails a turn: it is logged (``compaction_failed``) and the history stays as it
was, so a later turn's end tries again.

Background (``Compact(background=True)``): ``Background.start`` sends the request as an asyncio
task and the agent's turns go on on the full history (append-only, no second compaction);
``Background.swap``, called before each compile, stores the block once the task is done, so
the first request after it arrives sends the swapped history. The task's answer is stored in
one append or not at all: a crash or a ``cancel`` while it runs leaves the store as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import anthropic

from context_manager._compile._compactor import PendingCompaction
from context_manager._compile._strategies import Compact
from context_manager._manager import ContextManager
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId

from ._calls import RetryPolicy, stream_call

log = library_logger("context_manager.runtime")


def _sender(client: anthropic.AsyncAnthropic, agent: str, retry: RetryPolicy) -> Any:
    async def call(request: dict[str, Any]) -> object:
        return await stream_call(client, request, compile_id="compaction", agent=agent, retry=retry)

    return call


async def compact_if_due(
    cm: ContextManager, client: anthropic.AsyncAnthropic, agent: str, retry: RetryPolicy
) -> MessageId | None:
    """Compact ``cm``'s branch now when ``cm.compaction_due()``; the stored block's id."""
    if not cm.compaction_due():
        return None
    try:
        return await cm.compact_async(client, call=_sender(client, agent, retry))
    except anthropic.APIError as err:
        log.warning("compaction_failed", agent=agent, error=str(err)[:300])
        return None


class Background:
    """One agent's background compaction: at most one task at a time."""

    def __init__(self) -> None:
        self._task: asyncio.Task[object] | None = None
        self._pending: PendingCompaction | None = None

    @property
    def state(self) -> str:
        """``"idle"``, ``"running"`` (sent, no answer yet) or ``"arrived"`` (answered, to be
        swapped in before the next call)."""
        if self._pending is None or self._task is None:
            return "idle"
        return "arrived" if self._task.done() else "running"

    def start(
        self, cm: ContextManager, client: anthropic.AsyncAnthropic, agent: str, retry: RetryPolicy
    ) -> bool:
        """Send the compaction request in the background when one is due; whether one was."""
        strategy = cm.strategy
        if self._pending is not None or not isinstance(strategy, Compact):
            return False
        if not strategy.background or not cm.compaction_due():
            return False
        pending = cm.begin_compaction()
        if pending is None:
            return False
        self._pending = pending
        self._task = asyncio.get_running_loop().create_task(
            _send(_sender(client, agent, retry), pending.request)
        )
        return True

    def swap(self, cm: ContextManager, agent: str) -> MessageId | None:
        """Store the block when the task is done (``cm.finish_compaction``); its id, or ``None``
        (still running, nothing running, or no block)."""
        task, pending = self._task, self._pending
        if task is None or pending is None or not task.done():
            return None
        self._task = self._pending = None
        answer = task.result()  # ``_send`` returns the exception instead of raising it
        if isinstance(answer, BaseException):
            log.warning("compaction_failed", agent=agent, error=str(answer)[:300])
        return cm.finish_compaction(pending, answer)

    async def settle(self, cm: ContextManager, agent: str) -> MessageId | None:
        """Wait for a running compaction and swap it in (tests and a clean shutdown)."""
        if self._task is not None:
            await asyncio.wait([self._task])
        return self.swap(cm, agent)

    def cancel(self, cm: ContextManager, why: str) -> None:
        """Stop a running compaction; nothing of it is stored."""
        task, pending = self._task, self._pending
        self._task = self._pending = None
        if task is not None:
            task.cancel()
        if pending is not None:
            with contextlib.suppress(Exception):  # a manager already gone has nothing to forget
                cm.abandon_compaction(pending, why)


async def _send(call: Any, request: dict[str, Any]) -> object:
    """The response, or the exception the call raised (a task's failure is handled at the swap,
    never left unretrieved)."""
    try:
        response: object = await call(request)
    except Exception as err:
        return err
    return response
