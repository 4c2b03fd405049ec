"""The audit reader: captured reasoning read back, checked, bounded, and marked untrusted.

Invariants: text comes back only wrapped in ``UntrustedText`` (``str()`` and formatting refuse
it, ``repr`` hides it), and only when its digest checks; the bounds are applied from the sizes the
message store recorded *before* any sidecar read, so nothing past a bound is fetched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, NoReturn, Protocol, TypeAlias

import attrs

from context_manager._model._content import RedactedThinkingBlock, ThinkingBlock
from context_manager._model._errors import InvalidType, InvalidValue
from context_manager._model._messages import MessageId, StoredMessage

from ._capture import ReasoningCapture, ReasoningKind, reasoning_record, text_digest
from ._store import ReasoningStore


class AuditedContext(Protocol):
    """What the audit reader reads from (a ``ContextManager`` is one)."""

    @property
    def namespace(self) -> str: ...

    @property
    def reasoning(self) -> ReasoningCapture | None: ...

    def get_message(self, message_id: MessageId) -> StoredMessage: ...

    def messages(
        self,
        branch: str | None = None,
        kind: str | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[StoredMessage]: ...


PartStatus: TypeAlias = Literal["ok", "redacted", "erased", "digest-mismatch", "omitted"]

DEFAULT_MAX_PARTS = 256
"""Parts per read: enough for a long turn, small enough to show or ship in one response."""

DEFAULT_MAX_BYTES = 1024 * 1024
"""Readable text per read (1 MiB of UTF-8): bounds memory and what one caller can pull out."""

READ_CHUNK = 256
"""Messages read from the message store per step while scanning a transcript."""


@attrs.frozen(repr=False)
class UntrustedText:
    """Readable reasoning: model output derived from untrusted input. Read ``.value`` on purpose.

    ``str()``, f-strings and ``format`` raise ``TypeError`` so the text cannot slip into a prompt,
    a log line or a notice by accident; ``repr`` shows its origin and length, never the text.
    """

    value: str
    origin: str

    def __str__(self) -> str:
        self._refuse()

    def __format__(self, spec: str) -> str:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise InvalidType(
            f"refusing to turn reasoning from {self.origin} into a string implicitly: it is "
            "untrusted model output; read `.value` deliberately where you mean to"
        )

    def __repr__(self) -> str:
        return f"UntrustedText(origin={self.origin!r}, chars={len(self.value)})"


@attrs.frozen
class ReasoningPart:
    """One thinking block of a stored reply, as the audit reader sees it.

    Attributes:
        message_id: the reply.
        block: the block's index in the stored reply.
        kind: ``"text"``, ``"summary"`` (the request asked for summarized display) or
            ``"redacted"``.
        status: ``"ok"`` (text below), ``"redacted"`` (the provider withheld it), ``"erased"``
            (the blob is gone), ``"digest-mismatch"`` (altered, or sealed to another namespace)
            or ``"omitted"`` (captured with ``capture="drop"``: never kept).
        text: the text for ``"ok"`` parts (``""`` for an omitted-display block), else ``None``.
        ref: the sidecar ref, when the text was captured.
        digest: SHA-256 hex of the text, when known.
        size: the text's UTF-8 size as recorded.
    """

    message_id: MessageId
    block: int
    kind: ReasoningKind
    status: PartStatus
    text: UntrustedText | None
    ref: str | None = None
    digest: str | None = None
    size: int = 0


@attrs.frozen
class AuditResult:
    """What one ``read_reasoning`` call returned.

    Attributes:
        parts: in transcript order (oldest reply first, then block order).
        truncated: a bound was hit; more parts follow the last one returned.
        bytes: UTF-8 bytes of text returned (``"ok"`` parts).
        namespace: the agent read.
    """

    parts: tuple[ReasoningPart, ...]
    truncated: bool
    bytes: int
    namespace: str


def read_reasoning(
    cm: AuditedContext,
    *,
    message_id: MessageId | None = None,
    since: int | None = None,
    max_parts: int = DEFAULT_MAX_PARTS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> AuditResult:
    """Read back the reasoning of ``cm``'s replies on its current branch, each part checked.

    Cost: one message-store read per ``READ_CHUNK`` messages scanned, and one sidecar ``get``
    per captured part returned (none past a bound: a part whose recorded size would pass
    ``max_bytes`` is not fetched, and the read stops there).

    Args:
        cm: the agent's context manager; its ``reasoning`` sidecar serves captured text.
        message_id: read only this reply.
        since: read only replies whose sequence is above this.
        max_parts: at most this many parts.
        max_bytes: at most this many UTF-8 bytes of text.

    Returns:
        The parts, and ``truncated=True`` when a bound stopped the read.

    Raises:
        ValueError: a bound is not a positive integer, both ``message_id`` and ``since`` were
            given, or a part was captured to a sidecar and ``cm`` has none configured.
        MessageNotFound: ``message_id`` is not in ``cm``'s namespace.
        Exception: whatever the sidecar raised.
    """
    for name, bound in (("max_parts", max_parts), ("max_bytes", max_bytes)):
        if isinstance(bound, bool) or not isinstance(bound, int) or bound <= 0:
            raise InvalidValue(f"{name} must be a positive integer, got {bound!r}")
    if message_id is not None and since is not None:
        raise InvalidValue("give message_id or since, not both")
    store = cm.reasoning.store if isinstance(cm.reasoning, ReasoningCapture) else None
    parts: list[ReasoningPart] = []
    used = 0
    for message in _replies(cm, message_id, since):
        for index, block in enumerate(message.content):
            if not isinstance(block, ThinkingBlock | RedactedThinkingBlock):
                continue
            if len(parts) >= max_parts:
                return AuditResult(tuple(parts), True, used, cm.namespace)
            size = _declared_size(block)
            fetches = _fetches(block)
            if fetches and used + size > max_bytes:
                return AuditResult(tuple(parts), True, used, cm.namespace)
            part = _read_part(cm.namespace, store, message, index, block)
            if part.status == "ok":
                used += part.size
            parts.append(part)
    return AuditResult(tuple(parts), False, used, cm.namespace)


def _replies(
    cm: AuditedContext, message_id: MessageId | None, since: int | None
) -> Iterator[StoredMessage]:
    if message_id is not None:
        message = cm.get_message(message_id)
        if message.role == "assistant":
            yield message
        return
    after = since
    while True:
        chunk = cm.messages(since=after, limit=READ_CHUNK)
        yield from (m for m in chunk if m.role == "assistant")
        if len(chunk) < READ_CHUNK:
            return
        after = chunk[-1].sequence


def _declared_size(block: ThinkingBlock | RedactedThinkingBlock) -> int:
    record = reasoning_record(block)
    if record is not None:
        size = record.get("size")
        return size if isinstance(size, int) and size >= 0 else 0
    if isinstance(block, ThinkingBlock):
        return len(block.thinking.encode("utf-8"))
    return 0


def _fetches(block: ThinkingBlock | RedactedThinkingBlock) -> bool:
    """True when reading this part returns text (so its size counts against ``max_bytes``)."""
    if isinstance(block, RedactedThinkingBlock):
        return False
    record = reasoning_record(block)
    return record is None or isinstance(record.get("ref"), str)


def _read_part(
    namespace: str,
    store: ReasoningStore | None,
    message: StoredMessage,
    index: int,
    block: ThinkingBlock | RedactedThinkingBlock,
) -> ReasoningPart:
    origin = f"reasoning:{namespace}:{message.id}:{index}"
    record = reasoning_record(block)
    if isinstance(block, RedactedThinkingBlock):
        return ReasoningPart(message.id, index, "redacted", "redacted", None)
    summary = record is not None and record.get("kind") == "summary"
    kind: ReasoningKind = "summary" if summary else "text"
    if record is None:
        inline = block.thinking
        size = len(inline.encode("utf-8"))
        wrapped = UntrustedText(inline, origin)
        digest = text_digest(inline)
        return ReasoningPart(message.id, index, kind, "ok", wrapped, None, digest, size)
    size = _declared_size(block)
    if record.get("omitted") is True:
        return ReasoningPart(message.id, index, kind, "omitted", None, size=size)
    ref, recorded = record.get("ref"), record.get("digest")
    if not isinstance(ref, str) or not isinstance(recorded, str):
        return ReasoningPart(message.id, index, kind, "digest-mismatch", None, size=size)
    digest = recorded
    if store is None:
        raise InvalidValue(
            f"reply {message.id!r} has reasoning captured to a sidecar, but this context manager "
            "has none; open it with reasoning=ReasoningCapture(SQLiteReasoningStore(path))"
        )
    text = store.get(ref, namespace)
    if text is None:
        status: PartStatus = "digest-mismatch" if store.holds(ref) else "erased"
        return ReasoningPart(message.id, index, kind, status, None, ref, digest, size)
    if text_digest(text) != digest or len(text.encode("utf-8")) != size:
        return ReasoningPart(message.id, index, kind, "digest-mismatch", None, ref, digest, size)
    return ReasoningPart(
        message.id, index, kind, "ok", UntrustedText(text, origin), ref, digest, size
    )
