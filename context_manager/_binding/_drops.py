"""Drops: what the provider removed itself, read from ``input_transformations`` and placed.

Pure functions over frozen records. Bad input never raises: unknown entry types and reasons are
ignored with a debug event, and a drop whose path cannot be placed is kept as ``UnplacedDrop``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from context_manager._model._content import Block, is_thinking, to_blocks
from context_manager._model._errors import InvalidType
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ProvenanceEntry

log = library_logger("context_manager.drops")

DROPPED_TYPE = "thinking_dropped"
"""The one ``input_transformations`` entry type that reports a removed block."""

ALLOWED_TYPE = "thinking_mismatch_allowed"
"""The entry type for a failing block that still reached the model (an unenforced account)."""
KNOWN_TYPES = frozenset({DROPPED_TYPE, ALLOWED_TYPE})
"""Entry types the API documents; a ``thinking_mismatch_allowed`` block was sent, so no drop."""

RELEASED_REASONS = frozenset({"prefix_binding_mismatch"})
"""Reasons a block will never verify again: the prefix it binds changed."""

KEPT_REASONS = frozenset(
    {"model_binding_mismatch", "organization_binding_mismatch", "end_user_binding_mismatch"}
)
"""Reasons checked before the model (provider rule 11): a block dropped for them costs nothing to
send again, and the blocks made while it was sent recorded it before them, so leaving it out
would break their order (issue 28 item 6). It is kept, and verifies again under a model, an
organization or an end user it binds."""

MODEL_REASON = "model_binding_mismatch"
"""The one reason a compile can foresee: it sends a block the model cannot read on purpose
(``CompileResult.unreadable``), so that drop is expected, not a new loss."""

KNOWN_REASONS = RELEASED_REASONS | KEPT_REASONS

_INDEX = r"(0|[1-9][0-9]{0,17})"
_PATH = re.compile(rf"messages\.{_INDEX}\.content\.{_INDEX}")
"""The only path form the API emits; anything else (negative, zero-padded, nested) is malformed.
An index is capped at 18 digits: no request is that long, and ``int()`` of a huge digit string
would raise instead of leaving the path unplaced."""

WHY_MALFORMED = "malformed path"
WHY_OUT_OF_RANGE = "past the compiled messages and the appended rounds"
WHY_NO_SINGLE_SOURCE = "compiled message has no single stored source"
WHY_NOT_THINKING = "content index is not a thinking block"


@attrs.frozen
class ThinkingDrop:
    """One ``thinking_dropped`` entry: its path as sent, parsed to ``(i, j)`` when well formed."""

    path: str
    i: int | None
    j: int | None
    reason: str


@attrs.frozen
class ReplyDrop:
    """A dropped block placed on a stored reply.

    ``block`` is the stored block index, or ``None`` for a reply found only because it carries
    the same signature (its index is not known without reading it; it is counted, not released).
    """

    message_id: MessageId
    block: int | None
    reason: str
    path: str


@attrs.frozen
class RoundDrop:
    """A dropped block in a round the host appended after the compiled messages (not stored yet).

    ``content`` is the round's blocks when they could be read (for naming it), else ``None``.
    ``message_id`` is the stored reply when the host passed the round as a ``StoredMessage``
    (its block ``j`` is then the stored block ``j``), so the release policy applies to it.
    """

    round: int
    j: int
    reason: str
    path: str
    content: tuple[Block, ...] | None = attrs.field(default=None, eq=False, repr=False)
    message_id: MessageId | None = attrs.field(default=None, kw_only=True)


@attrs.frozen
class UnplacedDrop:
    """A dropped block that could not be placed; ``why`` says what was wrong with its path."""

    path: str
    reason: str
    why: str


@attrs.frozen
class PlacedDrops:
    """One call's drops, placed.

    ``replies`` and ``rounds`` are in request order (oldest first); a reply found by signature
    follows the placement that found it.
    """

    replies: tuple[ReplyDrop, ...] = ()
    rounds: tuple[RoundDrop, ...] = ()
    unplaced: tuple[UnplacedDrop, ...] = ()

    @property
    def placed_blocks(self) -> int:
        """Dropped blocks placed on a stored reply or a round (signature matches add none)."""
        return sum(1 for r in self.replies if r.block is not None) + len(self.rounds)

    @property
    def unplaced_count(self) -> int:
        """Dropped blocks that could not be placed."""
        return len(self.unplaced)

    @property
    def reply_ids(self) -> tuple[MessageId, ...]:
        """Distinct stored replies hit, each once, in request order."""
        return tuple(dict.fromkeys(r.message_id for r in self.replies))

    @property
    def round_indexes(self) -> tuple[int, ...]:
        """Distinct appended rounds hit, in order."""
        return tuple(dict.fromkeys(r.round for r in self.rounds))

    @property
    def reply_count(self) -> int:
        """Replies that lost reasoning: distinct stored replies plus distinct rounds."""
        return len(self.reply_ids) + len(self.round_indexes)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Distinct reasons of every drop, placed or not, in order of first appearance."""
        every = [
            *(r.reason for r in self.replies),
            *(r.reason for r in self.rounds),
            *(u.reason for u in self.unplaced),
        ]
        return tuple(dict.fromkeys(every))

    @property
    def paths(self) -> tuple[str, ...]:
        """The path of every dropped block, placed or not (signature matches add none)."""
        placed = [r.path for r in self.replies if r.block is not None]
        return (*placed, *(r.path for r in self.rounds), *(u.path for u in self.unplaced))

    def releases(self) -> tuple[tuple[MessageId, int], ...]:
        """``(message_id, from_block)`` to release, one per reply, by the release policy.

        Prefix drops are released (they never verify again); model, organization and end-user
        drops are kept (``KEPT_REASONS``: sent again they drop again at no cost, and the
        blocks made after them keep their order). A release
        runs from its block on, so each reply gets its lowest released block.
        """
        lowest: dict[MessageId, int] = {}
        placed: list[tuple[MessageId | None, int | None, str]]
        placed = [(d.message_id, d.block, d.reason) for d in self.replies]
        placed += [(r.message_id, r.j, r.reason) for r in self.rounds]  # stored rounds too
        for message_id, block, reason in placed:
            if message_id is None or block is None or reason not in RELEASED_REASONS:
                continue
            prior = lowest.get(message_id)
            lowest[message_id] = block if prior is None else min(prior, block)
        return tuple(lowest.items())


