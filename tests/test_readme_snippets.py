"""The README's Python snippets run as a new user would paste them (issue 13).

Each snippet is taken from README.md as it stands, so a README edit that breaks one fails here.
Snippets that are fragments of a larger program (they use names the README defines in prose)
get those names from ``PRELUDE``; a top-level ``await`` runs inside a coroutine.
"""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

PRELUDE = {
    "READ_LOG_TOOL": {
        "name": "read_log",
        "description": "Read the log.",
        "input_schema": {"type": "object"},
    },
    "read_log": lambda _: "all quiet",
}
"""What the runtime snippet takes from the prose around it."""


def snippet(starting: str) -> str:
    """The README's Python snippet whose first line starts with ``starting``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    (found,) = [b for b in blocks if b.startswith(starting)]
    return str(found)


def run(source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = dict(PRELUDE)
    body = "async def __snippet__():\n" + textwrap.indent(source, "    ")
    body += "\n    return locals()\n"
    exec(compile(body, str(README), "exec"), namespace)
    found: dict[str, Any] = asyncio.run(namespace["__snippet__"]())
    return found


def test_the_store_snippet_stores_and_reads_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run(
        snippet("from context_manager import ContextManager, SQLiteStore"), tmp_path, monkeypatch
    )
    assert [m.role for m in found["cm"].messages()] == ["user", "assistant"]


def test_the_runtime_snippet_runs_a_turn_that_calls_the_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = run(
        snippet("import attrs\nfrom anthropic import AsyncAnthropic"), tmp_path, monkeypatch
    )
    assert [call.name for call in found["result"].tool_calls] == ["read_log"]
    assert not found["ada"].head.tools
