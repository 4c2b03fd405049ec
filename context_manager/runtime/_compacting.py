"""The runtime's foreground compaction: at a turn's end, when the strategy's trigger is passed.

Called only where no tool round is open (the turn ended without a tool call). The compaction
call goes through the runtime's retry policy (a 529 ``compaction_unavailable`` is retried); a
failure never fails the turn: it is logged (``compaction_failed``) and the history stays as it
was, so the next turn's end tries again.
"""

from __future__ import annotations

from typing import Any

import anthropic

from context_manager._manager import ContextManager
from context_manager._model._errors import CompactionNotSupported
from context_manager._model._log import library_logger

from ._calls import RetryPolicy, stream_call

log = library_logger("context_manager.runtime")


async def compact_if_due(
    cm: ContextManager, client: anthropic.AsyncAnthropic, agent: str, retry: RetryPolicy
) -> None:
    """Compact ``cm``'s branch when ``cm.compaction_due()`` (see the module docstring)."""
    if not cm.compaction_due():
        return

    async def call(request: dict[str, Any]) -> object:
        return await stream_call(client, request, compile_id="compaction", agent=agent, retry=retry)

    try:
        await cm.compact_async(client, call=call)
    except (anthropic.APIError, CompactionNotSupported) as err:
        log.warning("compaction_failed", agent=agent, error=str(err)[:300])
