"""Shared fixtures: one behavioural suite runs against every store, and global state is reset.

``store`` is parametrized over ``MemoryStore``, ``SQLiteStore`` (a file in ``tmp_path``) and
``PostgresStore`` (a fresh schema on one throwaway server per session), each closed at teardown,
so a test written once proves every store behaves the same. The PostgreSQL server is the one
``CONTEXT_MANAGER_POSTGRES_DSN`` names, or one started here (``tests/postgres_server.py``); its
tests are skipped, with the reason, only when neither works and
``CONTEXT_MANAGER_REQUIRE_POSTGRES`` is unset.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from helpers import snapshots_off
from postgres_server import Server, drop_schema, fresh_schema
from postgres_server import start as start_postgres

from context_manager import MemoryStore, PostgresStore, SQLiteStore, Store

STORES = ["memory", "sqlite", "postgres"]


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """One PostgreSQL server for the session: the given DSN's, or a throwaway one started here."""
    given = os.environ.get("CONTEXT_MANAGER_POSTGRES_DSN")
    if given:
        data = os.environ.get("CONTEXT_MANAGER_POSTGRES_DATA")
        yield Server(dsn=given, data=Path(data) if data else None)
        return
    yield from _throwaway_server("context-manager-pg-")


@pytest.fixture
def private_postgres() -> Iterator[Server]:
    """A PostgreSQL server of this test's own, for tests that restart or stop it (the session's
    server is shared by every test and, under xdist, by every worker)."""
    yield from _throwaway_server("context-manager-pg-private-")


def _throwaway_server(prefix: str) -> Iterator[Server]:
    """A server started in a fresh folder, stopped and removed afterwards; the test is skipped
    (or failed, with ``CONTEXT_MANAGER_REQUIRE_POSTGRES``) when none starts."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        server = start_postgres(folder)
    except Exception as err:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get("CONTEXT_MANAGER_REQUIRE_POSTGRES"):
            pytest.fail(f"CONTEXT_MANAGER_REQUIRE_POSTGRES is set but no server started: {err}")
        pytest.skip(f"no PostgreSQL server could be started ({err})")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: Server) -> Iterator[str]:
    """A connection string whose ``search_path`` is a fresh, empty schema (dropped afterwards)."""
    schema, dsn = fresh_schema(postgres_server.dsn)
    yield dsn
    drop_schema(postgres_server.dsn, schema)


def make_store(kind: str, request: pytest.FixtureRequest) -> Store:
    """A fresh, empty store of ``kind`` (one of ``STORES``), using the test's fixtures."""
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SQLiteStore(request.getfixturevalue("sqlite_path"))
    return PostgresStore(request.getfixturevalue("postgres_dsn"))


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """A fresh, empty store of each kind."""
    made = make_store(request.param, request)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=STORES)
def two_hosts(request: pytest.FixtureRequest) -> Iterator[tuple[Store, Store]]:
    """Two store objects on one fresh database, as two hosts (or a host and its restart) open
    it: two ``SQLiteStore`` on one file, two ``PostgresStore`` on one schema; the one
    ``MemoryStore`` twice (it lives in one process)."""
    first = make_store(request.param, request)
    second = first if request.param == "memory" else make_store(request.param, request)
    try:
        yield first, second
    finally:
        first.close()
        if second is not first:
            second.close()


@pytest.fixture
def no_render_snapshots() -> Iterator[None]:
    """Render snapshots off for one test (every re-render reads the stored messages)."""
    with snapshots_off():
        yield


# Hypothesis profiles (reliability, issue 9). Registered here, before the plugin reads
# ``--hypothesis-profile``. ``quick`` sizes the model-based test in the default run and ``ci`` in
# the ``-m slow`` run that ``.ci/run`` adds (tests/runtime/test_model_based.py uses them unless a
# bigger profile is loaded); ``long`` runs thousands of examples locally and
# raises every other property test's examples with it.
# With CONTEXT_MANAGER_HYPOTHESIS_SEEDED=1 (``.ci/run`` sets it) every profile draws the same
# examples on every run (``derandomize``), so whether a commit lands never depends on the draw;
# a plain local run explores new examples each time. No profile has a deadline: the suite runs on
# two workers, often on a loaded machine, and a slow example is not a failing one (DEVELOPERS.md:
# speed is measured with benchmarks/, never with timed tests).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_SEEDED: dict[str, Any] = (
    {"derandomize": True, "database": None, "deadline": None}
    if os.environ.get("CONTEXT_MANAGER_HYPOTHESIS_SEEDED")
    else {"deadline": None}
)
_hypothesis_settings.register_profile("ci", max_examples=300, stateful_step_count=10, **_SEEDED)
_hypothesis_settings.register_profile("quick", max_examples=25, stateful_step_count=10, **_SEEDED)
_hypothesis_settings.register_profile("long", max_examples=3000, stateful_step_count=25, **_SEEDED)
_hypothesis_settings.register_profile("suite", **_SEEDED)
_hypothesis_settings.load_profile("suite")