def parse_input_transformations(
    response: object, *, quiet: bool = False
) -> tuple[ThinkingDrop, ...]:
    """The ``thinking_dropped`` entries of a response, in order.

    Args:
        response: an SDK ``BetaMessage`` (or stream event) with ``input_transformations``,
            a dict with an ``"input_transformations"`` key, a list of entries, or ``None``.
            Entries may be SDK models or dicts.
        quiet: log nothing (for a second reading of the same response).

    Returns:
        One ``ThinkingDrop`` per dropped block; ``i`` and ``j`` are ``None`` when the path is
        not ``messages.{i}.content.{j}`` with non-negative integers. Unknown entry types and
        unknown reasons are left out with a ``input_transformation_ignored`` debug event.

    Raises:
        TypeError: ``response`` is none of the shapes above (e.g. a string).
    """
    entries = _entries_of(response, quiet=quiet)
    drops: list[ThinkingDrop] = []
    for entry in entries:
        fields = _fields_of(entry)
        kind = fields.get("type")
        if kind not in KNOWN_TYPES:
            if not quiet:
                log.debug("input_transformation_ignored", why="unknown type", type=_short(kind))
            continue
        if kind != DROPPED_TYPE:
            continue
        reason = fields.get("reason")
        if not isinstance(reason, str) or reason not in KNOWN_REASONS:
            if not quiet:
                log.debug(
                    "input_transformation_ignored", why="unknown reason", reason=_short(reason)
                )
            continue
        path = _path_text(fields.get("path"))
        i, j = _parse_path(path)
        drops.append(ThinkingDrop(path=path, i=i, j=j, reason=reason))
    return tuple(drops)


