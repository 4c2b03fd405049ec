"""What the host sends beside the messages, and how binding is configured.

``Head`` is frozen; its component digests are computed once at construction over canonical
JSON (``_canonical``), so comparing heads is O(1). The binding digest covers ``system`` (a string
and its one text block bind alike), the non-deferred ``tools`` and ``model``; ``settings`` join
it only with ``ThinkingBinding(binds_settings=True)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs

from ._canonical import digest
from ._errors import InvalidHead, InvalidValue
from ._readability import (
    PrefixCheck,
    Readability,
    accepts_system_messages,
    documented_prefix_check,
    documented_readability,
)

HEAD_COMPONENTS = ("system", "tools", "model", "settings")
"""The order ``ThinkingStrip.changed`` lists differing components in."""


def _dicts(value: object, component: str, expected: str) -> tuple[dict[str, Any], ...]:
    """A list of dicts (tool definitions, system text blocks), checked before it is copied."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise InvalidHead(component, value, expected)
    if not all(isinstance(item, Mapping) for item in value):
        raise InvalidHead(component, value, expected)
    return tuple(dict(item) for item in value)


def _tools(value: Sequence[Mapping[str, Any]] | None) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    return _dicts(value, "tools", 'a list of tool definition dicts ([{"name": ..., ...}])')


def _system(
    value: str | Sequence[Mapping[str, Any]] | None,
) -> str | tuple[dict[str, Any], ...] | None:
    if value is None or isinstance(value, str):
        return value
    return _dicts(value, "system", 'a string or a list of text blocks ([{"type": "text", ...}])')


