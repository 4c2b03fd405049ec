"""The documented model tables: who reads whose thinking, who accepts mid-conversation system
messages.

Pure data and functions (provider rules 9, 16). A model id is parsed as ``claude-<line>-<major>[-
<minor>][-<date>]``; an id that does not parse is only ever equal to itself. Anything the sources do
not state is the conservative reading: unreadable, not accepted.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

Readability = Callable[[str, str], bool]
"""``readable(reader_model, producer_model) -> bool``: may ``reader`` read ``producer``'s blocks?"""

_MODEL_ID = re.compile(r"claude-([a-z]+)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?")

OLD_LINES = frozenset({"opus", "sonnet", "haiku"})
"""The lines Opus 5.5 reads earlier blocks of (provider rule 9)."""

NEW_LINES = frozenset({"fable", "mythos"})
"""The lines whose 5.1 models read each other's blocks."""


@attrs.frozen(order=True)
class ModelName:
    """A parsed model id: its line (``opus``, ``fable``, ...) and version ``(major, minor)``."""

    line: str
    version: tuple[int, int]

    def __str__(self) -> str:
        major, minor = self.version
        return f"claude-{self.line}-{major}" + (f"-{minor}" if minor else "")


def parse_model(model: str) -> ModelName | None:
    """The line and version of a model id (a date suffix is ignored), or ``None``.

    >>> parse_model("claude-opus-5-5-20260901")
    ModelName(line='opus', version=(5, 5))
    >>> parse_model("claude-sim-1")
    ModelName(line='sim', version=(1, 0))
    >>> parse_model("gpt") is None
    True
    """
    match = _MODEL_ID.fullmatch(model)
    if match is None:
        return None
    return ModelName(match[1], (int(match[2]), int(match[3] or 0)))


def same_model(a: str, b: str) -> bool:
    """True when two ids name the same model (a dated id equals its alias)."""
    return a == b or (parse_model(a) is not None and parse_model(a) == parse_model(b))


FABLE_5_1 = (5, 1)
OPUS_5_5 = (5, 5)


def documented_readability(reader: str, producer: str, *, claude_api: bool = True) -> bool:
    """The documented readability table (provider rule 9).

    A model always reads its own blocks; Haiku 5.5's blocks replay on every model while Haiku
    5.5 reads only its own; Fable 5.1 and Mythos 5.1 read each other's and earlier models'
    (versions before 5.1), and Opus 5.5's on the Claude API only; Opus 5.5 reads earlier Opus,
    Sonnet and Haiku blocks (versions before 5.5), not Fable or Mythos. Anything else is
    unreadable (UNCONFIRMED, the conservative reading).

    Args:
        reader: the requested model.
        producer: the model that made the block.
        claude_api: the Claude API (``True``, the simulator's platform) or another platform.

    >>> documented_readability("claude-fable-5-1", "claude-mythos-5-1")
    True
    >>> documented_readability("claude-opus-5-5", "claude-fable-5-1")
    False
    """
    if same_model(reader, producer):
        return True
    read, made = parse_model(reader), parse_model(producer)
    if read is None or made is None:
        return False
    if made == ModelName("haiku", OPUS_5_5):
        return True
    if read.line in NEW_LINES and read.version == FABLE_5_1:
        if made.line in NEW_LINES and made.version == FABLE_5_1:
            return True
        if made == ModelName("opus", OPUS_5_5):
            return claude_api
        return made.line in OLD_LINES | NEW_LINES and made.version < FABLE_5_1
    if read == ModelName("opus", OPUS_5_5):
        return made.line in OLD_LINES and made.version < OPUS_5_5
    return False


PrefixCheck = Callable[[str], bool]
"""``runs_check(model) -> bool``: does ``model`` run the prefix check (order included)?"""

_DATED_TAIL = re.compile(r"-\d{8}$|-latest$")
_OLD_FORM = re.compile(r"claude-\d+(-\d)?-(opus|sonnet|haiku)")
"""Ids of the form before ``claude-<line>-<version>`` (``claude-3-7-sonnet``)."""

KNOWN_LINES = OLD_LINES | NEW_LINES


def documented_prefix_check(model: str) -> bool:
    """Whether ``model`` runs the prefix check (provider rule 10).

    [PT]: Claude Mythos 5.1 and models before Claude Fable 5.1 don't; their requests report
    only model-check drops. "Before Fable 5.1": a known line at a version below 5.1, or an id
    of the older form. Every other id checks (Fable 5.1, Opus 5.5 documented; Sonnet 5.5,
    Haiku 5.5, later and unknown ids UNCONFIRMED, so the strict reading).

    Examples:
        >>> [documented_prefix_check(m) for m in ("claude-mythos-5-1", "claude-sonnet-5")]
        [False, False]
        >>> [documented_prefix_check(m) for m in ("claude-fable-5-1", "claude-sim-1")]
        [True, True]
    """
    bare = _DATED_TAIL.sub("", model)
    if _OLD_FORM.fullmatch(bare):
        return False
    name = parse_model(bare)
    if name is None or name.line not in KNOWN_LINES:
        return True
    if name.line == "mythos" and name.version == FABLE_5_1:
        return False
    return name.version >= FABLE_5_1


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
"""Models documented to accept mid-conversation ``role: "system"`` messages (provider rule 16;
not Sonnet 5). Pass a superset to ``Simulator(system_message_models=...)`` to extend it."""


def accepts_system_messages(model: str, models: frozenset[str]) -> bool:
    """True when ``model`` (or its undated alias) is one of ``models``."""
    return any(same_model(model, known) for known in models)
