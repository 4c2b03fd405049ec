"""Who reads whose thinking: the documented readability table (provider rule 9), pure.

A model id is parsed as ``claude-<line>-<major>[-<minor>][-<date>]``; an id that does not parse is
only ever equal to itself. Anything the sources do not state is unreadable (the conservative
reading: never send what may be dropped or refused).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TypeAlias

import attrs

Readability: TypeAlias = Callable[[str, str], bool]
"""``reads(reader_model, producer_model) -> bool``: may ``reader`` read ``producer``'s blocks?"""

_MODEL_ID = re.compile(r"claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?")

OLD_LINES = frozenset({"opus", "sonnet", "haiku"})
"""The lines Opus 5.5 reads earlier blocks of."""

NEW_LINES = frozenset({"fable", "mythos"})
"""The lines whose 5.1 models read each other's blocks."""

_FABLE_5_1 = (5, 1)
_OPUS_5_5 = (5, 5)


@attrs.frozen(order=True)
class ModelName:
    """A parsed model id: its line (``opus``, ``fable``, ...) and version ``(major, minor)``."""

    line: str
    version: tuple[int, int]


def parse_model(model: str) -> ModelName | None:
    """The line and version of a model id (a date suffix is ignored), or ``None``.

    >>> parse_model("claude-opus-5-5-20260901")
    ModelName(line='opus', version=(5, 5))
    >>> parse_model("gpt") is None
    True
    """
    match = _MODEL_ID.fullmatch(model)
    if match is None:
        return None
    return ModelName(match[1], (int(match[2]), int(match[3] or 0)))


def same_model(a: str, b: str) -> bool:
    """True when two ids name the same model (a dated id equals its alias).

    Both id forms count: ``claude-opus-5-5`` and its dated id, and the older form with the
    version first, whose alias ends ``-latest`` (``claude-3-5-haiku-latest`` is
    ``claude-3-5-haiku-20241022``).

    >>> same_model("claude-opus-5-5-20260901", "claude-opus-5-5")
    True
    >>> same_model("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022")
    True
    >>> same_model("claude-3-5-haiku-latest", "claude-3-5-sonnet-20241022")
    False
    """
    if a == b:
        return True
    identity = _identity(a)
    return identity is not None and identity == _identity(b)


def _identity(model: str) -> tuple[str, ModelName] | None:
    """The model an id names, whichever form it is in (``None``: an id that does not parse)."""
    name = parse_model(model)
    if name is not None:
        return ("current", name)
    legacy = _LEGACY_ID.fullmatch(model)
    if legacy is None:
        return None
    return ("legacy", ModelName(legacy[3], (int(legacy[1]), int(legacy[2] or 0))))


def documented_readability(reader: str, producer: str) -> bool:
    """The documented table (provider rule 9), on the Claude API.

    A model always reads its own blocks; Haiku 5.5's blocks replay on every model while Haiku
    5.5 reads only its own; Fable 5.1 and Mythos 5.1 read each other's, earlier models' (before
    5.1) and Opus 5.5's; Opus 5.5 reads earlier Opus, Sonnet and Haiku blocks, not Fable or
    Mythos. Anything else is unreadable (UNCONFIRMED, the conservative reading).

    >>> documented_readability("claude-opus-5-5", "claude-opus-5")
    True
    >>> documented_readability("claude-opus-5", "claude-opus-5-5")
    False
    >>> documented_readability("claude-opus-5-5", "claude-fable-5-1")
    False
    """
    if same_model(reader, producer):
        return True
    read, made = parse_model(reader), parse_model(producer)
    if read is None or made is None:
        return False
    if made == ModelName("haiku", _OPUS_5_5):
        return True
    if read.line in NEW_LINES and read.version == _FABLE_5_1:
        if made.line in NEW_LINES and made.version == _FABLE_5_1:
            return True
        if made == ModelName("opus", _OPUS_5_5):
            return True
        return made.line in OLD_LINES | NEW_LINES and made.version < _FABLE_5_1
    if read == ModelName("opus", _OPUS_5_5):
        return made.line in OLD_LINES and made.version < _OPUS_5_5
    return False


PrefixCheck: TypeAlias = Callable[[str], bool]
"""``checks(model) -> bool``: does ``model`` run the prefix check (order included)?"""

_LEGACY_ID = re.compile(r"claude-(\d+)(?:-(\d))?-(opus|sonnet|haiku)(?:-\d{8}|-latest)?")
"""The older id form, version before line (``claude-3-7-sonnet-20250219``)."""

_UNCHECKED = frozenset({ModelName("mythos", _FABLE_5_1)})
"""Documented not to run the prefix check besides every model before Fable 5.1."""


@functools.lru_cache(maxsize=256)
def documented_prefix_check(model: str) -> bool:
    """True unless ``model`` is documented not to run the prefix check (provider rule 10).

    Mythos 5.1 and the models before Fable 5.1 (an Opus, Sonnet, Haiku, Fable or Mythos id
    with a version below 5.1, or an id of the older form) do not: their requests keep every
    block the model reads, whatever changed before it, and report only model-check drops.
    Fable 5.1 and Opus 5.5 do; Sonnet 5.5, Haiku 5.5, later and unknown ids are treated as
    checking (UNCONFIRMED, the conservative reading: never send what may be refused).

    >>> documented_prefix_check("claude-fable-5-1"), documented_prefix_check("claude-opus-5-5")
    (True, True)
    >>> documented_prefix_check("claude-mythos-5-1"), documented_prefix_check("claude-opus-5")
    (False, False)
    >>> documented_prefix_check("claude-3-7-sonnet-20250219"), documented_prefix_check("x")
    (False, True)
    """
    if _LEGACY_ID.fullmatch(model) is not None:
        return False
    name = parse_model(model)
    if name is None or name.line not in OLD_LINES | NEW_LINES:
        return True
    return not (name in _UNCHECKED or name.version < _FABLE_5_1)


SYSTEM_MESSAGE_MODELS = frozenset(
    {
        "claude-fable-5-1",
        "claude-mythos-5-1",
        "claude-fable-5",
        "claude-mythos-5",
        "claude-opus-5-5",
        "claude-opus-5",
        "claude-opus-4-8",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
    }
)
"""Models documented to accept mid-conversation ``role: "system"`` messages (provider rule 16);
not Sonnet 5."""


@functools.lru_cache(maxsize=256)
def accepts_system_messages(model: str) -> bool:
    """True when ``model`` (or its dated id) takes mid-conversation system messages.

    >>> accepts_system_messages("claude-opus-5-5-20260901")
    True
    >>> accepts_system_messages("claude-sonnet-5")
    False
    """
    return any(same_model(model, known) for known in SYSTEM_MESSAGE_MODELS)
