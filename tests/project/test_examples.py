"""Every script in ``examples/`` runs as a new user runs it, offline, and prints what it says.

Each script runs alone in a subprocess (``sys.executable``, an empty folder as its working
directory, no ``ANTHROPIC_API_KEY``: the simulator answers) with this checkout's
``context_manager`` first on the path. A script's docstring ends a paragraph with ``::`` and
shows, indented below it, lines its output must hold (a line ending in `` ...`` is a line's
start); a new script is picked up by the parametrization and must say what it prints. The README
links every script, so a reader finds them. ``tests/project/test_docs_snippets.py`` checks that
the README and docs/runtime.md show the quickstart and the host loop as they are.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = sorted(path for path in EXAMPLES.glob("*.py") if not path.name.startswith("_"))
"""The examples (``_helpers.py`` and any other ``_`` module is what they share, not one)."""

LEAVES = {"quickstart.py": "agents.db"}
"""What a script leaves in its folder (files starting so): the README's quickstart keeps its
database; every other example works in a temporary folder and leaves nothing."""

TIMEOUT = 240
"""Seconds per script: importing LiteLLM alone takes a while on a busy machine."""

OFFLINE_UNSET = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")


def expected_lines(script: Path) -> list[str]:
    """The indented lines after the first docstring paragraph that ends with ``::``."""
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    lines = doc.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.endswith("::")), len(lines))
    shown: list[str] = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        if line.strip():
            shown.append(line.strip())
    return shown


def holds(printed: list[str], expected: str) -> bool:
    if expected.endswith(" ..."):
        return any(line.startswith(expected.removesuffix(" ...")) for line in printed)
    return expected in printed


def run(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_UNSET}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=[path.name for path in SCRIPTS])
def test_every_example_runs_offline_and_prints_what_its_docstring_shows(
    script: Path, tmp_path: Path
) -> None:
    expected = expected_lines(script)
    assert expected, f"{script.name}: its docstring shows no output (a paragraph ending in ::)"
    done = run(script, tmp_path)
    assert done.returncode == 0, done.stderr
    printed = [line.strip() for line in done.stdout.splitlines()]
    assert [line for line in expected if not holds(printed, line)] == [], done.stdout
    left = sorted(path.name for path in tmp_path.iterdir())
    assert [name for name in left if not name.startswith(LEAVES.get(script.name, "\0"))] == []


def test_the_framework_examples_are_all_there() -> None:
    """Issue 31: one per framework, and the gateway on its own."""
    names = {path.name for path in SCRIPTS}
    assert {
        "gateway.py",
        "pydantic_ai_agent.py",
        "langchain_gateway.py",
        "sdk_tool_runner.py",
        "langgraph_checkpointer.py",
        "openai_agents_session.py",
    } <= names


def test_the_readme_links_every_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in SCRIPTS if f"](examples/{p.name})" not in readme]
    assert unlinked == []
