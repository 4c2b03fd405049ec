"""Prompt-cache breakpoints: where a compiled request carries ``cache_control`` markers.

Pure functions over a finished request body. Markers never bind (provider rule 2): adding, moving
or removing one changes no thinking block's verdict, so placing them costs no reasoning. The API
accepts at most ``MAX_BREAKPOINTS`` markers per request; a host's own markers are kept, counted
first, and never moved. ``place_breakpoints`` never mutates its input: each message, block or
system list it marks is a copy (the compiler's render cache shares the rest).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from context_manager._model._log import library_logger

from ._clear_cache import ClearPoints

log = library_logger("context_manager.caching")

MAX_BREAKPOINTS = 4
"""The API's limit on ``cache_control`` markers in one request (a fifth is a 400)."""

CacheTtl: TypeAlias = Literal["5m", "1h"]
CACHE_TTLS: tuple[CacheTtl, ...] = ("5m", "1h")
"""The TTLs the API offers: five minutes (the default) and one hour."""

UNMARKABLE_TYPES = frozenset({"thinking", "redacted_thinking"})
"""Block types that cannot carry a marker (the API caches them only as part of a prefix)."""

MARKABLE_ROLES = frozenset({"user", "assistant"})
"""Message roles whose blocks carry markers; a mid-conversation ``system`` message is left
unmarked (no source says it may carry one: the conservative reading)."""


@attrs.frozen
class Caching:
    """How the compiler asks the API to cache each request's prefix (on by default).

    With ``enabled`` the compiler places up to four breakpoints, in this order of priority:
    the newest message of the request (so the next call reads all of it), the newest message
    of the previous call's request (the message just before the newest reply: an exact read of
    what that call wrote, however many blocks were added since), the end of the head
    (``system``, or the last tool: tools and system are read even after the messages change)
    and the end of the window's first message (the anchored start after a jump, or a fold's
    summary). A host's own markers count first
    and are kept.

    Attributes:
        enabled: place breakpoints; ``False`` sends only the host's own markers.
        ttl: ``"5m"`` (the default: a write costs 1.25x base input and each read refreshes
            it) or ``"1h"`` (a write costs 2x; for an agent idle more than five minutes between
            calls). A marker is never given a longer TTL than a marker before it (the API
            refuses a ``"1h"`` entry after a ``"5m"`` one).
        diagnostics: ask the provider where each request's prefix diverged from the previous
            one (cache diagnostics, ``_diagnostics``): every request carries
            ``diagnostics.previous_message_id`` (the branch's previous reply's response id, or
            ``null`` on a first request), each reply records the verdict, and a divergence the
            compiler did not expect is a ``cache_prefix_unexpected`` warning. Off by default.
    """

    enabled: bool = True
    ttl: CacheTtl = attrs.field(default="5m", validator=attrs.validators.in_(CACHE_TTLS))
    diagnostics: bool = attrs.field(default=False, kw_only=True)


def previous_request_end(messages: Sequence[Any]) -> int | None:
    """Index of the previous call's newest message: the message just before the newest reply.

    The newest stored reply answered a request that ended with the message rendered right before
    it, so this is a pure function of what is stored (a reopened store places the same
    breakpoints, SPEC 7). ``None`` when no reply is rendered after a first message.

    >>> previous_request_end([{"role": "user"}, {"role": "assistant"}, {"role": "user"}])
    0
    >>> previous_request_end([{"role": "user"}]) is None
    True
    """
    for i in range(len(messages) - 1, 0, -1):
        message = messages[i]
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            return i - 1
    return None


def marker(ttl: CacheTtl) -> dict[str, str]:
    """The ``cache_control`` value for ``ttl`` (``"5m"`` is the API's default, so it is implied).

    >>> marker("1h")
    {'type': 'ephemeral', 'ttl': '1h'}
    """
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


Position: TypeAlias = tuple[str, int, int]
"""Where a marker sits: ``("tools", k, 0)``, ``("system", j, 0)`` or ``("messages", i, j)``;
tuples order as the API reads the request (tools, then system, then messages)."""

_SECTION_ORDER = {"tools": 0, "system": 1, "messages": 2}


def _order(position: Position) -> tuple[int, int, int]:
    return _SECTION_ORDER[position[0]], position[1], position[2]


def _ttl_of(value: Any) -> CacheTtl:
    return "1h" if isinstance(value, Mapping) and value.get("ttl") == "1h" else "5m"


def _blocks(content: Any) -> list[Any]:
    return content if isinstance(content, list) else []


