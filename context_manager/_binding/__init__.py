"""The binding layer: reply stamps, the chain of what precedes a block, drop placement.

Pure functions over ``_model`` and ``_store`` values; nothing here writes.
"""

from __future__ import annotations

from context_manager._model._stamps import (
    LEGACY_STAMP_VERSION,
    STAMP_VERSION,
    AnyStamp,
    BlockStamp,
    LegacyStamp,
    Stamp,
    parse_stamp,
)

from ._chain import (
    CHAIN_SEED,
    THINKING_TYPES,
    block_bytes,
    chain_of_messages,
    feed_block,
    is_wire_thinking,
    last_signature,
    seal,
    wire_content,
)
from ._drops import (
    DROPPED_TYPE,
    KEPT_REASONS,
    KNOWN_REASONS,
    KNOWN_TYPES,
    RELEASED_REASONS,
    WHY_MALFORMED,
    WHY_NO_SINGLE_SOURCE,
    WHY_NOT_THINKING,
    WHY_OUT_OF_RANGE,
    PlacedDrops,
    ReplyDrop,
    RoundDrop,
    ThinkingDrop,
    UnplacedDrop,
    parse_input_transformations,
    place_thinking_drops,
)
from ._stamp import ReplyStamp, stamp_reply, wire_message
from ._validity import (
    KEEP,
    PREFIX_COMPONENTS,
    Judgement,
    Verdict,
    head_changes,
    in_order,
    judge,
    producer_readable,
)

__all__ = [
    "CHAIN_SEED",
    "DROPPED_TYPE",
    "KEEP",
    "KEPT_REASONS",
    "KNOWN_REASONS",
    "KNOWN_TYPES",
    "LEGACY_STAMP_VERSION",
    "PREFIX_COMPONENTS",
    "RELEASED_REASONS",
    "STAMP_VERSION",
    "THINKING_TYPES",
    "WHY_MALFORMED",
    "WHY_NOT_THINKING",
    "WHY_NO_SINGLE_SOURCE",
    "WHY_OUT_OF_RANGE",
    "AnyStamp",
    "BlockStamp",
    "Judgement",
    "LegacyStamp",
    "PlacedDrops",
    "ReplyDrop",
    "ReplyStamp",
    "RoundDrop",
    "Stamp",
    "ThinkingDrop",
    "UnplacedDrop",
    "Verdict",
    "block_bytes",
    "chain_of_messages",
    "feed_block",
    "head_changes",
    "in_order",
    "is_wire_thinking",
    "judge",
    "last_signature",
    "parse_input_transformations",
    "parse_stamp",
    "place_thinking_drops",
    "producer_readable",
    "seal",
    "stamp_reply",
    "wire_content",
    "wire_message",
]
