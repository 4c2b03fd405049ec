"""Aligning a framework's message list with the stored transcript: what is new, edited, cut.

Pure functions over comparison keys (``_normal``). The stored side lists the messages the
framework itself sent or was answered with, oldest first: library-owned messages (notices, head
changes, summaries, compaction blocks) are never on it, so they can never look like an edit. A
host fold the library followed earlier stands on it as the framework messages it was made from
(``virtual`` entries, before the stored ones it kept).

The plan, read oldest first:
- ``anchor``: the first framework message that matches a stored one, and that stored one. What
  the framework sends before it is its own summary (``lead``); what is stored before it is what
  the framework dropped. Either one is a host fold when the library follows the framework's
  window, and is ignored when it manages the window itself; as many messages in the same roles
  on both sides are the same messages edited.
- the matched run from the anchor on;
- then either nothing, new messages to append, edits of stored messages (same roles, pairwise)
  followed by new ones, an extension of the newest stored message, or a rewind (the framework
  no longer sends stored messages after the matched run: they stay stored on the old branch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs


@attrs.frozen
class Entry:
    """One alignable message: its role, its comparison key, and where it is stored.

    ``index`` is the position on the stored side; ``virtual`` entries stand for framework
    messages a followed host fold holds in its summary (they have no stored message).
    """

    role: str
    key: str
    virtual: bool = False


@attrs.frozen
class Plan:
    """What to do with a framework list (indices into the framework list ``f`` and the stored
    side ``s``).

    Attributes:
        fold_lead: framework messages ``f[:fold_lead]`` make the summary of a new host fold;
            ``None`` when there is no new fold.
        fold_from: the stored index the new fold keeps from (everything before is covered).
        edits: ``(s, f)`` pairs: stored message ``s`` now reads as framework message ``f``.
        extend: ``(s, f)``: framework message ``f`` is stored message ``s`` with blocks added.
        rewind_after: the stored index after which the framework sent nothing it had before
            (a new branch starts there); ``None`` when nothing is rewound.
        new_from: framework messages ``f[new_from:]`` are new: stored at the end.
        lead: framework messages before the first one that matches a stored message.
    """

    fold_lead: int | None = None
    fold_from: int = 0
    lead: int = 0
    edits: tuple[tuple[int, int], ...] = ()
    extend: tuple[int, int] | None = None
    rewind_after: int | None = None
    new_from: int = 0

    @property
    def changes_nothing(self) -> bool:
        """True when nothing is stored, edited, folded or rewound."""
        return (
            self.fold_lead is None
            and not self.edits
            and self.extend is None
            and self.rewind_after is None
        )


def anchor(framework: Sequence[Entry], stored: Sequence[Entry]) -> tuple[int, int] | None:
    """``(f, s)``: the first framework message matching a stored one, at the stored match from
    which the most messages match in a row (the same words may be stored more than once); on a
    tie, the earliest: the reading that keeps the most stored messages, so the least thinking
    is lost (a rewind keeps every reply before it; a fold loses the kept turns')."""
    at: dict[tuple[str, str], list[int]] = {}
    for index, entry in enumerate(stored):
        at.setdefault((entry.role, entry.key), []).append(index)
    for f, entry in enumerate(framework):
        found = at.get((entry.role, entry.key))
        if found:
            runs = {s: matched_run(framework, stored, f, s) for s in found}
            best = max(found, key=lambda s: (runs[s], -s))
            return f, best
    return None


def matched_run(framework: Sequence[Entry], stored: Sequence[Entry], f: int, s: int) -> int:
    """How many messages match pairwise from ``(f, s)`` on."""
    run = 0
    while (
        f + run < len(framework)
        and s + run < len(stored)
        and framework[f + run].role == stored[s + run].role
        and framework[f + run].key == stored[s + run].key
    ):
        run += 1
    return run


def plan(
    framework: Sequence[Entry],
    stored: Sequence[Entry],
    *,
    follow_window: bool,
    extends: Callable[[int, int], bool] | None = None,
) -> Plan:
    """The plan for ``framework`` against ``stored`` (see the module docstring).

    ``follow_window``: the framework's own window (messages it dropped, a summary it wrote) is
    followed as a host fold; off, the library manages the window and both are ignored.
    ``extends(s, f)``: framework message ``f`` is the newest stored message ``s`` with blocks
    appended (the caller compares blocks; keys cannot tell).
    """
    if not stored:
        return Plan(new_from=0)
    found = anchor(framework, stored)
    if found is None:  # nothing the framework sends is stored: it started over
        if follow_window:
            return Plan(fold_lead=0, fold_from=len(stored), new_from=0)
        return Plan(new_from=0)
    f, s = found
    run = matched_run(framework, stored, f, s)
    after_f, after_s = f + run, s + run
    rest = _rest(framework, stored, after_f, after_s, extends=extends)
    if f and f == s and _pairwise(framework[:f], stored[:s]):  # the same messages, reworded
        edits = tuple((k, k) for k in range(f) if framework[k].key != stored[k].key)
        return attrs.evolve(rest, edits=(*edits, *rest.edits))
    if follow_window and (f or s):
        lead, keep_from = _fold(stored, f, s, run)
        return attrs.evolve(rest, fold_lead=lead, fold_from=keep_from, lead=f)
    return attrs.evolve(rest, lead=f)


def _fold(stored: Sequence[Entry], f: int, s: int, run: int) -> tuple[int, int]:
    """``(lead, from)`` of a new host fold anchored at ``(f, s)``: the summary holds every
    framework message before the first kept stored message that is real."""
    real = next((s + k for k in range(run) if not stored[s + k].virtual), None)
    if real is None:  # the framework kept none of the stored messages
        return f + run, len(stored)
    return f + (real - s), real


def _rest(
    framework: Sequence[Entry],
    stored: Sequence[Entry],
    f: int,
    s: int,
    *,
    extends: Callable[[int, int], bool] | None,
) -> Plan:
    """What follows the matched run ending at ``(f, s)``."""
    if s == len(stored):
        return Plan(new_from=f)
    if f == len(framework):
        return Plan(rewind_after=s - 1, new_from=f)
    if extends is not None and s == len(stored) - 1 and extends(s, f):
        return Plan(extend=(s, f), new_from=f + 1)
    left = stored[s:]
    if len(framework) - f >= len(left) and _pairwise(framework[f:], left):
        edits = tuple(
            (s + k, f + k) for k in range(len(left)) if framework[f + k].key != left[k].key
        )
        return Plan(edits=edits, new_from=f + len(left))
    return Plan(rewind_after=s - 1, new_from=f)


def _pairwise(framework: Sequence[Entry], stored: Sequence[Entry]) -> bool:
    """True when the stored messages can be edited in place: same roles, none virtual."""
    return all(
        not st.virtual and fw.role == st.role for fw, st in zip(framework, stored, strict=False)
    )
