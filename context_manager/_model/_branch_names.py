"""Picking a fresh numbered branch name (``main~1``, ``cleared-2``) that other writers race for.

Invariant: ``numbered_branch`` makes exactly one branch, under the first name of the series that
is free when its creation lands. The names already seen are only a hint: when another host (or
another manager of the agent) made the chosen name meanwhile, the store refuses it with
``BranchExists`` and the next number is tried, so two writers picking at once both succeed, on
different names, and neither call fails.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TypeVar

from ._errors import BranchExists

T = TypeVar("T")

ATTEMPTS = 64
"""Names tried past the first free-looking one before the store's refusal is raised."""


def numbered_branch(
    make: Callable[[str], T], name_of: Callable[[int], str], taken: Container[str]
) -> T:
    """``make(name)`` for the first ``name_of(n)`` (``n`` from 1) not in ``taken`` whose
    creation the store accepts.

    Raises:
        BranchExists: ``ATTEMPTS`` names in a row were made by others meanwhile.
    """
    number = 1
    while name_of(number) in taken:
        number += 1
    for attempt in range(ATTEMPTS - 1):
        try:
            return make(name_of(number + attempt))
        except BranchExists:
            continue
    return make(name_of(number + ATTEMPTS - 1))
