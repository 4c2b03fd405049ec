"""Names the simulated Messages API shares with the real one: betas, drop reasons, block types.

Constants only. Their values are wire strings and must match the ``anthropic`` SDK's beta types.
"""

from __future__ import annotations

BINDING_BETA = "thinking-binding-controls-2026-08-01"
"""Enables ``thinking.block_binding`` and makes ``input_transformations`` present on replies."""

SYSTEM_CLEAR_AT_BETA = "mid-conversation-system-clear-at-2026-08-21"
"""Enables ``clear_at`` on mid-conversation ``role: "system"`` messages."""

TOOL_CHANGES_BETA = "mid-conversation-tool-changes-2026-07-01"
"""Enables ``tool_addition`` / ``tool_removal`` blocks in mid-conversation system messages."""

INLINE_TOOLS_BETA = "inline-tools-2026-09-15"
"""Enables inline ``tool_definition`` tools in ``tool_addition`` blocks (Claude API)."""

OUTPUT_CONFIG_BETA = "mid-conversation-output-config-2026-07-01"
"""Enables a per-message ``output_config`` (effort) on mid-conversation system messages."""

MODEL_MISMATCH = "model_binding_mismatch"
"""The block was made by a model (family) whose reasoning the requested model may not read."""

PREFIX_MISMATCH = "prefix_binding_mismatch"
"""The head or an earlier block differs from what the block was made after."""

ORGANIZATION_MISMATCH = "organization_binding_mismatch"
"""Made under another organization; the simulator produces it only when forced."""

END_USER_MISMATCH = "end_user_binding_mismatch"
"""Made for another end user; the simulator produces it only when forced."""

DROP_REASONS = (ORGANIZATION_MISMATCH, END_USER_MISMATCH, MODEL_MISMATCH, PREFIX_MISMATCH)
"""Every ``thinking_dropped`` reason, in the API's order of precedence."""

THINKING_DROPPED = "thinking_dropped"
"""The ``input_transformations`` entry type for a removed block."""

THINKING_MISMATCH_ALLOWED = "thinking_mismatch_allowed"
"""The entry type for a failing block that still reached the model (an unenforced account)."""

ERROR_MODE = "error"
DROP_MODE = "drop_block"
PREFIX_MISMATCH_BEHAVIORS = (ERROR_MODE, DROP_MODE)
"""``thinking.block_binding.prefix_mismatch_behavior`` values; ``"error"`` is the default."""

THINKING = "thinking"
REDACTED_THINKING = "redacted_thinking"
SIGNED_TYPES = (THINKING, REDACTED_THINKING)
"""Block types whose signature binds them to their prefix (redacted blocks sign ``data``)."""

DIAGNOSTICS = "diagnostics"
"""The request field (and the response field) of cache diagnostics (``_diagnose``)."""

PREVIOUS_MESSAGE_ID = "previous_message_id"
"""The ``diagnostics`` field naming the earlier response to compare with (``null``: opt in)."""

MESSAGES_PATH = "/v1/messages"
"""The messages endpoint (``?beta=true`` is accepted and ignored); ``_count.COUNT_PATH`` is the
other one the simulator serves."""


def block_path(i: int, j: int) -> str:
    """The API's path for ``messages[i].content[j]``."""
    return f"messages.{i}.content.{j}"
