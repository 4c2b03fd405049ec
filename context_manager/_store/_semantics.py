"""The binding record's rules, once: fork inheritance (SPEC 5) and "the lower ``from_block``
wins" when releases meet. Pure functions over ``Release`` values.

``MemoryStore`` applies them directly and the compiler keeps its in-memory record with them;
the SQL stores' statements (``_sqlite_binding``, ``_postgres_binding``, ``create_branch`` in
``_sqlite`` / ``_postgres``) are these rules in SQL, and ``tests/store/test_store.py`` runs one
suite over all three so the forms cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping

from context_manager._model._messages import MessageId

from ._protocol import Release


def as_of(sequence: int | None, fork_sequence: int | None) -> bool:
    """Recorded at or before the fork point (``None`` on either side: inherited).

    >>> as_of(3, 5), as_of(6, 5), as_of(None, 5), as_of(6, None)
    (True, False, True, True)
    """
    return fork_sequence is None or sequence is None or sequence <= fork_sequence


def lowered(prior: Release | None, from_block: int) -> int:
    """The release's ``from_block`` once ``from_block`` is released too: the lower wins.

    >>> lowered(None, 3), lowered(Release("r", 2, True), 3), lowered(Release("r", 4, True), 3)
    (3, 2, 3)
    """
    return from_block if prior is None else min(prior.from_block, from_block)


def committed_release(
    prior: Release | None, message_id: MessageId, from_block: int, at_sequence: int | None
) -> Release:
    """The release a compile's commit leaves (``commit_binding``: reported at once).

    The lower ``from_block`` wins; ``at_sequence`` is this write's when it is new or lowers
    the release, else the prior one's (a later write that lowers nothing moves nothing).

    >>> committed_release(Release("r", 2, False, at_sequence=4), "r", 3, 9)
    Release(message_id='r', from_block=2, reported=True, reported_from=None, at_sequence=4)
    """
    low = lowered(prior, from_block)
    if prior is not None and low >= prior.from_block:
        return Release(message_id, low, True, at_sequence=prior.at_sequence)
    return Release(message_id, low, True, at_sequence=at_sequence)


def added_release(
    prior: Release | None, message_id: MessageId, from_block: int, at_sequence: int | None
) -> Release | None:
    """The release ``add_release`` leaves (pending: reported by the next compile), or ``None``
    when ``prior`` already releases from ``from_block`` or lower (nothing changes).

    A lower release over a reported one keeps what was reported (``reported_from``), so a
    strip never counts those blocks twice.

    >>> added_release(Release("r", 2, True), "r", 3, 9) is None
    True
    >>> added_release(Release("r", 4, True), "r", 1, 9)
    Release(message_id='r', from_block=1, reported=False, reported_from=4, at_sequence=9)
    """
    if prior is not None and prior.from_block <= from_block:
        return None
    earlier = None
    if prior is not None:
        earlier = prior.from_block if prior.reported else prior.reported_from
    return Release(message_id, from_block, False, earlier, at_sequence)


def inherited_release(
    release: Release, history: Mapping[int, int | None], fork_sequence: int | None
) -> Release | None:
    """What a branch made at ``fork_sequence`` inherits of its parent's ``release`` (SPEC 5).

    ``history``: every ``from_block`` the parent ever released the reply from, with the
    sequence it was recorded at. A release recorded by the fork point is inherited as is; one
    lowered after it is inherited as it was then (the lowest block recorded by then, reported);
    one made after it is not inherited (``None``).

    >>> late = Release("r", 1, True, at_sequence=9)
    >>> inherited_release(late, {3: 4, 1: 9}, 5)
    Release(message_id='r', from_block=3, reported=True, reported_from=None, at_sequence=4)
    >>> inherited_release(late, {1: 9}, 5) is None
    True
    """
    if as_of(release.at_sequence, fork_sequence):
        return release
    earlier = [(b, q) for b, q in history.items() if as_of(q, fork_sequence)]
    if not earlier:
        return None
    block, when = min(earlier)
    return Release(release.message_id, block, True, at_sequence=when)
