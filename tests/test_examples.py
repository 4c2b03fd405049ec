"""The examples the README points to run as a new user would run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60
    )


def test_the_host_loop_example_tells_a_tool_change_in_one_reasoning_line() -> None:
    done = run("host_loop.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        '[reasoning] ada: The reasoning behind your replies up to the one beginning "You said: '
        'The deploy failed; what do you think?" is no longer in your context, because your tools '
        "changed. Their words are still here. Re-read before relying on an earlier decision."
    ]


def test_the_quickstart_example_runs() -> None:
    done = run("quickstart.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def readme_part_of(source: str) -> str:
    """The lines of an example between its ``# readme: start`` and ``# readme: end`` markers."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# readme: start"))
    end = next(i for i, line in enumerate(lines) if line.startswith("# readme: end"))
    return "\n".join(lines[start + 1 : end]).strip() + "\n"


def test_the_readme_host_loop_is_the_tested_example_code_with_its_imports() -> None:
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    shown = readme_part_of((EXAMPLES / "host_loop.py").read_text(encoding="utf-8"))
    section = readme.split("### A host's own loop", 1)[1].split("\n## ", 1)[0]
    assert f"```python\n{shown}```" in section
    assert "from notices import" in shown
    assert "client = " in shown
    assert "HEAD = Head(" in shown
