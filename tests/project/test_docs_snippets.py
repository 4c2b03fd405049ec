"""Every Python block in README.md and docs/*.md runs exactly as a reader would paste it.

The blocks are read from the files themselves, so an edit that breaks one fails here. Nothing is
injected: each block runs alone, as a script (``__name__ == "__main__"``), in an empty folder. A
block that needs something first says so in a comment on its first line (``# needs a PostgreSQL
server: ...``), and the test provides exactly that (``CONTEXT_MANAGER_POSTGRES_DSN``). A block
not meant to run is marked in its fence, where the page shows it as the block's title:
```` ```python title="not runnable: REASON" ````; interactive sessions are ``pycon``.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))
EXAMPLES = ROOT / "examples"

README_MAX_LINES = 250
"""A first read, not a manual: the rest lives in docs/ (issue 35)."""

NOT_RUNNABLE = re.compile(r'title="not runnable: [^"]+"')
"""How a Python block says it is not meant to run alone, with its reason."""

NEEDS_POSTGRES = "# needs a PostgreSQL server"
"""The first-line comment of a block that needs ``CONTEXT_MANAGER_POSTGRES_DSN``."""

FENCE = re.compile(r"^(`{3,})(\S*)(.*)$")


@attrs.frozen
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    language: str
    info: str
    source: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.language == "python" and not NOT_RUNNABLE.search(self.info)


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order (a fence closes on the backticks it opened with)."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        ticks, language, info = opened.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks)
        source = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 1, language, info.strip(), source))
        i = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]
RUNNABLE = [block for block in ALL_BLOCKS if block.runnable]


@pytest.mark.parametrize("block", RUNNABLE, ids=[block.where for block in RUNNABLE])
def test_every_python_block_of_the_docs_runs_as_pasted(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.chdir(tmp_path)
    if block.source.startswith(NEEDS_POSTGRES):
        monkeypatch.setenv("CONTEXT_MANAGER_POSTGRES_DSN", request.getfixturevalue("postgres_dsn"))
    namespace = {"__name__": "__main__"}
    exec(compile(block.source, block.where, "exec"), namespace)


def test_the_docs_have_python_blocks_to_run() -> None:
    pages = {block.page.name for block in RUNNABLE}
    assert {"README.md", "getting-started.md", "concepts.md", "runtime.md"} <= pages


def test_every_code_block_names_its_language() -> None:
    """A bare fence could hide a Python block from the test above."""
    assert [block.where for block in ALL_BLOCKS if not block.language] == []


def test_a_block_that_needs_setup_says_so_on_its_first_line() -> None:
    needing = [block for block in RUNNABLE if "CONTEXT_MANAGER_POSTGRES_DSN" in block.source]
    assert needing
    assert all(block.source.startswith(NEEDS_POSTGRES) for block in needing)


def test_the_readme_is_a_first_read_of_at_most_250_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def quickstart_in(page: Path) -> Block:
    """The page's first complete script: the quickstart."""
    return next(b for b in blocks_of(page) if b.runnable and "asyncio.run(main())" in b.source)


def test_the_readme_quickstart_is_the_quickstart_example_and_the_getting_started_script() -> None:
    shown = quickstart_in(README).source
    example = (EXAMPLES / "quickstart.py").read_text(encoding="utf-8")
    assert example.endswith(shown)
    assert quickstart_in(ROOT / "docs" / "getting-started.md").source == shown


def test_the_readme_quickstart_prints_the_notice_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(quickstart_in(README).source, "README.md", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    (shown,) = [b for b in blocks_of(README) if b.language == "text" and "[reasoning]" in b.source]
    assert "tools called: ['read_log']" in printed
    assert "head changes appended: 1" in printed
    assert shown.source.strip().splitlines() == printed  # every line it prints, in order


def test_the_runtime_page_shows_the_host_loop_example_from_its_imports_on() -> None:
    lines = (EXAMPLES / "host_loop.py").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# docs: start"))
    shown = "\n".join(lines[start + 1 :]).strip() + "\n"
    page = ROOT / "docs" / "runtime.md"
    section = page.read_text(encoding="utf-8").split("## Your own loop", 1)[1]
    assert f"```python\n{shown}```" in section
    assert "from notices import" in shown
    assert "asyncio.run(main(" in shown


def test_every_relative_link_of_the_readme_names_a_file_in_the_repository() -> None:
    """mkdocs checks the links inside docs/; the README's own links are checked here."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_the_docs_and_the_library_cite_only_what_a_user_has() -> None:
    """The provider's rules are docs/rules.md ("provider rule N"); no path outside the repo."""
    sources = [*PAGES, *sorted((ROOT / "context_manager").rglob("*.py"))]
    sources += sorted((ROOT / "notices").rglob("*.py"))
    citing = [
        str(path.relative_to(ROOT))
        for path in sources
        if re.search(r"VENDOR_RULES|/work/shared", path.read_text(encoding="utf-8"))
    ]
    assert citing == []
