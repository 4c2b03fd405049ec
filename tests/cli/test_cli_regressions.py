"""Regressions of issue 17, item 14, and issue 35: the command line as a new user tries it."""

from __future__ import annotations

import gc
import io
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from helpers import CLI_ENV, THINKING_HEAD, cli, interrupt, snapshot

from context_manager import ContextManager, MemoryStore, SQLiteStore


def tool_round_db(path: Path) -> None:
    store = SQLiteStore(path)
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "What time is it?")
    use = {"type": "tool_use", "id": "toolu_1", "name": "utc_time", "input": {}}
    cm.add_message("assistant", [use])
    cm.add_message("user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "noon"}])
    store.close()


def test_a_transcript_filtered_to_a_kind_nothing_has_says_no_message_matched(
    tmp_path: Path,
) -> None:
    tool_round_db(tmp_path / "a.db")
    done = cli("transcript", tmp_path / "a.db", "--kind", "no-such-kind")
    assert done.returncode == 0, done.stderr
    expected = "no message of kind 'no-such-kind' matched on branch main"
    assert done.stdout.splitlines()[-1] == expected


def test_json_lines_describe_tool_calls_and_results_in_their_summary_not_their_text(
    tmp_path: Path,
) -> None:
    """``text`` is the message's text blocks only (issue 35: it invented text for tool blocks);
    ``summary`` describes the tool calls and results of a message with no text."""
    tool_round_db(tmp_path / "a.db")
    done = cli("transcript", tmp_path / "a.db", "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["text"] for r in records] == ["What time is it?", "", ""]
    assert [r["summary"] for r in records] == [None, "called utc_time", "result: noon"]


def test_the_demo_on_a_database_made_by_run_names_the_agent_there_not_a_demo_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agents.db"
    made = cli("run", "--db", path, "--agent", "ada", stdin="hello\n")
    assert made.returncode == 0, made.stderr
    before = snapshot(tmp_path)

    done = cli("demo", "--db", path)

    assert done.returncode == 2
    assert done.stdout == ""
    assert "demo run" not in done.stderr
    assert (
        f"{path}: already holds an agent 'ada' (from an earlier demo or from `run --agent ada`)"
        in done.stderr
    )
    assert snapshot(tmp_path) == before


def test_ctrl_c_during_the_demo_without_db_says_its_temporary_database_was_removed() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "context_manager", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CLI_ENV | {"PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    header = child.stdout.readline()  # printed once the database is open, before scene 1
    found = re.search(r"on SQLite \((.+?)\) against", header)
    assert found is not None, header
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)

    assert child.returncode == 130
    assert err.splitlines()[-1] == (
        "context-manager: interrupted; the demo's temporary database was removed "
        "(pass --db PATH to keep one)"
    )
    assert "everything stored so far is kept" not in err
    assert not Path(found.group(1)).parent.exists()


def test_an_empty_file_is_a_new_database_to_run_and_holds_no_agents_for_transcript(
    tmp_path: Path,
) -> None:
    path = tmp_path / "touched.db"
    path.write_bytes(b"")
    before = snapshot(tmp_path)

    read = cli("transcript", path)

    assert (read.returncode, read.stdout) == (2, "")
    assert f"{path} holds no agents yet (an empty database;" in read.stderr
    assert "not a context-manager database" not in read.stderr
    assert snapshot(tmp_path) == before

    ran = cli("run", "--db", path, "--agent", "ada", stdin="hello\n")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[1].startswith(
        f"Agent 'ada' on branch 'main' in {path} (a new database: the file was empty)."
    )
    records = [json.loads(line) for line in cli("transcript", path, "--json").stdout.splitlines()]
    assert [r["text"] for r in records] == ["hello", "You said: hello"]


def test_run_deletes_a_branch_with_delete_so_the_advice_of_fork_can_be_followed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agents.db"
    session = ["hello", "/fork side", "/fork main", "/delete side", "/switch main"]
    session += ["/delete side", "/fork side", "/branches"]

    done = cli("run", "--db", path, "--agent", "ada", stdin="\n".join(session) + "\n")

    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said[-8:] == [
        "forked: now on branch 'side'",
        "! branch 'main' already exists; /switch main goes to it, or pick another name "
        "(/delete main deletes it, from another branch)",
        "! branch 'side' is the current branch; switch to another branch before deleting it",
        "now on branch 'main'",
        "deleted branch 'side' (its messages stay stored; the name is free again)",
        "forked: now on branch 'side'",
        "  main",
        "* side",
    ]


# Issue 35: `run` at the boundaries of a turn.


def run_child(path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "context_manager",
            "run",
            "--db",
            str(path),
            "--agent",
            "ada",
            *extra,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CLI_ENV | {"PYTHONUNBUFFERED": "1"},
    )


def test_run_exits_1_when_a_turn_failed_in_a_run_that_is_not_interactive(tmp_path: Path) -> None:
    done = cli(
        "run",
        "--db",
        tmp_path / "a.db",
        "--agent",
        "ada",
        "--model",
        "claude-opus-55",
        stdin="hello\n",
    )
    assert done.returncode == 1, done.stderr
    assert "the turn failed" in done.stdout
    assert "model: claude-opus-55" in done.stdout


def test_run_exits_0_when_every_turn_of_a_run_that_is_not_interactive_worked(
    tmp_path: Path,
) -> None:
    done = cli("run", "--db", tmp_path / "a.db", "--agent", "ada", stdin="hello\n")
    assert done.returncode == 0, done.stderr


class _InterruptedRunner:
    """An ``asyncio.Runner`` that Ctrl-C reaches just as it is handed the turn, before the
    turn's coroutine starts (the window just after a line is read)."""

    def run(self, coroutine: object) -> object:
        raise KeyboardInterrupt


def test_ctrl_c_just_after_a_line_warns_of_no_coroutine_never_awaited() -> None:
    from context_manager._cli._run import Session
    from context_manager.runtime import Agent, Runtime
    from context_manager.simulator import Simulator

    agent = Runtime(Simulator().client(), MemoryStore()).register(Agent("ada", THINKING_HEAD))
    session = Session(agent, _InterruptedRunner(), io.StringIO(), color=False)  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(KeyboardInterrupt):
            session.turn("hello")
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def _replied(path: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            row = db.execute("SELECT count(*) FROM messages WHERE role = 'assistant'").fetchone()
    except sqlite3.Error:
        return False
    return bool(row[0])


def test_ctrl_c_once_the_turn_has_answered_prints_the_reply_and_does_not_say_interrupted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.db"
    child = run_child(path)
    assert child.stdin is not None
    child.stdin.write("hello\n")
    child.stdin.flush()
    deadline = time.monotonic() + 60
    while not _replied(path) and time.monotonic() < deadline:
        time.sleep(0.002)
    interrupt(child)
    out, err = child.communicate(timeout=30)
    assert child.returncode == 130
    assert "You said: hello" in out
    assert "interrupted" not in err
    assert err.splitlines()[-1] == "context-manager: stopped; everything stored so far is kept"


def test_run_help_lists_every_command_the_sessions_own_help_lists(tmp_path: Path) -> None:
    inside = cli("run", "--db", tmp_path / "a.db", "--agent", "ada", stdin="/help\n")
    assert inside.returncode == 0, inside.stderr
    listed = re.findall(r"^  (/\w+(?: [A-Z]+)?) ", inside.stdout, re.MULTILINE)
    assert "/compact" in listed
    outside = " ".join(cli("run", "--help").stdout.split())  # argparse wraps the description
    assert f"Commands: {', '.join(listed)}." in outside


def test_transcript_help_names_every_field_a_json_line_carries(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    cm = ContextManager.open(SQLiteStore(path), namespace="ada")
    cm.add_message("user", "hello")
    cm.store.close()
    shown = cli("transcript", path, "--json")
    assert shown.returncode == 0, shown.stderr
    fields = list(json.loads(shown.stdout.splitlines()[0]))
    helped = " ".join(cli("transcript", "--help").stdout.split())  # argparse wraps the help
    assert f"one JSON object per line: {', '.join(fields)}" in helped
