"""The reasoning layer: the audit sidecar, capture into it, and the audit reader.

Imports ``_model`` and ``_store`` only. Capture is fail-closed.
"""

from __future__ import annotations

from ._audit import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_PARTS,
    READ_CHUNK,
    AuditedContext,
    AuditResult,
    PartStatus,
    ReasoningPart,
    UntrustedText,
    read_reasoning,
)
from ._capture import (
    REASONING_KEY,
    SUMMARIZED_DISPLAY,
    CaptureMode,
    ReasoningCapture,
    ReasoningKind,
    reasoning_record,
    resolve_without_sidecar,
    text_digest,
    warn_if_reasoning_unconfigured,
)
from ._live import LiveKind, LiveReasoning, LiveSubscription, ReasoningEvent
from ._store import (
    APPLICATION_ID,
    ENVELOPE_VERSION,
    MIGRATIONS,
    REF_PREFIX,
    SCHEMA_VERSION,
    Clock,
    MemoryReasoningStore,
    ReasoningStore,
    SQLiteReasoningStore,
    open_envelope,
    seal_envelope,
)

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PARTS",
    "ENVELOPE_VERSION",
    "MIGRATIONS",
    "READ_CHUNK",
    "REASONING_KEY",
    "REF_PREFIX",
    "SCHEMA_VERSION",
    "SUMMARIZED_DISPLAY",
    "AuditResult",
    "AuditedContext",
    "CaptureMode",
    "Clock",
    "LiveKind",
    "LiveReasoning",
    "LiveSubscription",
    "MemoryReasoningStore",
    "PartStatus",
    "ReasoningCapture",
    "ReasoningEvent",
    "ReasoningKind",
    "ReasoningPart",
    "ReasoningStore",
    "SQLiteReasoningStore",
    "UntrustedText",
    "open_envelope",
    "read_reasoning",
    "reasoning_record",
    "resolve_without_sidecar",
    "seal_envelope",
    "text_digest",
    "warn_if_reasoning_unconfigured",
]
