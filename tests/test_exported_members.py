"""The public surface: each package's ``__all__`` is exactly its public names, sorted."""

from __future__ import annotations

import inspect
import re
from types import ModuleType

import pytest

import context_manager
import notices

_FUTURE_FEATURE = type(annotations)
"""``from __future__ import annotations`` leaves a feature flag named ``annotations`` behind."""


def public_names(package: ModuleType) -> set[str]:
    """What a user can import from ``package``: not private, not a module, not a __future__ flag."""
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and not isinstance(value, _FUTURE_FEATURE)
    }


def isort_key(name: str) -> tuple[int, list[int | str]]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, Classes, functions; natural sort."""
    if len(name) > 1 and name.upper() == name and name.lower() != name:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    return group, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@pytest.mark.parametrize("package", [context_manager, notices], ids=lambda p: p.__name__)
def test_all_lists_exactly_the_public_names(package: ModuleType) -> None:
    """Every public name is in ``__all__`` and every ``__all__`` entry is defined, once."""
    exported = list(package.__all__)
    assert public_names(package) == set(exported)
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("package", [context_manager, notices], ids=lambda p: p.__name__)
def test_all_is_sorted(package: ModuleType) -> None:
    """``__all__`` is sorted: constants, then classes, then functions, each alphabetically."""
    exported = list(package.__all__)
    assert sorted(exported, key=isort_key) == exported
