"""The on-demand compaction request (provider rule 23): its refusals, the summary, the reply.

Pure functions (the nonce is random). A compaction request is a request with a top-level
``compaction`` parameter; it is validated and its signed blocks checked like any other request,
then refused where rule 23 refuses it, then answered with one ``compaction`` block and
``stop_reason: "compaction"``, no thinking, top-level usage 0 and the cost in the ``compaction``
entry of ``usage.iterations``. A scripted failure answers a 200 with empty content and another
``stop_reason``, or a 529 ``overloaded_error`` with ``error.details.error_code:
"compaction_unavailable"``.

The summary is a deterministic function of what it covers (``summary_text``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from context_manager import InvalidValue

from ._canon import canonical_json, head_digest
from ._compaction import COMPACTION, COMPACTION_BETA, Coverage, is_compaction, sign_summary
from ._errors import InvalidRequest, SimulatedApiError
from ._models import same_model
from ._reply import REPLY_ROLE, estimate_tokens
from ._verify import Verifier, Walk, content_blocks

MAX_INSTRUCTIONS = 16_384
"""Longest ``compaction.instructions`` the API takes, in characters."""

COMPACTION_MODELS = frozenset(
    {
        "claude-fable-5-1",
        "claude-fable-5",
        "claude-mythos-5-1",
        "claude-mythos-5",
        "claude-mythos-preview",
        "claude-opus-5-5",
        "claude-opus-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-sonnet-5-5",
        "claude-sonnet-5",
        "claude-sonnet-4-6",
    }
)
"""Models documented to take on-demand compaction (provider rule 24; Haiku 5.5 is left out, the
conservative reading of [COD] against [CTB]'s header). Extend with
``Simulator(compaction_models=...)``."""

FAILED_STOP_REASONS = frozenset(
    {"max_tokens", "model_context_window_exceeded", "tool_use", "refusal", "end_turn"}
)
"""The ``stop_reason`` values of a compaction request that produced no summary (a 200)."""

UNAVAILABLE = "compaction_unavailable"
"""The scripted transient failure: a 529 ``overloaded_error`` with this ``error_code``."""

OUTCOMES = FAILED_STOP_REASONS | {UNAVAILABLE}
"""What ``Simulator.fail_compaction_next`` can make a compaction request do."""

SUMMARY_LINES = 8
"""Messages the summary quotes a line of (the last ones of the range)."""

SNIPPET_CHARS = 48
"""Characters quoted per message."""


def check_request(body: Mapping[str, Any], betas: frozenset[str], models: frozenset[str]) -> None:
    """Refuse a compaction request as rule 23 does (after the ordinary validation).

    Raises:
        InvalidRequest: the beta is missing, the parameter is malformed, the model does not
            compact, a setting compaction rejects is present, a tool call is still open, or
            nothing is left to summarize (``compaction_nothing_to_summarize``).
    """
    if COMPACTION_BETA not in betas:
        raise InvalidRequest(
            f"compaction: on-demand compaction needs the `{COMPACTION_BETA}` beta header"
        )
    _check_parameter(body["compaction"])
    model = str(body["model"])
    if not any(same_model(model, known) for known in models):
        raise InvalidRequest(f"model: `{model}` does not support on-demand compaction")
    _check_settings(body)
    messages = body["messages"]
    conversational = [m for m in messages if m.get("role") in ("user", "assistant")]
    last = conversational[-1] if conversational else None
    if (
        last is not None
        and last["role"] == "assistant"
        and any(b.get("type") == "tool_use" for b in content_blocks(last.get("content")))
    ):
        raise InvalidRequest(
            f"messages.{messages.index(last)}: the last assistant turn calls a tool that has "
            "no result yet; compact before the call or after its `tool_result`"
        )
    if not any(
        not is_compaction(block)
        for message in conversational
        for block in content_blocks(message.get("content"))
    ):
        raise InvalidRequest(
            "messages: compaction_nothing_to_summarize: the request has no user or assistant "
            "content to summarize",
            error_code="compaction_nothing_to_summarize",
        )


def _check_parameter(parameter: Any) -> None:
    if not isinstance(parameter, Mapping) or parameter.get("type") != "summarize":
        raise InvalidRequest("compaction.type: Input should be 'summarize'")
    for name in sorted(parameter):
        if name not in ("type", "instructions"):
            raise InvalidRequest(f"compaction.{name}: Extra inputs are not permitted")
    instructions = parameter.get("instructions", "")
    if not isinstance(instructions, str):
        raise InvalidRequest("compaction.instructions: Input should be a valid string")
    if len(instructions) > MAX_INSTRUCTIONS:
        raise InvalidRequest(
            f"compaction.instructions: String should have at most {MAX_INSTRUCTIONS} "
            f"characters (got {len(instructions)})"
        )


def _check_settings(body: Mapping[str, Any]) -> None:
    output = body.get("output_config")
    output = output if isinstance(output, Mapping) else {}
    budget = output.get("task_budget")
    choice = body.get("tool_choice")
    refused = {
        "context_management": "context_management" in body,
        "stop_sequences": "stop_sequences" in body,
        "output_config.format": "format" in output,
        "tool_choice": isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"),
        "output_config.task_budget.remaining": isinstance(budget, Mapping)
        and "remaining" in budget,
    }
    for name, present in refused.items():
        if present:
            raise InvalidRequest(f"{name}: cannot be combined with `compaction`")


def _snippet(message: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for block in content_blocks(message.get("content")):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            parts.append(f"[called {block.get('name')}]")
        elif kind == COMPACTION:
            parts.append("[earlier summary]")
        elif kind not in ("thinking", "redacted_thinking"):
            parts.append(f"[{kind}]")
    return " ".join(" ".join(parts).split())[:SNIPPET_CHARS]


def summary_text(body: Mapping[str, Any], instructions: str | None = None) -> str:
    """The summary of what a compaction request covers: a deterministic function of it.

    ``"Summary of N messages (digest D):"`` then one line ``"role: snippet"`` for each of the
    last ``SUMMARY_LINES`` messages (the first ``SNIPPET_CHARS`` characters of its text blocks,
    whitespace collapsed; a tool call is ``[called NAME]``, an earlier compaction block
    ``[earlier summary]``, another non-thinking block ``[TYPE]``), then ``"Instructions: ..."``
    with the first ``SNIPPET_CHARS`` characters of non-blank instructions. D is the first 16 hex
    digits of the SHA-256 of the canonical JSON (``cache_control`` removed) of ``system``,
    ``tools``, the messages with their thinking blocks left out, and the instructions: two
    requests get the same summary exactly when they cover the same content.
    """
    messages = [m for m in body["messages"] if isinstance(m, Mapping)]
    if instructions is None:
        instructions = str(body["compaction"].get("instructions", ""))
    instructions = instructions.strip()
    visible = [
        {
            "role": m.get("role"),
            "content": [
                b
                for b in content_blocks(m.get("content"))
                if not (
                    isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking")
                )
            ],
        }
        for m in messages
    ]
    covered = [body.get("system"), body.get("tools"), visible, instructions]
    digest = hashlib.sha256(canonical_json(covered).encode()).hexdigest()[:16]
    lines = [f"Summary of {len(messages)} messages (digest {digest}):"]
    lines += [f"{m.get('role')}: {_snippet(m)}" for m in messages[-SUMMARY_LINES:]]
    if instructions:
        lines.append(f"Instructions: {instructions[:SNIPPET_CHARS]}")
    return "\n".join(lines)


@attrs.frozen
class Compacted:
    """A compaction reply and what to remember: the nonce and the coverage (``None`` when the
    request produced no summary)."""

    message: dict[str, Any]
    nonce: bytes | None = None
    coverage: Coverage | None = None


def coverage_of(body: Mapping[str, Any], walked: Walk, *, preserving: bool) -> Coverage:
    """What a compaction request covered, from its walk."""
    roles = [str(m.get("role")) for m in body["messages"] if isinstance(m, Mapping)]
    return Coverage(
        chains=(walked.chain, *walked.legacy),
        added=walked.added,
        head_base=head_digest(body.get("system"), body.get("tools")),
        last_role=roles[-1] if roles else "",
        preserving=preserving,
        messages=len(roles),
    )


def compaction_reply(
    body: Mapping[str, Any],
    walked: Walk,
    *,
    verifier: Verifier,
    outcome: str | None,
    input_tokens: int,
    new_id: Callable[[str], str],
    transformations: list[Any] | None,
) -> Compacted:
    """The reply to a compaction request that passed ``check_request``.

    Args:
        body: the request.
        walked: its walk (its signed blocks checked as for any call).
        verifier: the key and the prefix-check table.
        outcome: ``None`` (a summary) or a scripted failure from ``OUTCOMES``.
        input_tokens: what the summarizer read.
        new_id: fresh ids.
        transformations: the ``input_transformations`` report, or ``None``.

    Raises:
        SimulatedApiError: the scripted 529 ``compaction_unavailable``.
    """
    if outcome == UNAVAILABLE:
        raise SimulatedApiError(
            529,
            "overloaded_error",
            "Compaction is temporarily unavailable (simulated); retry the request",
            error_code=UNAVAILABLE,
        )
    content: list[dict[str, Any]] = []
    nonce = coverage = None
    if outcome is None:
        summary = summary_text(body)
        signature, nonce = sign_summary(verifier.key, summary)
        content = [{"type": COMPACTION, "content": summary, "signature": signature}]
        model = str(body["model"])
        coverage = coverage_of(body, walked, preserving=verifier.runs_prefix_check(model))
    output = estimate_tokens([{"summary": block["content"]} for block in content]) if content else 0
    message: dict[str, Any] = {
        "id": new_id("msg"),
        "type": "message",
        "role": REPLY_ROLE,
        "model": str(body["model"]),
        "content": content,
        "stop_reason": outcome or COMPACTION,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "iterations": [iteration(input_tokens, output)],
        },
    }
    if transformations is not None:
        message["input_transformations"] = transformations
    return Compacted(message, nonce, coverage)


def iteration(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A ``compaction`` entry of ``usage.iterations`` (the cache fields are filled later)."""
    return {
        "type": COMPACTION,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def check_outcome(outcome: str) -> str:
    """``outcome`` if it is one ``fail_compaction_next`` takes.

    Raises:
        ValueError: it is not.
    """
    if outcome not in OUTCOMES:
        raise InvalidValue(f"outcome {outcome!r} is not one of {', '.join(sorted(OUTCOMES))}")
    return outcome
