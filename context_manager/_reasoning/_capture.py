"""Capture and resolution of readable thinking: text to the sidecar, signatures inline.

Invariants: a stored thinking block never holds captured text, only a private record (``ref``,
``digest``, ``size``, ``kind``) under ``REASONING_KEY``; ``resolve`` returns the block exactly as
it was sent (text back, record gone) or ``None``, never a block carrying the record. Capture is
fail-closed: a sidecar error propagates and nothing of the reply is stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from context_manager._model._content import Block, RedactedThinkingBlock, ThinkingBlock
from context_manager._model._errors import InvalidValue
from context_manager._model._head import Head
from context_manager._model._log import library_logger
from context_manager._model._results import CompileResult

from ._store import ReasoningStore

log = library_logger("context_manager.reasoning")

REASONING_KEY = "x_cm_reasoning"
"""The ``extra`` key holding a stored thinking block's private record; never sent to the API
(``resolve`` removes it), prefixed so it cannot collide with a field the API adds."""

SUMMARIZED_DISPLAY = "summarized"
"""``thinking.display`` asking for a summary of the reasoning: its text is kind ``summary``."""

CaptureMode: TypeAlias = bool | Literal["drop"]
ReasoningKind: TypeAlias = Literal["text", "summary", "redacted"]


def text_digest(text: str) -> str:
    """SHA-256 hex of ``text`` in UTF-8: what a stored record's ``digest`` is."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reasoning_record(block: Block) -> Mapping[str, Any] | None:
    """The private record of a stored thinking block, or ``None`` when it has none."""
    if not isinstance(block, ThinkingBlock | RedactedThinkingBlock):
        return None
    record = block.extra.get(REASONING_KEY)
    return record if isinstance(record, Mapping) else None


def resolve_without_sidecar(block: Block) -> Block | None:
    """``block`` when it carries no private record, else ``None``.

    For a manager opened without a sidecar over a store holding captured blocks: such a block's
    text is elsewhere, and sending it with the record (or without its text) is never valid.
    """
    if isinstance(block, ThinkingBlock | RedactedThinkingBlock) and REASONING_KEY in block.extra:
        return None
    return block


def _without_record(extra: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in extra.items() if k != REASONING_KEY}


def _check_mode(_: object, __: object, value: object) -> None:
    if value is not True and value is not False and value != "drop":
        raise InvalidValue(f"capture must be True, False or 'drop', got {value!r}")


def _display_of(result: CompileResult) -> object:
    thinking = result.request.get("thinking")
    return thinking.get("display") if isinstance(thinking, Mapping) else None