def place_thinking_drops(
    drops: Iterable[ThinkingDrop],
    provenance: Sequence[ProvenanceEntry],
    rounds: Sequence[object] = (),
    *,
    find_signature: Callable[[str], Sequence[MessageId]] | None = None,
) -> PlacedDrops:
    """Place each drop on a stored reply, a stream round, or nowhere (SPEC 8).

    Args:
        drops: from ``parse_input_transformations``; a block reported twice counts once.
        provenance: ``CompileResult.provenance`` of the compile whose request was sent.
        rounds: the messages the host appended after the compiled ones (wire dicts with
            ``content``, SDK messages, or block lists), in order.
        find_signature: ``signature digest -> stored reply ids`` carrying it; every other
            reply it names is placed too, with ``block=None``. Optional.

    Returns:
        ``PlacedDrops``. Cost: O(drops) plus one ``find_signature`` call per stored placement.
    """
    replies: list[ReplyDrop] = []
    placed_rounds: list[RoundDrop] = []
    unplaced: list[UnplacedDrop] = []
    seen: set[tuple[int, int]] = set()
    round_content: dict[int, tuple[Block, ...] | None] = {}
    for drop in drops:
        i, j = drop.i, drop.j
        if i is None or j is None or i < 0 or j < 0:
            unplaced.append(UnplacedDrop(drop.path, drop.reason, WHY_MALFORMED))
            continue
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i >= len(provenance):
            k = i - len(provenance)
            if k >= len(rounds):
                unplaced.append(UnplacedDrop(drop.path, drop.reason, WHY_OUT_OF_RANGE))
                continue
            if k not in round_content:
                round_content[k] = _round_blocks(rounds[k])
            content = round_content[k]
            if content is not None and not (j < len(content) and is_thinking(content[j])):
                unplaced.append(UnplacedDrop(drop.path, drop.reason, WHY_NOT_THINKING))
                continue
            stored = rounds[k]
            message_id = stored.id if isinstance(stored, StoredMessage) else None
            placed_rounds.append(
                RoundDrop(k, j, drop.reason, drop.path, content, message_id=message_id)
            )
            continue
        source = provenance[i].single_source
        if source is None:
            unplaced.append(UnplacedDrop(drop.path, drop.reason, WHY_NO_SINGLE_SOURCE))
            continue
        signature = source.signatures.get(j)
        block = source.blocks.get(j)
        if signature is None or block is None:
            unplaced.append(UnplacedDrop(drop.path, drop.reason, WHY_NOT_THINKING))
            continue
        replies.append(ReplyDrop(source.message_id, block, drop.reason, drop.path))
        if find_signature is not None:
            for other in find_signature(signature):
                if other != source.message_id:
                    replies.append(ReplyDrop(other, None, drop.reason, drop.path))
    return PlacedDrops(tuple(replies), tuple(placed_rounds), tuple(unplaced))


def allowed_paths(response: object, kind: str = ALLOWED_TYPE) -> tuple[str, ...]:
    """The paths of a response's ``thinking_mismatch_allowed`` entries (failing blocks that
    reached the model on an unenforced account, provider rule 14), in order; with
    ``kind=DROPPED_TYPE``, those of its ``thinking_dropped`` entries."""
    return tuple(
        _path_text(fields.get("path"))
        for fields in map(_fields_of, _entries_of(response, quiet=True))
        if fields.get("type") == kind
    )


def _entries_of(response: object, *, quiet: bool = False) -> Sequence[object]:
    if response is None:
        return ()
    if isinstance(response, Mapping):
        found = response.get("input_transformations")
    elif isinstance(response, list | tuple):
        found = response
    elif isinstance(response, str | bytes):
        raise InvalidType(
            f"expected a response, a dict or a list of input_transformations, got {response!r:.80}"
        )
    else:
        found = getattr(response, "input_transformations", None)
    if found is None:
        return ()
    if not isinstance(found, list | tuple):
        if not quiet:
            log.debug("input_transformation_ignored", why="not a list", value=_short(found))
        return ()
    return found


def _fields_of(entry: object) -> Mapping[str, Any]:
    """An entry's fields: a dict as is, an SDK model (or any object) by attribute."""
    if isinstance(entry, Mapping):
        return entry
    return {name: getattr(entry, name, None) for name in ("type", "path", "reason")}


def _short(value: object) -> str:
    """A provider value fit for a log field: text cut to 80 characters."""
    return (value if isinstance(value, str) else repr(value))[:80]


def _path_text(raw: object) -> str:
    if isinstance(raw, str):
        return raw
    return "" if raw is None else _short(raw)


def _parse_path(path: str) -> tuple[int | None, int | None]:
    match = _PATH.fullmatch(path)
    if match is None:
        return None, None
    return int(match.group(1)), int(match.group(2))


def _round_blocks(message: object) -> tuple[Block, ...] | None:
    """The content of an appended round, or ``None`` when it cannot be read."""
    content = message.get("content") if isinstance(message, Mapping) else message
    if not isinstance(content, Mapping | list | tuple | str):
        inner = getattr(content, "content", None)
        content = inner if inner is not None else content
    try:
        return to_blocks(content)
    except TypeError:
        return None
