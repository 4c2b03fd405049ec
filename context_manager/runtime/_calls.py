"""One model call over the ``anthropic`` SDK: stream it, retry what is retryable, log a refusal.

Retries 429, 500, 502, 503 and 529 and connection errors with bounded exponential backoff; a 400
(or any other status) is raised to the caller after one ``provider_rejected`` event naming the
compile id.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import anthropic
import attrs

from context_manager._model._log import library_logger

log = library_logger("context_manager.runtime")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 529})
"""Statuses the API documents as transient (rate limit, server error, overloaded)."""


@attrs.frozen
class RetryPolicy:
    """How often and how patiently a call is retried."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay, self.base_delay * (2**attempt)))


class LiveSink(Protocol):
    """Where a call's readable thinking goes as it streams (the agent's ``ReasoningHub``)."""

    def thinking(self, text: str) -> None: ...

    def restart(self) -> None: ...


def _forward(event: Any, live: LiveSink) -> None:
    """Hand a ``thinking_delta``'s text to ``live``; every other event is ignored."""
    if getattr(event, "type", None) != "content_block_delta":
        return
    delta = getattr(event, "delta", None)
    if getattr(delta, "type", None) == "thinking_delta":
        live.thinking(str(getattr(delta, "thinking", "") or ""))


async def stream_call(
    client: anthropic.AsyncAnthropic,
    request: dict[str, Any],
    *,
    compile_id: str,
    agent: str,
    retry: RetryPolicy,
    live: LiveSink | None = None,
) -> Any:
    """Stream ``request`` and return the final ``BetaMessage``.

    ``live`` hears each ``thinking_delta``'s text as it arrives, and ``restart`` before a retry.

    Raises:
        anthropic.APIStatusError: a non-retryable status, or retries exhausted.
        anthropic.APIConnectionError: retries exhausted.
    """
    for attempt in range(retry.attempts):
        try:
            if live is not None and attempt:
                live.restart()
            async with client.beta.messages.stream(**request) as stream:
                if live is not None:
                    async for event in stream:
                        _forward(event, live)
                return await stream.get_final_message()
        except anthropic.APIStatusError as err:
            if err.status_code not in RETRYABLE_STATUS or attempt == retry.attempts - 1:
                log.error(
                    "provider_rejected",
                    agent=agent,
                    compile_id=compile_id,
                    status=err.status_code,
                    error=str(err),
                )
                raise
            log.warning(
                "provider_retry",
                agent=agent,
                compile_id=compile_id,
                status=err.status_code,
                attempt=attempt + 1,
            )
        except anthropic.APIConnectionError as err:
            if attempt == retry.attempts - 1:
                log.error(
                    "provider_unreachable", agent=agent, compile_id=compile_id, error=str(err)
                )
                raise
            log.warning("provider_retry", agent=agent, compile_id=compile_id, attempt=attempt + 1)
        await asyncio.sleep(retry.delay(attempt))
    raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover
