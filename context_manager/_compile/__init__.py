"""The compile layer: strategies, selection, rendering, folds and the compiler.

The compiler takes its inputs from a ``CompileHost`` and returns strips in its results; it
never calls upward.
"""

from __future__ import annotations

from ._compiler import (
    BINDING_BETA,
    BUDGET_REANCHOR,
    DEFAULT_MAX_TOKENS,
    READ_CHUNK,
    STAMP_CACHE_LIMIT,
    BindingRecord,
    CompileHost,
    Compiler,
)
from ._fold import (
    SUMMARY_HEADING,
    SUMMARY_KIND,
    FoldRequest,
    answers_tools,
    covers_upto,
    fold_entries,
    inflight_text,
    kept_thinking,
    plan_fold,
    summary_parts,
)
from ._render import (
    MISSING_RESULT_TEXT,
    OMITTED_HISTORY_TEXT,
    RenderContext,
    RenderState,
    Span,
    StripEntry,
    StripReason,
    close_tool_round,
    is_clean_start,
    judge_thinking,
    render_message,
    render_text_prefix,
    rendered_role,
)
from ._selection import (
    fold_cut,
    jump_anchor,
    required_tokens,
)
from ._strategies import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    Fold,
    Passthrough,
    Strategy,
    Summarizer,
    Window,
    estimate_tokens,
)

__all__ = [
    "BINDING_BETA",
    "BUDGET_REANCHOR",
    "CHARS_PER_TOKEN",
    "DEFAULT_MAX_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "MISSING_RESULT_TEXT",
    "OMITTED_HISTORY_TEXT",
    "READ_CHUNK",
    "STAMP_CACHE_LIMIT",
    "SUMMARY_HEADING",
    "SUMMARY_KIND",
    "BindingRecord",
    "CompileHost",
    "Compiler",
    "Fold",
    "FoldRequest",
    "Passthrough",
    "RenderContext",
    "RenderState",
    "Span",
    "Strategy",
    "StripEntry",
    "StripReason",
    "Summarizer",
    "Window",
    "answers_tools",
    "close_tool_round",
    "covers_upto",
    "estimate_tokens",
    "fold_cut",
    "fold_entries",
    "inflight_text",
    "is_clean_start",
    "judge_thinking",
    "jump_anchor",
    "kept_thinking",
    "plan_fold",
    "render_message",
    "render_text_prefix",
    "rendered_role",
    "required_tokens",
    "summary_parts",
]