def host_markers(body: Mapping[str, Any]) -> list[tuple[Position, CacheTtl]]:
    """Every ``cache_control`` marker already in ``body``, in request order, with its TTL.

    Markers inside a ``tool_result``'s content count at their result's position. A top-level
    ``cache_control`` (the API's automatic caching, which marks the last block) counts as one,
    at the end.

    Cost: O(tools + system blocks + messages not seen by this thread's previous call). The
    compiler's rendered messages only ever grow at the end (a merge replaces the last), so the
    scan of a prefix already seen is reused (``_MessageScan``); the result never depends on it.
    """
    found: list[tuple[Position, CacheTtl]] = []
    for k, tool in enumerate(_blocks(body.get("tools"))):
        if isinstance(tool, Mapping) and "cache_control" in tool:
            found.append((("tools", k, 0), _ttl_of(tool["cache_control"])))
    for j, block in enumerate(_blocks(body.get("system"))):
        if isinstance(block, Mapping) and "cache_control" in block:
            found.append((("system", j, 0), _ttl_of(block["cache_control"])))
    found += _MessageScan.markers(_blocks(body.get("messages")))
    if "cache_control" in body:
        found.append((("messages", 1 << 30, 0), _ttl_of(body["cache_control"])))
    return found


def _unmarked(message: Any) -> bool:
    """True when ``message`` certainly holds no marker (the common case, asked of every
    message a scan meets): a dict whose content is a list of dicts, none with a
    ``cache_control`` and none a ``tool_result`` with a list of content."""
    content = message.get("content") if type(message) is dict else None
    if type(content) is not list:
        return False
    for block in content:
        if type(block) is not dict or "cache_control" in block:
            return False
        if block.get("type") == "tool_result" and type(block.get("content")) is list:
            return False
    return True


def _message_markers(i: int, message: Any) -> list[tuple[Position, CacheTtl]]:
    found: list[tuple[Position, CacheTtl]] = []
    content = (
        message.get("content") if type(message) is dict or isinstance(message, Mapping) else None
    )
    if type(content) is not list:
        return found
    for j, block in enumerate(content):
        if type(block) is not dict and not isinstance(block, Mapping):  # dict: no ABC check
            continue
        if "cache_control" in block:
            found.append((("messages", i, j), _ttl_of(block["cache_control"])))
        if block.get("type") == "tool_result":
            for item in _blocks(block.get("content")):
                if isinstance(item, Mapping) and "cache_control" in item:
                    found.append((("messages", i, j), _ttl_of(item["cache_control"])))
    return found


SCAN_MEMO_LIMIT = 256
"""Message lists (one per rendered branch) whose scan a thread remembers before starting over."""


@attrs.frozen
class _MessageScan:
    """The markers found in ``messages[:upto]`` of a list whose first and ``upto - 1``-th
    messages were ``first`` and ``last`` (held, so their ids stay theirs)."""

    first: Any
    last: Any
    upto: int
    found: tuple[tuple[Position, CacheTtl], ...]

    _local: ClassVar[threading.local] = threading.local()

    @classmethod
    def markers(cls, messages: Sequence[Any]) -> list[tuple[Position, CacheTtl]]:
        """Markers in ``messages``, reusing this thread's previous scan of a list that held the
        same objects at its start and at the end of what was scanned (message dicts are never
        modified in place, and a render only appends or replaces its last message). One scan
        is remembered per first message, so managers compiling in turn each keep theirs."""
        scans: dict[int, _MessageScan] | None = getattr(cls._local, "scans", None)
        if scans is None:
            scans = cls._local.scans = {}
        memo = scans.get(id(messages[0])) if messages else None
        start, found = 0, []
        if (
            memo is not None
            and 0 < memo.upto <= len(messages)
            and messages[0] is memo.first
            and messages[memo.upto - 1] is memo.last
        ):
            start, found = memo.upto, list(memo.found)
        for i in range(start, len(messages)):
            message = messages[i]
            if not _unmarked(message):
                found += _message_markers(i, message)
        if len(messages) > 1:
            # The last message is rescanned next time (a merge may replace it).
            if len(scans) >= SCAN_MEMO_LIMIT:
                scans.clear()
            kept = tuple(m for m in found if m[0][1] < len(messages) - 1)
            scans[id(messages[0])] = _MessageScan(
                messages[0], messages[-2], len(messages) - 1, kept
            )
        return found


def scan_before_last(messages: Sequence[Any]) -> list[tuple[Position, CacheTtl]]:
    """The markers in every message of ``messages`` but the last (what ``remember_scan`` takes
    back): a list about to be kept compact carries them, so its restore needs no scan."""
    return [m for m in _MessageScan.markers(messages) if m[0][1] < len(messages) - 1]


def remember_scan(messages: Sequence[Any], found: Sequence[tuple[Position, CacheTtl]]) -> None:
    """Take ``found`` as the markers in ``messages[:-1]`` (``scan_before_last`` of an equal
    list), so the next ``host_markers`` of a request starting with ``messages`` scans only what
    follows them. Nothing is remembered for fewer than two messages, as a scan remembers."""
    if len(messages) < 2:
        return
    scans: dict[int, _MessageScan] | None = getattr(_MessageScan._local, "scans", None)
    if scans is None:
        scans = _MessageScan._local.scans = {}
    if len(scans) >= SCAN_MEMO_LIMIT:
        scans.clear()
    scans[id(messages[0])] = _MessageScan(
        messages[0], messages[-2], len(messages) - 1, tuple(found)
    )


