"""Server-side context editing (provider rules 28-29): ``context_management.edits`` parsed, refused
where the API refuses them, and applied to the model's view of a request.

Pure functions. The client sends its full history and the binding is checked against it; the edits
change only what the model (the script), the usage and the prompt cache see. Edits run in the order
given, each on the result of the one before:

- ``clear_tool_uses_20250919``: once the ``trigger`` is reached (input tokens of the request as
  the model would see it so far, default 100,000; or a count of tool uses), the results of the
  oldest tool uses are replaced by ``CLEARED_RESULT``, keeping the most recent ``keep`` tool uses
  (default 3) and every use of an ``exclude_tools`` tool; ``clear_tool_inputs`` (``true``, or a
  list of tool names) also empties those calls' ``input``. With ``clear_at_least``, nothing is
  cleared unless at least that many tokens would be.
- ``clear_thinking_20251015``: thinking blocks of every assistant turn but the last ``keep``
  (``{"type": "thinking_turns", "value": N}``, default 1; ``"all"`` or ``{"type": "all"}`` keeps
  every turn) are removed. An assistant turn runs from an assistant message to the next user
  message that is not only tool results. Needs thinking on; listed first when combined.
- ``compact_20260112`` (threshold compaction): validated (a ``trigger`` of at least 50,000 input
  tokens, default 150,000) and refused on a request that carries an on-demand compaction block;
  a request that reaches the trigger is compacted (``_threshold``).

Each edit that removed something is reported in ``applied_edits``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._compaction import COMPACTION_BETA, is_compaction, is_threshold
from ._errors import InvalidRequest

EDITING_BETA = "context-management-2025-06-27"
"""Enables ``context_management`` and its clearing edits. A request whose only edit is threshold
compaction needs only that one's beta (a recorded 200: pydantic-ai sends ``compact_20260112``
under ``compact-2026-01-12`` alone)."""

THRESHOLD_BETA = "compact-2026-01-12"
"""Threshold compaction's own beta (``compact_20260112``); the on-demand one also enables it."""

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
THRESHOLD_COMPACT = "compact_20260112"

CLEARED_RESULT = "[This tool result was cleared to save context.]"
"""What a cleared ``tool_result`` holds in the model's view (the simulator's wording)."""

DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
MIN_THRESHOLD_TRIGGER = 50_000
DEFAULT_THRESHOLD_TRIGGER = 150_000

THINKING_TYPES = ("thinking", "redacted_thinking")

Counter = Callable[[Sequence[Any]], int]
"""``count(messages)``: the input tokens of the request with these messages."""


@attrs.frozen
class ClearToolUses:
    """A parsed ``clear_tool_uses_20250919`` edit."""

    trigger_kind: str = "input_tokens"
    trigger_value: int = DEFAULT_TRIGGER_TOKENS
    keep: int = DEFAULT_KEEP_TOOL_USES
    clear_at_least: int = 0
    exclude: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False


@attrs.frozen
class ClearThinking:
    """A parsed ``clear_thinking_20251015`` edit; ``keep`` ``None`` keeps every turn."""

    keep: int | None = DEFAULT_KEEP_THINKING_TURNS


@attrs.frozen
class ThresholdCompact:
    """A parsed ``compact_20260112`` edit."""

    trigger: int = DEFAULT_THRESHOLD_TRIGGER
    instructions: str = ""
    pause: bool = False


Edit = ClearToolUses | ClearThinking | ThresholdCompact


@attrs.frozen
class Edited:
    """The model's view after the edits, what each applied edit reported, the count before, and
    the threshold compaction whose trigger the request reached (``None``: none)."""

    messages: list[dict[str, Any]]
    applied: list[dict[str, Any]]
    original_tokens: int
    compact: ThresholdCompact | None = None


def _count_value(value: Any, path: str, kinds: Sequence[str]) -> tuple[str, int]:
    if (
        not isinstance(value, Mapping)
        or value.get("type") not in kinds
        or not isinstance(value.get("value"), int)
        or isinstance(value.get("value"), bool)
        or value["value"] < 0
        or set(value) - {"type", "value"}
    ):
        shapes = " or ".join(f"{{'type': '{kind}', 'value': N}}" for kind in kinds)
        raise InvalidRequest(f"{path}: Input should be {shapes} with N >= 0")
    return str(value["type"]), int(value["value"])


