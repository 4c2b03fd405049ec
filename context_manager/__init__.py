"""An agent-context manager that keeps signed reasoning valid and reports what it strips.

The public API is re-exported here by name; implementation lives in private modules.
"""

from __future__ import annotations

from ._binding._drops import (
    PlacedDrops,
    ReplyDrop,
    RoundDrop,
    ThinkingDrop,
    UnplacedDrop,
    parse_input_transformations,
    place_thinking_drops,
)
from ._compile._caching import Caching
from ._compile._resident import render_cache_bytes, render_cache_limit, set_render_cache_limit
from ._compile._snapshot import set_render_snapshots
from ._compile._strategies import Compact, Fold, Passthrough, Window, estimate_tokens
from ._compile._tokens import ApiTokenCounter
from ._manager import ContextManager
from ._model._content import (
    Block,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_from_wire,
    block_to_wire,
    blocks_from_wire,
    blocks_to_wire,
    converter,
)
from ._model._editing import CallEdits, ClearThinking, ClearToolUses, ContextEditing
from ._model._errors import (
    AgentBusy,
    AgentNotFound,
    AgentNotRegistered,
    BranchExists,
    BranchInUse,
    BranchNotFound,
    CommandLineError,
    CompactionNotSupported,
    ContextManagerError,
    DamagedDatabase,
    InFlightThinkingInvalid,
    InvalidBranchName,
    InvalidContent,
    InvalidHead,
    InvalidType,
    InvalidValue,
    MessageNotFound,
    NotADatabase,
    OverBudget,
    SchemaTooNew,
    StoreBusy,
    StorePathError,
    StoreRefused,
    StoreUnavailable,
    TelemetryUnavailable,
)
from ._model._head import Head, ThinkingBinding
from ._model._log import LibraryLogger, library_logger
from ._model._messages import (
    ASKER_KEY,
    REASONING_LOSS_KIND,
    MessageId,
    MessageMeta,
    StoredMessage,
)
from ._model._readability import (
    PrefixCheck,
    Readability,
    documented_prefix_check,
    documented_readability,
)
from ._model._results import CompileResult, ProvenanceEntry, Source, ThinkingStrip
from ._model._stamps import BlockStamp, LegacyStamp, Stamp, parse_stamp, stamp_to_json
from ._model._usage import CallUsage, usage_of
from ._reasoning._audit import AuditResult, ReasoningPart, UntrustedText, read_reasoning
from ._reasoning._capture import ReasoningCapture, warn_if_reasoning_unconfigured
from ._reasoning._live import ReasoningEvent
from ._reasoning._store import MemoryReasoningStore, ReasoningStore, SQLiteReasoningStore
from ._reconcile import FrameworkParamsInvalid, Reconciliation
from ._store._hold import Hold
from ._store._memory import MemoryStore
from ._store._postgres import PostgresStore
from ._store._protocol import (
    BindingSerials,
    BindingStore,
    BranchRecord,
    BranchRef,
    HoldStore,
    MessageStore,
    ReadsTogether,
    SnapshotStore,
    Store,
    branch_key,
)
from ._store._sqlite import SQLiteStore
from ._telemetry import Telemetry

__all__ = [
    "ASKER_KEY",
    "REASONING_LOSS_KIND",
    "AgentBusy",
    "AgentNotFound",
    "AgentNotRegistered",
    "ApiTokenCounter",
    "AuditResult",
    "BindingSerials",
    "BindingStore",
    "Block",
    "BlockStamp",
    "BranchExists",
    "BranchInUse",
    "BranchNotFound",
    "BranchRecord",
    "BranchRef",
    "Caching",
    "CallEdits",
    "CallUsage",
    "ClearThinking",
    "ClearToolUses",
    "CommandLineError",
    "Compact",
    "CompactionNotSupported",
    "CompileResult",
    "ContextEditing",
    "ContextManager",
    "ContextManagerError",
    "DamagedDatabase",
    "Fold",
    "FrameworkParamsInvalid",
    "Head",
    "Hold",
    "HoldStore",
    "ImageBlock",
    "InFlightThinkingInvalid",
    "InvalidBranchName",
    "InvalidContent",
    "InvalidHead",
    "InvalidType",
    "InvalidValue",
    "LegacyStamp",
    "LibraryLogger",
    "MemoryReasoningStore",
    "MemoryStore",
    "MessageId",
    "MessageMeta",
    "MessageNotFound",
    "MessageStore",
    "NotADatabase",
    "OverBudget",
    "Passthrough",
    "PlacedDrops",
    "PostgresStore",
    "PrefixCheck",
    "ProvenanceEntry",
    "Readability",
    "ReadsTogether",
    "ReasoningCapture",
    "ReasoningEvent",
    "ReasoningPart",
    "ReasoningStore",
    "Reconciliation",
    "RedactedThinkingBlock",
    "ReplyDrop",
    "RoundDrop",
    "SQLiteReasoningStore",
    "SQLiteStore",
    "SchemaTooNew",
    "SnapshotStore",
    "Source",
    "Stamp",
    "Store",
    "StoreBusy",
    "StorePathError",
    "StoreRefused",
    "StoreUnavailable",
    "StoredMessage",
    "Telemetry",
    "TelemetryUnavailable",
    "TextBlock",
    "ThinkingBinding",
    "ThinkingBlock",
    "ThinkingDrop",
    "ThinkingStrip",
    "ToolResultBlock",
    "ToolUseBlock",
    "UnknownBlock",
    "UnplacedDrop",
    "UntrustedText",
    "Window",
    "block_from_wire",
    "block_to_wire",
    "blocks_from_wire",
    "blocks_to_wire",
    "branch_key",
    "converter",
    "documented_prefix_check",
    "documented_readability",
    "estimate_tokens",
    "library_logger",
    "parse_input_transformations",
    "parse_stamp",
    "place_thinking_drops",
    "read_reasoning",
    "render_cache_bytes",
    "render_cache_limit",
    "set_render_cache_limit",
    "set_render_snapshots",
    "stamp_to_json",
    "usage_of",
    "warn_if_reasoning_unconfigured",
]
