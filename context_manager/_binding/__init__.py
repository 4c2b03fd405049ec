"""The binding layer: reply stamps, the chain of what precedes a block, drop placement.

Pure functions over ``_model`` and ``_store`` values; nothing here writes.
"""

from __future__ import annotations

from ._chain import (
    CHAIN_SEED,
    block_bytes,
    chain_of_messages,
    feed_block,
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
from ._stamp import (
    STAMP_VERSION,
    ReplyStamp,
    dropped_paths,
    stamp_reply,
    wire_message,
)

__all__ = [
    "CHAIN_SEED",
    "DROPPED_TYPE",
    "KEPT_REASONS",
    "KNOWN_REASONS",
    "KNOWN_TYPES",
    "RELEASED_REASONS",
    "STAMP_VERSION",
    "WHY_MALFORMED",
    "WHY_NOT_THINKING",
    "WHY_NO_SINGLE_SOURCE",
    "WHY_OUT_OF_RANGE",
    "PlacedDrops",
    "ReplyDrop",
    "ReplyStamp",
    "RoundDrop",
    "ThinkingDrop",
    "UnplacedDrop",
    "block_bytes",
    "chain_of_messages",
    "dropped_paths",
    "feed_block",
    "parse_input_transformations",
    "place_thinking_drops",
    "seal",
    "stamp_reply",
    "wire_content",
    "wire_message",
]
