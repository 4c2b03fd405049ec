"""The branch, message-write and binding-record statements, written once for both SQL stores
and rendered per dialect.

Each statement is a template with named parameters (``{ns}``, ``{branch}``, ...); the only
per-dialect part is how a parameter is written (``:ns`` for ``sqlite3``, ``%(ns)s`` for
psycopg), so ``SQLITE`` and ``POSTGRES`` are the same statements. Everything else is the SQL
both servers read alike: ``TRUE``, ``CAST(... AS BIGINT)`` (PostgreSQL cannot type a bare
``NULL`` parameter), the table-qualified ``ON CONFLICT ... DO UPDATE``. They are
``_semantics`` in SQL: fork inheritance (SPEC 5, ``inherited_release``) and "the lower
``from_block`` wins" (``committed_release``, ``added_release``); ``tests/store/test_store.py`` runs
one suite over the three stores so the forms cannot drift apart.

Pure: renders text once at import; runs nothing. Every value goes in as a parameter, never into
the text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_manager._model._messages import MessageId
from context_manager._model._stamps import AnyStamp, stamp_to_json

from ._protocol import AnchoredHead, left_out_since
from ._rows import RELEASE_COLUMNS

_FORK = "CAST({fork} AS BIGINT)"
"""The fork sequence as a typed parameter (``NULL``: the parent's end)."""

_AS_OF_FORK = f"({_FORK} IS NULL OR at_seq IS NULL OR at_seq <= {_FORK})"
"""``_semantics.as_of``: recorded at or before the fork point."""

_FORK_RELEASES = (
    "INSERT INTO releases (ns, branch, message_id, from_block, reported, reported_from, at_seq) "
    "SELECT ns, {key}, message_id, from_block, reported, reported_from, at_seq FROM releases "
    f"WHERE ns = {{ns}} AND branch = {{parent}} AND {_AS_OF_FORK}"
)
"""The parent's releases recorded by the fork point, inherited as they are."""

_FORK_LOWERED = (
    "INSERT INTO releases (ns, branch, message_id, from_block, reported, reported_from, at_seq) "
    "SELECT h.ns, {key}, h.message_id, h.from_block, TRUE, NULL, h.at_seq "
    "FROM release_history h JOIN releases r ON r.ns = h.ns AND r.branch = h.branch "
    "AND r.message_id = h.message_id "
    f"WHERE h.ns = {{ns}} AND h.branch = {{parent}} AND {_FORK} IS NOT NULL "
    f"AND r.at_seq > {_FORK} AND (h.at_seq IS NULL OR h.at_seq <= {_FORK}) "
    "AND NOT EXISTS (SELECT 1 FROM release_history l WHERE l.ns = h.ns "
    "AND l.branch = h.branch AND l.message_id = h.message_id AND l.from_block < h.from_block "
    f"AND (l.at_seq IS NULL OR l.at_seq <= {_FORK}))"
)
"""A release lowered after the fork point: the lowest block recorded by then, reported."""

_FORK_HISTORY = (
    "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
    "SELECT ns, {key}, message_id, from_block, at_seq FROM release_history "
    f"WHERE ns = {{ns}} AND branch = {{parent}} AND {_AS_OF_FORK}"
)

_FORK_LEFT_OUT = (
    "INSERT INTO left_out (ns, branch, message_id, block, at_seq) "
    "SELECT ns, {key}, message_id, block, at_seq FROM left_out "
    f"WHERE ns = {{ns}} AND branch = {{parent}} AND {_AS_OF_FORK}"
)

_FORK_HEADS = (
    "INSERT INTO anchored_heads (ns, branch, at_seq, head) "
    "SELECT ns, {key}, at_seq, head FROM anchored_heads "
    f"WHERE ns = {{ns}} AND branch = {{parent}} AND ({_FORK} IS NULL OR at_seq <= {_FORK})"
)

_LOWERS = "excluded.from_block < releases.from_block"

_FORK_INHERITANCE = (_FORK_RELEASES, _FORK_LOWERED, _FORK_HISTORY, _FORK_LEFT_OUT, _FORK_HEADS)

_TEMPLATES: dict[str, str] = {
    "branch_taken": (
        "SELECT 1 FROM branches WHERE ns = {ns} AND name = {name} AND deleted = FALSE"
    ),
    "branch_id_exists": "SELECT 1 FROM branches WHERE ns = {ns} AND id = {id}",
    "message_insert": (
        "INSERT INTO messages (seq, id, ns, branch, role, content, meta, kind, created_at, stamp) "
        "VALUES ({seq}, {id}, {ns}, {branch}, {role}, {content}, {meta}, {kind}, {created_at}, "
        "{stamp})"
    ),
    "signature_insert": (
        "INSERT INTO signatures (ns, sig, message_id) VALUES ({ns}, {sig}, {message_id})"
    ),
    "branch_insert": (
        "INSERT INTO branches (id, ns, name, created, parent, fork_sequence) "
        "VALUES ({id}, {ns}, {name}, {created}, {parent}, {fork})"
    ),
    "bump_binding": (
        "INSERT INTO binding_serials (ns, serial) VALUES ({ns}, 1) "
        "ON CONFLICT (ns) DO UPDATE SET serial = binding_serials.serial + 1"
    ),
    "anchored_head": (
        "INSERT INTO anchored_heads (ns, branch, at_seq, head) "
        "VALUES ({ns}, {branch}, {at_seq}, {head}) "
        "ON CONFLICT (ns, branch, at_seq) DO UPDATE SET head = excluded.head"
    ),
    "left_out_since": (
        "SELECT message_id, block, at_seq FROM left_out WHERE ns = {ns} AND branch = {branch}"
    ),
    "left_out_clear": "DELETE FROM left_out WHERE ns = {ns} AND branch = {branch}",
    "left_out_add": (
        "INSERT INTO left_out (ns, branch, message_id, block, at_seq) "
        "VALUES ({ns}, {branch}, {message_id}, {block}, {at_seq})"
    ),
    "branch_state": (
        "INSERT INTO branch_state (ns, branch, first_compiled, anchor) "
        "VALUES ({ns}, {branch}, {first_compiled}, {anchor}) "
        "ON CONFLICT (ns, branch) DO UPDATE SET "
        "first_compiled = (branch_state.first_compiled OR excluded.first_compiled), "
        "anchor = coalesce(excluded.anchor, branch_state.anchor)"
    ),
    "committed_release": (
        "INSERT INTO releases (ns, branch, message_id, from_block, reported, at_seq) "
        "VALUES ({ns}, {branch}, {message_id}, {from_block}, TRUE, {at_seq}) "
        "ON CONFLICT (ns, branch, message_id) DO UPDATE SET "
        f"at_seq = CASE WHEN {_LOWERS} THEN excluded.at_seq ELSE releases.at_seq END, "
        f"from_block = CASE WHEN {_LOWERS} THEN excluded.from_block "
        "ELSE releases.from_block END, "
        "reported = excluded.reported"
    ),
    "added_release": (
        "INSERT INTO releases (ns, branch, message_id, from_block, reported, at_seq) "
        "VALUES ({ns}, {branch}, {message_id}, {from_block}, FALSE, {at_seq}) "
        "ON CONFLICT (ns, branch, message_id) DO UPDATE SET "
        "at_seq = excluded.at_seq, "
        "reported_from = CASE WHEN releases.reported THEN releases.from_block "
        "ELSE releases.reported_from END, "
        "from_block = excluded.from_block, reported = excluded.reported "
        f"WHERE {_LOWERS}"
    ),
    "release_history": (
        "INSERT INTO release_history (ns, branch, message_id, from_block, at_seq) "
        "VALUES ({ns}, {branch}, {message_id}, {from_block}, {at_seq}) ON CONFLICT DO NOTHING"
    ),
    "releases_of": (
        f"SELECT {RELEASE_COLUMNS} FROM releases WHERE ns = {{ns}} AND branch = {{branch}}"
    ),
    "branch_state_of": (
        "SELECT first_compiled, anchor FROM branch_state WHERE ns = {ns} AND branch = {branch}"
    ),
    "left_out_of": "SELECT message_id, block FROM left_out WHERE ns = {ns} AND branch = {branch}",
    "anchored_head_of": (
        "SELECT at_seq, head FROM anchored_heads WHERE ns = {ns} AND branch = {branch} "
        "ORDER BY at_seq DESC LIMIT 1"
    ),
}


@attrs.frozen
class Statements:
    """The statements in one dialect. Each takes a mapping of its named parameters (an
    ``executemany`` a sequence of them).

    Attributes:
        fork: ``create_branch``'s inheritance (SPEC 5), in order: the releases as of the fork
            point, those lowered after it as they were then, the release history, the left-out
            set and the anchored heads. Parameters ``key`` (the new branch), ``ns``, ``parent``,
            ``fork`` (``None``: the parent's end).
        branch_taken: a live branch ``name`` exists; ``branch_insert``: the branch's row.
        branch_id_exists: the branch ``id`` exists (``append``'s check); ``message_insert`` and
            ``signature_insert``: ``append``'s rows.
        bump_binding: one more binding-record write of ``ns`` (``Store.serials``).
        committed_release: ``_semantics.committed_release``: the lower ``from_block`` wins and
            ``at_seq`` moves only when it lowers; reported.
        added_release: ``_semantics.added_release``: only a lower ``from_block`` changes
            anything, and what was reported is kept in ``reported_from``; pending.
        release_history: every block a release started at, once, with its sequence.
    """

    fork: tuple[str, ...]
    branch_taken: str
    branch_insert: str
    branch_id_exists: str
    message_insert: str
    signature_insert: str
    bump_binding: str
    anchored_head: str
    left_out_since: str
    left_out_clear: str
    left_out_add: str
    branch_state: str
    committed_release: str
    added_release: str
    release_history: str
    releases_of: str
    branch_state_of: str
    left_out_of: str
    anchored_head_of: str


class _Placeholders(dict[str, str]):
    """``{name}`` -> the dialect's way of writing parameter ``name``."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.style = style

    def __missing__(self, name: str) -> str:
        return self.style.format(name)


def render(template: str, style: str) -> str:
    """``template`` with each ``{name}`` written in ``style`` (``":{}"`` or ``"%({})s"``).

    >>> render("SELECT 1 WHERE ns = {ns}", "%({})s")
    'SELECT 1 WHERE ns = %(ns)s'
    """
    return template.format_map(_Placeholders(style))


def statements(style: str) -> Statements:
    """Every template rendered with parameters written in ``style``."""
    fork = tuple(render(t, style) for t in _FORK_INHERITANCE)
    return Statements(fork, **{name: render(t, style) for name, t in _TEMPLATES.items()})


def release_rows(
    at: Mapping[str, Any], releases: Sequence[tuple[MessageId, int]], at_sequence: int | None
) -> list[dict[str, Any]]:
    """The parameters of ``committed_release`` / ``added_release`` / ``release_history``, one
    mapping per ``(reply, from_block)``, on the branch ``at`` (``ns``, ``branch``)."""
    return [
        {**at, "message_id": mid, "from_block": int(block), "at_seq": at_sequence}
        for mid, block in releases
    ]


def left_out_rows(
    at: Mapping[str, Any],
    left_out: Sequence[tuple[MessageId, int]],
    since: dict[tuple[MessageId, int], Any],
    at_sequence: int | None,
) -> list[dict[str, Any]]:
    """``left_out_add``'s parameters: each block with the sequence it was first left out at
    (``_protocol.left_out_since``: kept from ``since``, the rows before this commit)."""
    return [
        {
            **at,
            "message_id": mid,
            "block": int(block),
            "at_seq": left_out_since(since, mid, block, at_sequence),
        }
        for mid, block in left_out
    ]


def message_row(
    namespace: str,
    branch: str,
    sequence: int,
    role: str,
    encoded: tuple[str, str],
    kind: str | None,
    created_at: object,
    stamp: AnyStamp | None,
) -> dict[str, Any]:
    """``message_insert``'s parameters: the message ``msg_<sequence>``, its ``encoded``
    content and metadata, and its stamp as JSON (``stamp_to_json``)."""
    content, meta = encoded
    return {
        "seq": sequence,
        "id": f"msg_{sequence}",
        "ns": namespace,
        "branch": branch,
        "role": role,
        "content": content,
        "meta": meta,
        "kind": kind,
        "created_at": created_at,
        "stamp": None if stamp is None else stamp_to_json(stamp),
    }


def anchored_head_row(head: AnchoredHead) -> dict[str, Any]:
    """``anchored_head``'s parameters besides the branch."""
    return {"at_seq": head.at_sequence, "head": head.to_json()}


SQLITE = statements(":{}")
"""For ``sqlite3`` (named parameters ``:name``)."""

POSTGRES = statements("%({})s")
"""For psycopg (named parameters ``%(name)s``)."""