def _names(value: Any, path: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise InvalidRequest(f"{path}: Input should be a list of tool names")
    return frozenset(value)


def _clear_tool_uses(edit: Mapping[str, Any], path: str) -> ClearToolUses:
    known = {"type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"}
    _no_extra(edit, known, path)
    parsed = ClearToolUses()
    if "trigger" in edit:
        kind, value = _count_value(
            edit["trigger"], f"{path}.trigger", ("input_tokens", "tool_uses")
        )
        parsed = attrs.evolve(parsed, trigger_kind=kind, trigger_value=value)
    if "keep" in edit:
        parsed = attrs.evolve(
            parsed, keep=_count_value(edit["keep"], f"{path}.keep", ("tool_uses",))[1]
        )
    if "clear_at_least" in edit:
        least = _count_value(edit["clear_at_least"], f"{path}.clear_at_least", ("input_tokens",))
        parsed = attrs.evolve(parsed, clear_at_least=least[1])
    if "exclude_tools" in edit:
        parsed = attrs.evolve(
            parsed, exclude=_names(edit["exclude_tools"], f"{path}.exclude_tools")
        )
    inputs = edit.get("clear_tool_inputs", False)
    if not isinstance(inputs, bool):
        inputs = _names(inputs, f"{path}.clear_tool_inputs")
    return attrs.evolve(parsed, clear_inputs=inputs)


def _clear_thinking(edit: Mapping[str, Any], path: str) -> ClearThinking:
    _no_extra(edit, {"type", "keep"}, path)
    keep = edit.get("keep", {"type": "thinking_turns", "value": DEFAULT_KEEP_THINKING_TURNS})
    if keep == "all" or keep == {"type": "all"}:
        return ClearThinking(None)
    value = _count_value(keep, f"{path}.keep", ("thinking_turns",))[1]
    if value < 1:
        raise InvalidRequest(f"{path}.keep.value: Input should be at least 1 (or keep 'all')")
    return ClearThinking(value)


def _threshold(edit: Mapping[str, Any], path: str) -> ThresholdCompact:
    _no_extra(edit, {"type", "trigger", "instructions", "pause_after_compaction"}, path)
    trigger = DEFAULT_THRESHOLD_TRIGGER
    if "trigger" in edit:
        trigger = _count_value(edit["trigger"], f"{path}.trigger", ("input_tokens",))[1]
    if trigger < MIN_THRESHOLD_TRIGGER:
        raise InvalidRequest(
            f"{path}.trigger.value: Input should be at least {MIN_THRESHOLD_TRIGGER} input tokens"
        )
    instructions, pause = edit.get("instructions", ""), edit.get("pause_after_compaction", False)
    if not isinstance(instructions, str) or not isinstance(pause, bool):
        raise InvalidRequest(f"{path}: instructions is a string, pause_after_compaction a boolean")
    return ThresholdCompact(trigger, instructions.strip(), pause)


def _no_extra(edit: Mapping[str, Any], known: set[str], path: str) -> None:
    for name in sorted(edit):
        if name not in known:
            raise InvalidRequest(f"{path}.{name}: Extra inputs are not permitted")


PARSERS: dict[str, Callable[[Mapping[str, Any], str], Edit]] = {
    CLEAR_TOOL_USES: _clear_tool_uses,
    CLEAR_THINKING: _clear_thinking,
    THRESHOLD_COMPACT: _threshold,
}


def parse_edits(body: Mapping[str, Any], betas: frozenset[str]) -> tuple[Edit, ...]:
    """The request's edits, in order (``()`` without ``context_management``).

    Raises:
        InvalidRequest: the beta is missing, an edit is malformed or unknown, an edit type is
            repeated, ``clear_thinking`` is not first or thinking is off, or threshold
            compaction meets an on-demand compaction block.
    """
    if "context_management" not in body:
        return ()
    if not betas & {EDITING_BETA, THRESHOLD_BETA, COMPACTION_BETA}:
        raise InvalidRequest(
            f"context_management: context editing needs the `{EDITING_BETA}` beta header"
        )
    config = body["context_management"]
    edits = config.get("edits", []) if isinstance(config, Mapping) else None
    if not isinstance(edits, list) or set(config) - {"edits"}:
        raise InvalidRequest("context_management: Input should be {'edits': [...]}")
    parsed: list[Edit] = []
    for k, edit in enumerate(edits):
        path = f"context_management.edits.{k}"
        kind = edit.get("type") if isinstance(edit, Mapping) else None
        if kind not in PARSERS:
            raise InvalidRequest(f"{path}.type: Input should be one of {', '.join(PARSERS)}")
        one = PARSERS[kind](edit, path)
        if any(type(other) is type(one) for other in parsed):
            raise InvalidRequest(f"{path}: each edit type may be given once")
        parsed.append(one)
    _check_combination(body, betas, parsed)
    return tuple(parsed)


def _check_combination(body: Mapping[str, Any], betas: frozenset[str], edits: list[Edit]) -> None:
    for k, edit in enumerate(edits):
        path = f"context_management.edits.{k}"
        if not isinstance(edit, ThresholdCompact) and EDITING_BETA not in betas:
            raise InvalidRequest(f"{path}: context editing needs the `{EDITING_BETA}` beta header")
        if isinstance(edit, ClearThinking):
            thinking = body.get("thinking")
            if not isinstance(thinking, Mapping) or thinking.get("type") not in (
                "enabled",
                "adaptive",
            ):
                raise InvalidRequest(f"{path}: {CLEAR_THINKING} needs thinking to be enabled")
            if k != 0:
                raise InvalidRequest(f"{path}: {CLEAR_THINKING} must be the first edit")
        if isinstance(edit, ThresholdCompact):
            if not betas & {THRESHOLD_BETA, COMPACTION_BETA}:
                raise InvalidRequest(
                    f"{path}: {THRESHOLD_COMPACT} needs the `{THRESHOLD_BETA}` beta"
                )
            messages = body.get("messages")
            first = messages[0] if isinstance(messages, list) and messages else {}
            content = first.get("content") if isinstance(first, Mapping) else None
            if (
                isinstance(content, list)
                and content
                and is_compaction(content[0])
                and not (is_threshold(content[0]))
            ):
                raise InvalidRequest(
                    f"{path}: {THRESHOLD_COMPACT} cannot run on a request that carries an "
                    "on-demand compaction block"
                )


def _tool_uses(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, Mapping[str, Any]]]:
    return [
        (i, j, block)
        for i, message in enumerate(messages)
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for j, block in enumerate(message["content"])
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]