def _message_position(messages: Sequence[Any], index: int) -> Position | None:
    """The last markable block of message ``index``, or of the nearest markable one before it."""
    for i in range(min(index, len(messages) - 1), -1, -1):
        message = messages[i]
        if not isinstance(message, Mapping) or message.get("role") not in MARKABLE_ROLES:
            continue
        content = message.get("content")
        if isinstance(content, str):
            if content.strip():
                return ("messages", i, 0)
            continue
        blocks = _blocks(content)
        for j in range(len(blocks) - 1, -1, -1):
            block = blocks[j]
            if isinstance(block, Mapping) and block.get("type") not in UNMARKABLE_TYPES:
                return ("messages", i, j)
    return None


def _head_position(body: Mapping[str, Any]) -> Position | None:
    system = body.get("system")
    if isinstance(system, str) and system.strip():
        return ("system", 0, 0)
    if isinstance(system, list) and system:
        return ("system", len(system) - 1, 0)
    tools = _blocks(body.get("tools"))
    return ("tools", len(tools) - 1, 0) if tools else None


def place_breakpoints(
    body: Mapping[str, Any],
    caching: Caching,
    *,
    stable_end: int | None = 0,
    clear: ClearPoints | None = None,
) -> dict[str, Any]:
    """``body`` with the compiler's cache breakpoints placed (see ``Caching`` for where).

    Args:
        body: a finished request body (``messages``, optional ``system`` and ``tools``).
        caching: the configuration; ``enabled=False`` returns a copy of ``body`` unchanged.
        stable_end: index of the message that ends the window's stable opening (default the
            first message: the anchored start after a jump, or a fold's summary), or ``None``.
        clear: where the server's context editing clears (``_clear_cache.clear_points``):
            its points go right after the newest message's (and before the head's), and a
            stale previous-request breakpoint is left out.

    Returns:
        A new body; what it shares with ``body`` is never modified. At most
        ``MAX_BREAKPOINTS`` markers in all, the host's own first; when the host's alone exceed
        the limit nothing is added (and a ``cache_breakpoints_over_limit`` warning is logged:
        the API will refuse the request).

    Cost: O(markers already present + messages scanned back from each candidate).
    """
    out = dict(body)
    if not caching.enabled:
        return out
    hosts = host_markers(body)
    free = MAX_BREAKPOINTS - len(hosts)
    if free < 0:
        log.warning("cache_breakpoints_over_limit", markers=len(hosts), limit=MAX_BREAKPOINTS)
    if free <= 0:
        return out
    messages = _blocks(body.get("messages"))
    taken = {position for position, _ in hosts}
    previous = previous_request_end(messages)
    wanted: list[Position] = []
    if clear is not None and clear.previous_stale:
        previous = None
    candidates = [
        _message_position(messages, len(messages) - 1) if messages else None,
        _message_position(messages, previous) if previous is not None else None,
        *(clear.points if clear is not None else ()),
        _head_position(body),
        _message_position(messages, stable_end) if stable_end is not None else None,
    ]
    for position in candidates:
        if position is None or position in taken or position in wanted:
            continue
        if len(wanted) == free:
            break
        wanted.append(position)
    copied: set[str] = set()
    for position, ttl in _ttls(wanted, hosts, caching.ttl):
        _mark(out, position, marker(ttl), copied)
    return out


def _ttls(
    wanted: Sequence[Position], hosts: Sequence[tuple[Position, CacheTtl]], ttl: CacheTtl
) -> list[tuple[Position, CacheTtl]]:
    """Each new marker's TTL: ``ttl``, raised to ``"1h"`` when a host's ``"1h"`` marker comes
    later, and ``"5m"`` once any marker before it is ``"5m"`` (the API refuses a ``"1h"`` entry
    after a ``"5m"`` one)."""
    events = sorted(
        [(position, host_ttl, True) for position, host_ttl in hosts]
        + [(position, ttl, False) for position in wanted],
        key=lambda event: _order(event[0]),
    )
    out: list[tuple[Position, CacheTtl]] = []
    short_seen = False
    for position, given, is_host in events:
        chosen = given
        if not is_host:
            if any(h == "1h" and _order(p) > _order(position) for p, h in hosts):
                chosen = "1h"
            if short_seen:
                chosen = "5m"
            out.append((position, chosen))
        short_seen = short_seen or chosen == "5m"
    return out


def _mark(
    body: dict[str, Any], position: Position, value: dict[str, str], copied: set[str]
) -> None:
    """Mark ``position`` in ``body``, copying each container on the way once (``copied``)."""
    section, index, inner = position
    if section not in copied and isinstance(body.get(section), list | tuple):
        body[section] = list(body[section])
        copied.add(section)
    if section == "tools":
        tools = body["tools"]
        tools[index] = {**tools[index], "cache_control": value}
    elif section == "system":
        system = body["system"]
        if isinstance(system, str):
            body["system"] = [{"type": "text", "text": system, "cache_control": value}]
        else:
            system[index] = {**system[index], "cache_control": value}
    else:
        messages = body["messages"]
        message = messages[index]
        content = message["content"]
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content, "cache_control": value}]
        else:
            blocks = list(content)
            blocks[inner] = {**blocks[inner], "cache_control": value}
        messages[index] = {**message, "content": blocks}
