"""What the live reasoning channel carries: one event type, shared by its producer and readers.

Invariant: readable text travels only inside ``UntrustedText`` (the audit reader's wrapper), so a
consumer that renders or logs events cannot turn reasoning into a string by accident. Nothing
here is stored: the durable record of reasoning is the audit sidecar.
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeAlias

import attrs

from context_manager._model._messages import MessageId

from ._audit import UntrustedText

LiveKind: TypeAlias = Literal["partial", "reasoning", "reset", "done"]
"""``partial``: the call's reasoning so far (catch-up, first event of a subscription while a
call streams); ``reasoning``: one increment; ``reset``: the call is retried or the turn resumed,
drop what was shown; ``done``: the reply is recorded (``reply`` names it), read it durably now."""


@attrs.frozen
class ReasoningEvent:
    """One event of an agent's live reasoning.

    Attributes:
        kind: see ``LiveKind``.
        agent: the agent whose call streams.
        call: the compile id of the call (``None`` for a ``reset`` outside a call).
        asker: who asked the turn (``run_turn(..., asker=...)``), or ``None``.
        text: the increment (``reasoning``) or the text so far (``partial``), else ``None``.
        reply: the recorded reply (``done``), else ``None``.
        clipped: ``partial`` only: the oldest text was dropped to keep the buffer's bound.
    """

    kind: LiveKind
    agent: str
    call: str | None
    asker: str | None
    text: UntrustedText | None = None
    reply: MessageId | None = None
    clipped: bool = False


class LiveReasoning(Protocol):
    """A source of one agent's live reasoning (the runtime's ``ReasoningHub`` is one)."""

    def subscribe(self) -> LiveSubscription:
        """Events from now on; the first is a ``partial`` when a call is streaming."""
        ...


class LiveSubscription(Protocol):
    """Events of one subscriber, until ``aclose()``."""

    def __aiter__(self) -> LiveSubscription: ...

    async def __anext__(self) -> ReasoningEvent: ...

    async def aclose(self) -> None: ...