@attrs.frozen
class ReasoningCapture:
    """What happens to readable thinking when a reply is recorded, and how it comes back.

    Pass it as ``ContextManager.open(..., reasoning=ReasoningCapture(store))``.

    Args:
        store: the sidecar (``SQLiteReasoningStore`` or ``MemoryReasoningStore``). Required with
            ``capture=True``; with ``False`` or ``"drop"`` it is optional and serves only blocks
            captured earlier.
        capture: ``True`` moves each non-empty thinking text to ``store``; ``False`` leaves text
            inline in the message store (as with no capture configured); ``"drop"`` keeps no
            text at all and flags the block ``omitted``. A dropped text cannot be sent back (its
            signature binds the text), so such a block is stripped at the next compile like an
            erased one; blocks whose text was already empty (display ``"omitted"``) keep flowing.

    Raises:
        ValueError: ``capture`` is not ``True``, ``False`` or ``"drop"``, or ``True`` without
            a store.
    """

    store: ReasoningStore | None
    mode: CaptureMode = attrs.field(default=True, validator=_check_mode, alias="capture")
    """The ``capture`` argument (named ``mode`` here because ``capture`` is the method)."""

    def __attrs_post_init__(self) -> None:
        if self.mode is True and self.store is None:
            raise InvalidValue(
                "ReasoningCapture(capture=True) needs a store to capture into; pass "
                "SQLiteReasoningStore(path), or capture=False to keep text inline"
            )

    def capture(
        self, namespace: str, blocks: tuple[Block, ...], result: CompileResult
    ) -> tuple[Block, ...]:
        """The reply's blocks as they are stored; writes each non-empty thinking text first.

        Logs one ``reasoning_captured`` event (references, digests and sizes, never text) when
        the reply had any thinking. Cost: one sidecar ``put`` per non-empty thinking text.

        Args:
            namespace: the capturing agent; the sidecar seals each text to it.
            blocks: the reply as received.
            result: the compile that produced the reply (its request tells ``summary`` apart).

        Returns:
            ``blocks`` with each captured ``ThinkingBlock``'s text replaced by ``""`` and its
            record put under ``REASONING_KEY``; unchanged when ``capture`` is ``False``.

        Raises:
            Exception: whatever the sidecar raised; the caller must store nothing of the reply.
        """
        if self.mode is False:
            return blocks
        kind: ReasoningKind = "summary" if _display_of(result) == SUMMARIZED_DISPLAY else "text"
        stored: list[Block] = []
        parts: list[dict[str, Any]] = []
        for index, block in enumerate(blocks):
            if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
                if REASONING_KEY in block.extra:
                    log.warning(
                        "reasoning_record_ignored",
                        namespace=namespace,
                        compile_id=result.compile_id,
                        block=index,
                        note="a reply arrived carrying the private record key; it was removed",
                    )
                block = attrs.evolve(block, extra=_without_record(block.extra))
            if isinstance(block, RedactedThinkingBlock):
                record: dict[str, Any] = {"kind": "redacted"}
            elif isinstance(block, ThinkingBlock) and block.thinking:
                record = self._move_text(namespace, block.thinking, kind)
                block = attrs.evolve(block, thinking="")
            else:
                stored.append(block)
                continue
            block = attrs.evolve(block, extra={**block.extra, REASONING_KEY: record})
            stored.append(block)
            parts.append({"block": index, **record})
        if parts:
            log.info(
                "reasoning_captured",
                namespace=namespace,
                branch=result.branch,
                compile_id=result.compile_id,
                parts=parts,
            )
        return tuple(stored)

    def _move_text(self, namespace: str, text: str, kind: ReasoningKind) -> dict[str, Any]:
        size = len(text.encode("utf-8"))
        if self.mode == "drop" or self.store is None:
            return {"kind": kind, "omitted": True, "size": size}
        ref = self.store.put(namespace, text)
        return {"kind": kind, "ref": ref, "digest": text_digest(text), "size": size}

    def resolve(self, namespace: str, block: Block) -> Block | None:
        """``block`` as it was sent, or ``None`` when its text cannot be had.

        A block without a record comes back unchanged. Otherwise the text is fetched for
        ``namespace`` and checked against the record's digest; the record is removed, so the
        wire block equals the one the reply's signature and stamp were made over.

        Returns:
            The resolved block; ``None`` for a dropped (``omitted``) text, an erased blob, a
            blob sealed to another namespace, a digest mismatch or a malformed record.

        Raises:
            Exception: whatever the sidecar raised: a store outage fails the compile rather
                than silently sending less.
        """
        record = reasoning_record(block)
        if record is None:
            if isinstance(block, ThinkingBlock | RedactedThinkingBlock) and (
                REASONING_KEY in block.extra
            ):
                return self._unresolved(namespace, None, "malformed record")
            return block
        assert isinstance(block, ThinkingBlock | RedactedThinkingBlock)
        extra = _without_record(block.extra)
        if isinstance(block, RedactedThinkingBlock):
            return attrs.evolve(block, extra=extra)
        if record.get("omitted") is True:
            return self._unresolved(namespace, None, "text was not kept (capture='drop')")
        ref, digest = record.get("ref"), record.get("digest")
        if not isinstance(ref, str) or not isinstance(digest, str):
            return self._unresolved(namespace, None, "malformed record")
        if self.store is None:
            return self._unresolved(namespace, ref, "no sidecar configured")
        text = self.store.get(ref, namespace)
        if text is None:
            return self._unresolved(namespace, ref, "erased or not this namespace's")
        if text_digest(text) != digest:
            return self._unresolved(namespace, ref, "digest mismatch")
        return attrs.evolve(block, thinking=text, extra=extra)

    @staticmethod
    def _unresolved(namespace: str, ref: str | None, why: str) -> None:
        log.info("reasoning_unresolved", namespace=namespace, ref=ref, why=why)

    def erase_serial(self) -> int:
        """The sidecar's erase serial (0 without a store): a compile cache that renders
        resolved text is stale once it changes."""
        return 0 if self.store is None else self.store.erase_serial()


def warn_if_reasoning_unconfigured(
    agent_name: str, head: Head, reasoning: ReasoningCapture | Literal[False] | None
) -> bool:
    """Log one warning when ``head`` enables thinking and no reasoning sidecar is configured.

    The runtime calls it when an agent is registered. Any ``ReasoningCapture`` counts as a
    decision (even ``capture=False``); ``reasoning=False`` is the explicit, silent opt-out.

    Args:
        agent_name: named in the warning.
        head: the agent's head; ``head.thinking_enabled`` decides whether reasoning can come back.
        reasoning: the agent's configuration: a ``ReasoningCapture``, ``False`` or ``None``.

    Returns:
        True when the warning was logged.
    """
    if reasoning is not None or not head.thinking_enabled:
        return False
    log.warning(
        "reasoning_unconfigured",
        agent=agent_name,
        setting="reasoning",
        thinking=dict(head.settings["thinking"]),
        note=(
            f"agent {agent_name!r} can return model reasoning (its head sets 'thinking'), but "
            "no reasoning sidecar is configured: readable reasoning is kept inline in the message "
            "store, not in an erasable sidecar. Pass reasoning=ReasoningCapture(store), or "
            "reasoning=False to silence this."
        ),
    )
    return True