def _settings(value: Mapping[str, Any] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidHead("settings", value, 'a dict of request fields ({"max_tokens": ...})')
    return dict(value)


def _model(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidHead("model", value, 'a model id string ("claude-opus-5-5")')


def bound_system(system: str | Sequence[Mapping[str, Any]] | None) -> Any:
    """``system`` in the form its digest is taken over: equal meanings digest alike.

    The API binds a string as the one text block it stands for and ``""`` as nothing, and never
    binds ``cache_control``; so one plain text block digests as its string, and an empty system
    as ``None``. (Stamps made before this normalisation, over a string, stay valid.)
    """
    if not system:
        return None
    if isinstance(system, str):
        return system
    blocks = [dict(block) for block in system]
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        plain = {k: v for k, v in blocks[0].items() if k != "cache_control"}
        if set(plain) == {"type", "text"} and isinstance(plain["text"], str):
            return plain["text"] or None
    return blocks


def bound_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The tools a thinking block binds to: every tool but deferred ones (``defer_loading``)."""
    return [dict(tool) for tool in tools if not tool.get("defer_loading")]


@attrs.frozen
class Head:
    """The request's head: ``model``, ``system`` text or text blocks, ``tools``, ``settings``.

    ``settings`` is every other request field (``max_tokens``, ``thinking``, ``tool_choice``,
    ``metadata``, ``output_config``, ...).

    Raises:
        InvalidHead: a component of the wrong shape (``model=123``, ``tools="read_log"``) or
            one that is not JSON-serialisable; the message names it. It is a ``TypeError`` and
            a ``ValueError``.
    """

    model: str = attrs.field(validator=_model)
    system: str | tuple[dict[str, Any], ...] | None = attrs.field(default=None, converter=_system)
    tools: tuple[dict[str, Any], ...] = attrs.field(factory=tuple, converter=_tools)
    settings: dict[str, Any] = attrs.field(factory=dict, converter=_settings)
    digests: dict[str, str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        values = {
            "system": bound_system(self.system),
            "tools": bound_tools(self.tools),
            "model": self.model,
            "settings": self.settings,
        }
        out: dict[str, str] = {}
        for name in HEAD_COMPONENTS:
            try:
                out[name] = digest(values[name])
            except ValueError as err:
                raise InvalidHead(name, values[name], f"JSON-serialisable values ({err})") from err
        object.__setattr__(self, "digests", out)

    @property
    def thinking_enabled(self) -> bool:
        """True when ``settings["thinking"]`` asks for thinking."""
        thinking = self.settings.get("thinking")
        return isinstance(thinking, Mapping) and thinking.get("type") in ("enabled", "adaptive")


@attrs.frozen
class ThinkingBinding:
    """How the compiler treats signed thinking.

    Attributes:
        binds: check every thinking block against its stamp; ``False`` strips nothing.
        drop_block: ask the provider to drop (not reject) blocks failing its check, via
            ``thinking.block_binding`` and the binding-controls beta.
        binds_settings: treat request settings as bound (off: the vendor does not bind them).
        system_messages: how stored ``role: "system"`` messages (a host's own, notices, head
            changes) are sent: ``"auto"`` as system messages on models that take them
            (provider rule 16) and as user text elsewhere; ``"system"`` or ``"user"`` force one.
            ``system_notices=`` is accepted as an alias.
        append_changes: on a model that takes system messages, keep ``system`` and ``tools`` as
            anchored and append a change as a ``head-change`` system message (SPEC 7b) instead
            of stripping every earlier thinking block.
        inline_tools: a redefined tool (or one re-added with another definition) is given
            inline (``tool_definition``, beta ``inline-tools``, Claude API only); off, such a
            change is a head change.
        reads: the model check ``(reader_model, producer_model) -> bool``; the default is the
            documented table (provider rule 9): a model reads its own blocks, anything
            undocumented is unreadable.
        prefix_check: ``checks(model) -> bool``, whether the requested model runs the prefix
            check (order included); the default is the documented list (provider rule 10):
            Mythos 5.1 and models before Fable 5.1 do not, so a request to one keeps every
            block the model reads; anything undocumented checks.
        enforcement: ``"enforce"`` (the default) leaves out every block the rules say fails
            and asks for ``block_binding`` (with ``drop_block``); ``"observe"`` (an account the
            prefix check is not enforced on, provider rules 10, 14) sends no ``block_binding``
            and every block the model reads and that is as it was made, records which ones it
            predicts to fail (``CompileResult.predicted_mismatches``) and compares them with the
            response's ``thinking_mismatch_allowed`` entries (``binding_prediction_mismatch``).
    """

    binds: bool = True
    drop_block: bool = True
    binds_settings: bool = False
    system_messages: Literal["auto", "user", "system"] = attrs.field(
        default="auto", validator=attrs.validators.in_(("auto", "user", "system"))
    )
    append_changes: bool = True
    inline_tools: bool = True
    reads: Readability = attrs.field(
        default=documented_readability, validator=attrs.validators.is_callable()
    )
    prefix_check: PrefixCheck = attrs.field(
        default=documented_prefix_check, validator=attrs.validators.is_callable()
    )
    enforcement: Literal["enforce", "observe"] = attrs.field(
        default="enforce", validator=attrs.validators.in_(("enforce", "observe"))
    )

    system_notices: Literal["auto", "user", "system"] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    """Alias of ``system_messages`` (the first round's name), accepted at construction only;
    when given it wins. Read ``system_messages``."""

    def __attrs_post_init__(self) -> None:
        if self.system_notices is not None:
            if self.system_notices not in ("auto", "user", "system"):
                raise InvalidValue(
                    "'system_notices' must be in ('auto', 'user', 'system') "
                    f"(got {self.system_notices!r})"
                )
            object.__setattr__(self, "system_messages", self.system_notices)
        object.__setattr__(self, "system_notices", None)  # so ``attrs.evolve`` cannot undo it

    def system_role(self, model: str) -> Literal["user", "system"]:
        """The role stored system messages are sent with to ``model``."""
        if self.system_messages == "auto":
            return "system" if accepts_system_messages(model) else "user"
        return self.system_messages

    def appends(self, model: str) -> bool:
        """Whether a ``system`` / ``tools`` change is appended on ``model`` (SPEC 7b)."""
        return (
            self.append_changes
            and self.system_role(model) == "system"
            and accepts_system_messages(model)
        )

    def bound_components(self) -> tuple[str, ...]:
        """The head components a block is bound to under this configuration."""
        return HEAD_COMPONENTS if self.binds_settings else HEAD_COMPONENTS[:3]


def changed_components(stamped: Mapping[str, str], current: Mapping[str, str]) -> tuple[str, ...]:
    """Components whose digests differ, in ``HEAD_COMPONENTS`` order."""
    return tuple(name for name in HEAD_COMPONENTS if stamped.get(name) != current.get(name))
