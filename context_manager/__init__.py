"""An agent-context manager that keeps signed reasoning valid and reports what it strips.

The public API is re-exported here by name; implementation lives in private modules.
"""

from __future__ import annotations

from ._audit import AuditResult, ReasoningPart, UntrustedText, read_reasoning
from ._content import (
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
from ._drops import (
    PlacedDrops,
    ReplyDrop,
    RoundDrop,
    ThinkingDrop,
    UnplacedDrop,
    parse_input_transformations,
    place_thinking_drops,
)
from ._errors import (
    AgentBusy,
    BranchExists,
    BranchInUse,
    BranchNotFound,
    ContextManagerError,
    MessageNotFound,
    NotADatabase,
    OverBudget,
    SchemaTooNew,
    StoreUnavailable,
)
from ._head import Head, ThinkingBinding
from ._manager import ContextManager
from ._memory_store import MemoryStore
from ._messages import REASONING_LOSS_KIND, MessageId, MessageMeta, StoredMessage
from ._postgres_store import PostgresStore
from ._reasoning_capture import ReasoningCapture, warn_if_reasoning_unconfigured
from ._reasoning_store import MemoryReasoningStore, ReasoningStore, SQLiteReasoningStore
from ._results import CompileResult, ProvenanceEntry, Source, ThinkingStrip
from ._sqlite_store import SQLiteStore
from ._store import BranchRecord, BranchRef, Store, branch_key
from ._strategies import Fold, Passthrough, Window, estimate_tokens

__all__ = [
    "REASONING_LOSS_KIND",
    "AgentBusy",
    "AuditResult",
    "Block",
    "BranchExists",
    "BranchInUse",
    "BranchNotFound",
    "BranchRecord",
    "BranchRef",
    "CompileResult",
    "ContextManager",
    "ContextManagerError",
    "Fold",
    "Head",
    "ImageBlock",
    "MemoryReasoningStore",
    "MemoryStore",
    "MessageId",
    "MessageMeta",
    "MessageNotFound",
    "NotADatabase",
    "OverBudget",
    "Passthrough",
    "PlacedDrops",
    "PostgresStore",
    "ProvenanceEntry",
    "ReasoningCapture",
    "ReasoningPart",
    "ReasoningStore",
    "RedactedThinkingBlock",
    "ReplyDrop",
    "RoundDrop",
    "SQLiteReasoningStore",
    "SQLiteStore",
    "SchemaTooNew",
    "Source",
    "Store",
    "StoreUnavailable",
    "StoredMessage",
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
    "estimate_tokens",
    "parse_input_transformations",
    "place_thinking_drops",
    "read_reasoning",
    "warn_if_reasoning_unconfigured",
]
