"""``context-manager serve`` and ``demo --serve``: the console on a database, from the shell."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import cli, cli_without, snapshot, start_console, stop_console

OWNER = "owner-token-0123456789"


def get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_demo_serve_keeps_the_console_open_on_the_demo_database(tmp_path: Path) -> None:
    database = tmp_path / "demo.db"
    process, entry = start_console("demo", "--db", database, "--serve", "--port", 0)
    try:
        base, _, token = entry.partition("/?token=")
        no_token = get(f"{base}/agents/ada")
        page = get(f"{base}/agents/ada", token)
    finally:
        code, said = stop_console(process)
    assert no_token[0] == 401
    assert page[0] == 200
    assert "[reasoning] notice" in page[1]
    assert code == 130  # Ctrl-C, as every command reports it
    assert f"what the demo stored so far is kept in {database}" in said
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"# the owner\n{OWNER} alice *\n")
    process, entry = start_console("serve", "--db", database, "--tokens", tokens, "--port", 0)
    try:
        listing = get(f"{entry.rstrip('/')}/", OWNER)
        refused = get(f"{entry.rstrip('/')}/", "not-a-known-token-at-all")
    finally:
        code, said = stop_console(process)
    assert (code, said.strip().splitlines()[-1]) == (
        130,
        "context-manager: interrupted; the console stopped; nothing was written",
    )
    assert entry.startswith("http://127.0.0.1:")
    assert listing[0] == 200
    assert "ada" in listing[1]
    assert refused[0] == 401


def test_demo_serve_without_db_says_its_temporary_file_lasts_until_the_console_stops() -> None:
    printed: list[str] = []
    process, _ = start_console("demo", "--serve", "--port", 0, seen=printed)
    try:
        said = next(line for line in printed if line.startswith("The transcript is"))
        path = Path(re.findall(r"context-manager transcript (\S+) --reasoning", printed[-1])[0])
        readable = cli("transcript", path, "--branch", "main")
        existed = path.is_file()
    finally:
        code, stderr = stop_console(process)
    assert said == (
        f"The transcript is in a temporary file, {path}, removed when the console stops "
        "(pass --db PATH to keep it). Until then, read it with:"
    )
    assert existed
    assert readable.returncode == 0, readable.stderr  # the printed commands work meanwhile
    assert code == 130
    assert "the demo's temporary database was removed (pass --db PATH to keep one)" in stderr
    assert not path.exists()  # as the message said


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("short alice *\n", "shorter than 16"),
        (f"{OWNER}\n", "expected `TOKEN PRINCIPAL"),
        (f"{OWNER} alice * ada\n", "stands alone"),
        (f"{OWNER} alice *\n{OWNER} bob ada\n", "already given"),
        ("# nothing\n", "no tokens"),
    ],
)
def test_a_bad_tokens_file_is_refused_in_one_line(tmp_path: Path, text: str, why: str) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(text)
    database = tmp_path / "none.db"
    result = cli("serve", "--db", database, "--tokens", tokens, "--port", 0)
    assert result.returncode == 2
    assert why in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: None, "cannot read it (no such file)"),
        (lambda path: path.mkdir(), "cannot read it (it is a directory)"),
        (lambda path: path.write_text("# nothing\n"), "no tokens in it"),
    ],
)
def test_a_tokens_file_unusable_as_a_whole_is_named_without_a_line_number(
    tmp_path: Path, make: Callable[[Path], object], why: str
) -> None:
    tokens = tmp_path / "tokens.txt"
    make(tokens)
    done = cli("serve", "--db", tmp_path / "none.db", "--tokens", tokens, "--port", 0)
    assert done.returncode == 2
    assert done.stderr.startswith(f"context-manager: error: {tokens}: {why}")
    assert done.stderr.count("\n") == 1
    assert done.stdout == ""


WEB_HINT = "the console needs the web extra: pip install 'thinking-context-manager[web]'"
GATEWAY_HINT = (
    "the gateway needs starlette and uvicorn: pip install 'thinking-context-manager[gateway]'"
)


@pytest.mark.parametrize("missing", ["starlette", "uvicorn"])
@pytest.mark.parametrize(
    ("command", "hint"),
    [
        (["serve"], WEB_HINT),
        (["demo", "--serve"], WEB_HINT),
        (["gateway"], GATEWAY_HINT),
    ],
)
def test_a_missing_extra_is_said_in_one_line_before_anything_runs_or_is_written(
    tmp_path: Path, missing: str, command: list[str], hint: str
) -> None:
    database = tmp_path / "agents.db"
    done = cli_without([missing], *command, "--db", database)
    assert (done.returncode, done.stderr) == (2, f"context-manager: error: {hint}\n")
    assert done.stdout == ""  # the demo's scenes did not run
    assert snapshot(tmp_path) == {}  # nor was any database created
