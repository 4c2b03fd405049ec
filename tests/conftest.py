"""Shared fixtures: one behavioural suite runs against every store, and global state is reset.

``store`` is parametrized over ``MemoryStore`` and ``SQLiteStore`` (a file in ``tmp_path``, closed
at teardown), so a test written once proves both stores behave the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from context_manager import MemoryStore, SQLiteStore, Store


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    """Every test starts and ends with structlog's default configuration."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store lives (the file does not exist yet)."""
    return tmp_path / "agent.db"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, sqlite_path: Path) -> Iterator[Store]:
    """A fresh, empty store of each kind."""
    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(sqlite_path)
    try:
        yield made
    finally:
        made.close()


# Hypothesis profiles (reliability, issue 9). Registered here, before the plugin reads
# ``--hypothesis-profile``. ``ci`` sizes the model-based test in CI (tests/test_model_based.py
# uses it unless a bigger profile is loaded); ``long`` runs thousands of examples locally and
# raises every other property test's examples with it.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile(
    "ci", max_examples=300, stateful_step_count=10, deadline=None
)
_hypothesis_settings.register_profile(
    "long", max_examples=3000, stateful_step_count=25, deadline=None
)