def _clear_tools(edit: ClearToolUses, messages: list[dict[str, Any]], count: Counter) -> Edited:
    before = count(messages)
    uses = _tool_uses(messages)
    reached = len(uses) if edit.trigger_kind == "tool_uses" else before
    if reached < edit.trigger_value:
        return Edited(messages, [], before)
    older = uses[: max(0, len(uses) - edit.keep)]
    chosen = {str(b["id"]): (i, j, b) for i, j, b in older if b.get("name") not in edit.exclude}
    if not chosen:
        return Edited(messages, [], before)
    out = copy.deepcopy(messages)
    for i, j, block in chosen.values():
        clears_input = edit.clear_inputs is True or (
            isinstance(edit.clear_inputs, frozenset) and block.get("name") in edit.clear_inputs
        )
        if clears_input:
            out[i]["content"][j] = {**out[i]["content"][j], "input": {}}
    for message in out:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if (
                isinstance(block, Mapping)
                and block.get("type") == "tool_result"
                and block.get("tool_use_id") in chosen
            ):
                content[j] = {**block, "content": [{"type": "text", "text": CLEARED_RESULT}]}
    cleared = before - count(out)
    if cleared < max(edit.clear_at_least, 1):
        return Edited(messages, [], before)
    report = {
        "type": CLEAR_TOOL_USES,
        "cleared_tool_uses": len(chosen),
        "cleared_input_tokens": cleared,
    }
    return Edited(out, [report], before)


def _turns(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Assistant turns: indices of assistant messages, a turn ending at a user message that is
    not only tool results."""
    turns: list[list[int]] = []
    open_turn = False
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            if not open_turn:
                turns.append([])
                open_turn = True
            turns[-1].append(i)
        elif role == "user":
            content = message.get("content")
            results_only = (
                isinstance(content, list)
                and bool(content)
                and all(isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content)
            )
            open_turn = open_turn and results_only
    return turns


def _clear_thinking_turns(
    edit: ClearThinking, messages: list[dict[str, Any]], count: Counter
) -> Edited:
    before = count(messages)
    turns = _turns(messages)
    if edit.keep is None or len(turns) <= edit.keep:
        return Edited(messages, [], before)
    out = copy.deepcopy(messages)
    cleared_turns = 0
    for turn in turns[: len(turns) - edit.keep]:
        had = False
        for i in turn:
            content = out[i].get("content")
            if not isinstance(content, list):
                continue
            kept = [
                b
                for b in content
                if not (isinstance(b, Mapping) and b.get("type") in THINKING_TYPES)
            ]
            had = had or len(kept) != len(content)
            out[i]["content"] = kept
        cleared_turns += had
    if not cleared_turns:
        return Edited(messages, [], before)
    report = {
        "type": CLEAR_THINKING,
        "cleared_thinking_turns": cleared_turns,
        "cleared_input_tokens": before - count(out),
    }
    return Edited(out, [report], before)


def apply_edits(edits: Sequence[Edit], messages: list[dict[str, Any]], count: Counter) -> Edited:
    """The model's view of ``messages`` after ``edits``, with one report per applied edit and
    the threshold compaction the request triggers, if any (``_threshold`` performs it)."""
    original = count(messages)
    applied: list[dict[str, Any]] = []
    compact: ThresholdCompact | None = None
    for edit in edits:
        if isinstance(edit, ThresholdCompact):
            compact = edit if count(messages) >= edit.trigger else None
            continue
        step = (
            _clear_tools(edit, messages, count)
            if isinstance(edit, ClearToolUses)
            else (_clear_thinking_turns(edit, messages, count))
        )
        messages = step.messages
        applied.extend(step.applied)
    return Edited(messages, applied, original, compact)
