"""Render snapshots: a branch's compact render kept in the store beside its transcript.

A compile whose render was dropped (the per-process bound) or a restarted host's first compile
restores the snapshot instead of rendering the window from the stored messages again, then goes
on from it as from a kept render (new messages rendered, everything else checked as usual).

Invariants:

- A snapshot is used only when everything its render depended on is as it was when it was
  written, all named in its header and compared for equality: this library's code (a digest of
  its source), the branch and its lineage, the agent's change serial (edits) and binding serial
  (releases, reports, anchors, from any host), and the render's cache key (the bound head
  digests, the binding, the strategy, the budget). A value that cannot be named the same way in
  another process (a function defined inside another, an object without a stable ``repr``) makes
  its snapshot usable only by the process that wrote it. Any other doubt: render from the store.
- A snapshot's bytes hold built-in values only; reading them refuses every class, so bytes
  written by anyone else can make no object and run no code.
- Pure functions; the compiler decides when to save and to load.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Collection
from typing import Any

import attrs
from attrs import AttrsInstance

from context_manager._model._process import PROCESS
from context_manager._store._protocol import Lineage

from ._code_digest import PACKAGE
from ._code_digest import code_digest as source_digest
from ._compact import CompactRender
from ._render import RenderState

FORMAT = 3
"""Bumped whenever what a snapshot's bytes hold changes shape."""

_PACKAGE = PACKAGE
"""The ``context_manager`` package whose source the code digest covers."""


def set_render_snapshots(enabled: bool) -> None:
    """Save and restore render snapshots in this process (the default), or neither.

    With them, a compile after a branch's cached render was dropped, and a restarted host's
    first compile, restore the branch's render from the store when nothing it depended on has
    changed; a render from the stored messages saves one, into the compiling manager's own
    store (compacting an idle branch's render writes nothing). Without them every such compile
    renders from the stored messages.
    """
    PROCESS.snapshots.enabled = bool(enabled)


def enabled() -> bool:
    """Whether render snapshots are on in this process."""
    return PROCESS.snapshots.enabled


def code_digest() -> str | None:
    """A digest of this library's Python source (``None``: it cannot be read, so no snapshot).

    Read once per process (``_code_digest``: from its cache beside the bytecode when every
    file is as it was); a snapshot written by other code (another release, a local change)
    never matches.
    """
    digest_once = PROCESS.snapshots.digest
    if not digest_once:
        digest_once.append(source_digest(_PACKAGE))
    return digest_once[0]


def stable_name(value: object) -> str:
    """A name for ``value`` that another process running the same code gives it too, where
    possible: a module-level function or class by its qualified name; anything else by its
    ``repr`` (an object's address in it keeps the name to this process)."""
    target = inspect.unwrap(value) if callable(value) else value  # functools wrappers, lru_cache
    if (inspect.isfunction(target) or inspect.isclass(target)) and "<" not in target.__qualname__:
        return f"{target.__module__}.{target.__qualname__}"
    return repr(value)


def cache_key_name(key: AttrsInstance) -> str:
    """The compiler's render cache key (an attrs instance) as one comparable string."""
    return json.dumps([stable_name(v) for v in attrs.astuple(key, recurse=False)])


def same_key_name(found: object, wanted: str, masked: Collection[int]) -> bool:
    """Whether a saved cache key name is ``wanted`` (``cache_key_name``), the fields at the
    ``masked`` positions aside."""
    if not masked or found == wanted:
        return found == wanted
    try:
        ours, theirs = json.loads(wanted), json.loads(found) if isinstance(found, str) else None
    except ValueError:
        return False
    if not isinstance(theirs, list) or len(theirs) != len(ours):
        return False
    return all(a == b for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if i not in masked)


def header(
    *,
    branch: str,
    lineage: Lineage,
    binding_serial: int,
    cache_key: str,
    compact: CompactRender,
    code: str,
) -> str:
    """The header saved with ``compact``: everything a later compile compares before using it."""
    return json.dumps(
        {
            "format": FORMAT,
            "code": code,
            "branch": branch,
            "lineage": [list(segment) for segment in lineage],
            "change_serial": compact.change_serial,
            "binding_serial": binding_serial,
            "cache_key": cache_key,
            "last_sequence": compact.last_sequence,
            "raw_size": compact.raw_size,
            "fields": list(attrs.fields_dict(RenderState)),
        },
        sort_keys=True,
    )


def usable(
    saved: str,
    blob: bytes,
    *,
    branch: str,
    lineage: Lineage,
    change_serial: int,
    binding_serial: int,
    cache_key: str,
    code: str,
    masked: Collection[int] = (),
) -> CompactRender | None:
    """The compact render a saved snapshot holds, when its header matches all of this exactly
    (its cache key but for the fields at the ``masked`` positions, ``same_key_name``)."""
    try:
        found = json.loads(saved)
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    expected: dict[str, Any] = {
        "format": FORMAT,
        "code": code,
        "branch": branch,
        "lineage": [list(segment) for segment in lineage],
        "change_serial": change_serial,
        "binding_serial": binding_serial,
        "fields": list(attrs.fields_dict(RenderState)),
    }
    if any(found.get(name) != value for name, value in expected.items()):
        return None
    if not same_key_name(found.get("cache_key"), cache_key, masked):
        return None
    last, size = found.get("last_sequence"), found.get("raw_size")
    if type(last) is not int or type(size) is not int:
        return None
    return CompactRender(bytes(blob), change_serial, last, size)
