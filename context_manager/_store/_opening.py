"""Which branch an agent opens on: its current one, else ``main``, made when the agent is new.

Invariant: opening never fails because another host (or another manager of the agent) opened
the same new agent at the same moment: the ``main`` the store refuses to make twice is the one
both go on. The agent's current-branch name is set to the branch returned.
"""

from __future__ import annotations

from context_manager._model._errors import BranchExists

from ._protocol import BranchRecord, Store

MAIN_BRANCH = "main"
"""The branch a new namespace starts on."""


def opening_branch(store: Store, namespace: str) -> BranchRecord:
    """The agent's current branch, else its ``main``, else its oldest live branch, else a new
    ``main``; recorded as current."""
    name = store.current_branch_name(namespace)
    live = {b.ref.name: b for b in store.branches(namespace)}
    if name in live:
        return live[name]
    if MAIN_BRANCH in live:
        record = live[MAIN_BRANCH]
    elif live:
        record = next(iter(live.values()))
    else:
        try:
            record = store.create_branch(namespace, MAIN_BRANCH)
        except BranchExists:  # made by another host since ``branches`` was read
            record = next(b for b in store.branches(namespace) if b.ref.name == MAIN_BRANCH)
    store.set_current_branch(namespace, record.ref.name)
    return record
