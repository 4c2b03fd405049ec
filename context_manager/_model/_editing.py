"""Server-side context editing settings (provider rule 29) and what a reply reports about it.

Pure data and functions. ``ContextEditing`` is the host's choice; ``to_wire`` is the request's
``context_management`` value. The API applies the edits to its own copy of the request: the
client keeps and sends its full history, so no thinking block is invalidated. A recorded reply
keeps the call's ``context_management.applied_edits`` in ``metadata.extra["context_management"]``
(``EDITING_KEY``), so no store schema carries it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import InvalidValue

EDITING_BETA = "context-management-2025-06-27"
"""The beta a request with ``context_management`` needs."""

EDITING_KEY = "context_management"
"""The ``metadata.extra`` key a recorded reply's applied edits are kept under."""

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise InvalidValue(f"{attribute.name} must be a non-negative integer, got {value!r}")


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(str(name) for name in value)


def _inputs(value: Any) -> bool | tuple[str, ...]:
    return value if isinstance(value, bool) else _names(value)


@attrs.frozen
class ClearToolUses:
    """Clear old tool results on the server (``clear_tool_uses_20250919``).

    Attributes:
        trigger_tokens: clear once the request's input reaches this many tokens.
        keep: the most recent tool uses never cleared.
        clear_at_least: clear only when at least this many tokens go (``None``: any amount);
            each clear costs one cache write from the cleared point, so this makes it worth it.
        exclude_tools: tools whose uses are never cleared.
        clear_inputs: also clear the calls' inputs: ``True`` for every tool, or tool names.
    """

    trigger_tokens: int = attrs.field(default=100_000, validator=_non_negative)
    keep: int = attrs.field(default=3, validator=_non_negative)
    clear_at_least: int | None = attrs.field(default=None, validator=_non_negative)
    exclude_tools: tuple[str, ...] = attrs.field(default=(), converter=_names)
    clear_inputs: bool | tuple[str, ...] = attrs.field(default=False, converter=_inputs)

    def to_wire(self) -> dict[str, Any]:
        """The edit as the API takes it."""
        edit: dict[str, Any] = {
            "type": CLEAR_TOOL_USES,
            "trigger": {"type": "input_tokens", "value": self.trigger_tokens},
            "keep": {"type": "tool_uses", "value": self.keep},
        }
        if self.clear_at_least is not None:
            edit["clear_at_least"] = {"type": "input_tokens", "value": self.clear_at_least}
        if self.exclude_tools:
            edit["exclude_tools"] = list(self.exclude_tools)
        if self.clear_inputs is True:
            edit["clear_tool_inputs"] = True
        elif isinstance(self.clear_inputs, tuple) and self.clear_inputs:
            edit["clear_tool_inputs"] = list(self.clear_inputs)
        return edit


@attrs.frozen
class ClearThinking:
    """Clear old turns' thinking on the server (``clear_thinking_20251015``).

    Off unless given: the API then drops reasoning the agent would need to be told about.

    Attributes:
        keep_turns: the most recent assistant turns whose thinking is kept (``None``: all).
    """

    keep_turns: int | None = attrs.field(default=1, validator=_non_negative)

    def to_wire(self) -> dict[str, Any]:
        """The edit as the API takes it."""
        keep: Any = (
            "all"
            if self.keep_turns is None
            else {"type": "thinking_turns", "value": self.keep_turns}
        )
        return {"type": CLEAR_THINKING, "keep": keep}


@attrs.frozen
class ContextEditing:
    """Server-side context editing for every request of a context (provider rule 29).

    Attributes:
        clear_tool_uses: clear old tool results (``ClearToolUses``), or ``None``.
        clear_thinking: clear old turns' thinking (``ClearThinking``), or ``None`` (default).
    """

    clear_tool_uses: ClearToolUses | None = attrs.field(factory=ClearToolUses)
    clear_thinking: ClearThinking | None = None

    @property
    def enabled(self) -> bool:
        """True when at least one edit is configured."""
        return self.clear_tool_uses is not None or self.clear_thinking is not None

    def to_wire(self) -> dict[str, Any]:
        """The request's ``context_management`` (thinking clearing first, as the API asks)."""
        edits = [edit.to_wire() for edit in (self.clear_thinking, self.clear_tool_uses) if edit]
        return {"edits": edits}


def applied_edits_of(message: object) -> list[dict[str, Any]] | None:
    """A reply's ``context_management.applied_edits`` as plain dicts (SDK message or dict), or
    ``None`` when it reports none."""
    raw: Any = message.get(EDITING_KEY) if isinstance(message, Mapping) else None
    if raw is None and not isinstance(message, Mapping | list | tuple | str):
        raw = getattr(message, EDITING_KEY, None)
    if raw is not None and not isinstance(raw, Mapping):
        dump = getattr(raw, "model_dump", None)
        raw = dump(mode="json") if callable(dump) else None
    edits = raw.get("applied_edits") if isinstance(raw, Mapping) else None
    if not isinstance(edits, list):
        return None
    return [dict(edit) for edit in edits if isinstance(edit, Mapping)]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@attrs.frozen
class CallEdits:
    """What the server's context editing cleared on one call (zeros when nothing).

    Attributes:
        cleared_tool_uses: tool uses whose results (and maybe inputs) were cleared.
        cleared_thinking_turns: assistant turns whose thinking was cleared.
        cleared_input_tokens: input tokens the edits removed, all edits together.
    """

    cleared_tool_uses: int = 0
    cleared_thinking_turns: int = 0
    cleared_input_tokens: int = 0

    @classmethod
    def of(cls, message: object) -> CallEdits:
        """The applied edits a reply reports (SDK message or dict), summed per kind.

        >>> CallEdits.of({"context_management": {"applied_edits": [
        ...     {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2,
        ...      "cleared_input_tokens": 900}]}})
        CallEdits(cleared_tool_uses=2, cleared_thinking_turns=0, cleared_input_tokens=900)
        """
        edits = applied_edits_of(message) or []
        return cls(
            sum(_count(e.get("cleared_tool_uses")) for e in edits),
            sum(_count(e.get("cleared_thinking_turns")) for e in edits),
            sum(_count(e.get("cleared_input_tokens")) for e in edits),
        )


def editing_extra(message: object) -> dict[str, Any]:
    """The ``metadata.extra`` part for a reply's applied edits (empty when it reports none)."""
    edits = applied_edits_of(message)
    return {EDITING_KEY: {"applied_edits": edits}} if edits is not None else {}
