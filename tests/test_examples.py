"""The examples the README points to run as a new user would run them (tests/test_docs_snippets.py
checks that the README and docs/runtime.md show them as they are)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_the_host_loop_example_tells_a_tool_change_in_one_reasoning_line(tmp_path: Path) -> None:
    done = run("host_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        '[reasoning] ada: The reasoning behind your replies up to the one beginning "You said: '
        'The deploy failed; what do you think?" is no longer in your context, because your tools '
        "changed. Their words are still here. Re-read before relying on an earlier decision."
    ]


def test_the_quickstart_example_runs_and_tells_the_model_switch(tmp_path: Path) -> None:
    done = run("quickstart.py", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "because your model changed" in done.stdout
    assert (tmp_path / "agents.db").exists()
