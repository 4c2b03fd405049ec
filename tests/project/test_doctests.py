"""The examples in the library's docstrings run and hold (they document the tables and rules)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import context_manager
import notices


def _modules() -> list[str]:
    names: list[str] = []
    for package in (context_manager, notices):
        prefix = package.__name__ + "."
        for info in pkgutil.walk_packages(package.__path__, prefix):
            if not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_every_docstring_example_in_the_module_holds(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_the_docstring_examples_are_found() -> None:
    """The documented tables carry examples (a walk that found none would pass vacuously)."""
    found = sum(
        doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS).attempted
        for name in _modules()
    )
    assert found >= 40
