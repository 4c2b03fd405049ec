"""The ``context-manager`` command line, driven as a user drives it: through a subprocess."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import CLI_ENV, cli, interrupt, snapshot

from context_manager import ContextManager, SQLiteStore, StoredMessage, TextBlock, ThinkingBlock
from context_manager._cli._format import (
    clean,
    format_message,
    line_form,
    message_text,
    plural,
    thinking_marker,
)
from context_manager._cli._main import main
from notices import notice_metadata

ENV = CLI_ENV
"""Never the real API from a test, whatever the developer's shell holds."""

LOSS = "[reasoning] ada: "
HEAD_PREFIX = LOSS + "The reasoning behind your replies up to the one "
COUNT_PREFIX = LOSS + "Some of your earlier reasoning is no longer in your context: "
WORDS = "Their words are still here."


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def assert_refused(done: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 2, one line on stderr naming the problem, nothing on stdout."""
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert message in done.stderr
    assert done.stdout == ""


def texts_on(path: Path, branch: str | None = None) -> list[str]:
    """The message texts a branch of agent ada holds, read back in-process."""
    store = SQLiteStore(path)
    try:
        cm = ContextManager.open(store, namespace="ada")
        return [message_text(m) for m in cm.messages(branch=branch)]
    finally:
        store.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One demo run on a kept database, shared by the tests that read it."""
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    return cli("demo", "--db", path), path


@pytest.fixture
def two_agents(tmp_path: Path) -> Path:
    """A database with agents ada (branches main and side, one notice) and bob."""
    path = tmp_path / "agents.db"
    store = SQLiteStore(path)
    ada = ContextManager.open(store, namespace="ada")
    ada.add_message("user", "ada on main")
    ada.add_message("system", LOSS + "test notice", metadata=notice_metadata("ada"))
    ada.fork("side")
    ada.add_message("user", "ada on side")
    ada.switch_branch("main")
    bob = ContextManager.open(store, namespace="bob")
    bob.add_message("user", "bob on main")
    store.close()
    return path


# help


def console_script() -> Path | None:
    """Where ``pip install`` put the ``context-manager`` script for this interpreter, if it did."""
    schemes = [sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user")]
    for scheme in schemes:
        candidate = Path(sysconfig.get_path("scripts", scheme)) / "context-manager"
        if candidate.exists():
            return candidate
    found = shutil.which("context-manager")
    return Path(found) if found else None


def test_the_console_script_and_the_module_both_run_the_command_line() -> None:
    script = console_script()
    if script is None:
        pytest.skip("the package is not installed, so there is no console script to run")
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: context-manager ")
    assert cli("--version").stdout.startswith("context-manager ")


@pytest.mark.parametrize("command", [[], ["demo"], ["run"], ["transcript"]])
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: context-manager {' '.join(command)}".strip())


def test_no_command_shows_the_usage_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "transcript" in capsys.readouterr().err


# demo


def test_the_demo_exits_0_and_announces_every_scene(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = demo
    assert done.returncode == 0, done.stderr
    headings = re.findall(r"^== Scene (\d)/8: (.+)$", done.stdout, re.MULTILINE)
    assert [n for n, _ in headings] == ["1", "2", "3", "4", "5", "6", "7", "8"]
    appended = done.stdout.split("== Scene 3/8", 1)[1].split("== Scene 4/8", 1)[0]
    assert "system    ⟨tool_removal - grep⟩" in appended
    assert "system    ⟨tool_addition + grep, inline⟩" in appended
    assert "notice    [reasoning]" not in appended
    assert "\x1b[" not in done.stdout  # no styling when stdout is not a terminal
    assert "⟨thinking, signed …" in done.stdout
    for line in done.stderr.splitlines():  # the log: only the operators' alerts, at warning
        assert re.search(r"\[warning\s*\] thinking_binding_loss ", line)


def test_the_demo_transcript_holds_every_line_form_of_spec_9(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, path = demo
    notices = json_lines(cli("transcript", path, "--kind", "reasoning-loss", "--json"))
    assert {(n["role"], n["kind"], n["target"]) for n in notices} == {
        ("system", "reasoning-loss", "ada")
    }
    lines = [n["text"] for n in notices]
    earlier = f"{WORDS} Re-read before relying on an earlier decision."
    since = f"{WORDS} Re-read before relying on a decision made since then."
    head_with_cause = [
        line
        for line in lines
        if line.startswith(HEAD_PREFIX + 'beginning "')
        and line.endswith(f'" is no longer in your context, because your tools changed. {earlier}')
    ]
    head_this_turn = [
        line
        for line in lines
        if line.startswith(HEAD_PREFIX)
        and ", this turn's earlier steps among them, is no longer in your context, because your "
        "tools changed. "
        in line
    ]
    count_one = [
        line
        for line in lines
        if line.startswith(
            COUNT_PREFIX + 'the reasoning behind one of your replies, the one beginning "'
        )
        and line.endswith(since)
    ]
    count_several = [
        line
        for line in lines
        if re.fullmatch(
            re.escape(COUNT_PREFIX)
            + r"the reasoning behind [2-9] of your replies, the first being the one .+\. "
            + re.escape(since),
            line,
        )
    ]
    at_least = [
        line
        for line in lines
        if re.fullmatch(
            re.escape(COUNT_PREFIX)
            + r"the reasoning behind at least (one|\d+) of your replies\. "
            + re.escape(earlier),
            line,
        )
    ]
    found = [head_with_cause, head_this_turn, count_one, count_several, at_least]
    assert all(found), lines
    assert any(line.endswith(f", this turn's earlier steps among them. {since}") for line in lines)
    assert {line_form(line) for line in lines} == {"head", "count", "at_least"}


def test_the_demo_summary_counts_lines_by_form_and_cause(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = demo
    summary = done.stdout.split("== Summary", 1)[1]
    rows = {tuple(line.split()[:2]): line.split()[-1] for line in summary.splitlines() if line}
    assert rows[("head", "head")] == "2"
    assert ("count", "first") not in rows  # a fork after main's first compile is no first one
    assert rows[("count", "messages")] == "1"
    assert rows[("count", "drops")] == "3"  # scene 6 tells twice, scene 7 once
    assert rows[("at-least", "drops")] == "1"
    assert re.search(r"provider drops placed on stored replies\s+[1-9]", summary)
    assert re.search(r"provider drops that could not be placed\s+2", summary)
    assert re.search(r"thinking blocks stripped at compile \(on_thinking_strip\)\s+[1-9]", summary)


def scene(done: subprocess.CompletedProcess[str], number: int) -> str:
    """What the demo printed under scene ``number``'s heading, up to the next heading."""
    after = done.stdout.split(f"== Scene {number}/8: ", 1)[1]
    return after.split("\n== ", 1)[0]


def test_the_demo_drop_scene_tells_the_incident_again_when_it_grows_to_several_replies(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = demo
    printed = scene(done, 6)
    assert "told again when it grows (several)" in printed
    told = [line for line in printed.splitlines() if "notice    [reasoning]" in line]
    assert len(told) == 2, printed
    assert "the reasoning behind one of your replies, the one beginning" in told[0]
    assert re.search(r"the reasoning behind [2-9] of your replies, the first being", told[1])


def test_the_demo_fork_scene_shows_the_imported_thinking_left_out_and_nothing_told(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = demo
    printed = scene(done, 5)
    assert "Look for: left out, not told between turns" in printed
    assert "(compiler) left out 2 thinking block(s) of the imported replies" in printed
    assert "notice    [reasoning]" not in printed


def test_the_demo_refuses_a_database_that_already_holds_a_demo_run(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, path = demo
    before = snapshot(path.parent)
    assert_refused(cli("demo", "--db", path), "already holds an agent 'ada'")
    assert snapshot(path.parent) == before


def test_the_demo_without_db_leaves_no_file_behind() -> None:
    done = cli("demo")
    assert done.returncode == 0, done.stderr
    assert "temporary file" in done.stdout


# transcript


def test_transcript_json_is_one_object_per_line_with_the_documented_fields(
    two_agents: Path,
) -> None:
    records = json_lines(cli("transcript", two_agents, "--agent", "ada", "--json"))
    assert [r["text"] for r in records] == ["ada on main", LOSS + "test notice"]
    assert set(records[0]) == {
        "id",
        "sequence",
        "branch",
        "role",
        "kind",
        "target",
        "text",
        "summary",
        "blocks",
        "created_at",
    }
    assert (records[1]["kind"], records[1]["target"]) == ("reasoning-loss", "ada")


def test_transcript_filters_by_kind_agent_and_branch(two_agents: Path) -> None:
    by_kind = json_lines(
        cli("transcript", two_agents, "--agent", "ada", "--kind", "reasoning-loss", "--json")
    )
    assert [r["kind"] for r in by_kind] == ["reasoning-loss"]
    side = json_lines(cli("transcript", two_agents, "--agent", "ada", "--branch", "side", "--json"))
    assert [(r["text"], r["branch"]) for r in side] == [
        ("ada on main", "main"),
        (LOSS + "test notice", "main"),
        ("ada on side", "side"),
    ]
    bob = json_lines(cli("transcript", two_agents, "--agent", "bob", "--json"))
    assert [r["text"] for r in bob] == ["bob on main"]


def test_transcript_without_agent_uses_the_only_one_and_lists_them_when_several(
    two_agents: Path, tmp_path: Path
) -> None:
    assert_refused(cli("transcript", two_agents), "pick one with --agent: 'ada', 'bob'")
    single = tmp_path / "single.db"
    store = SQLiteStore(single)
    ContextManager.open(store, namespace="solo").add_message("user", "alone")
    store.close()
    assert [r["text"] for r in json_lines(cli("transcript", single, "--json"))] == ["alone"]


@pytest.mark.parametrize(
    ("args", "listed"),
    [(["--agent", "carol"], "agents: 'ada', 'bob'"), (["--branch", "nope"], "'main', 'side'")],
)
def test_an_unknown_agent_or_branch_is_an_error_that_lists_the_known_ones(
    two_agents: Path, args: list[str], listed: str
) -> None:
    agent = ["--agent", "ada"] if "--branch" in args else []
    assert_refused(cli("transcript", two_agents, *agent, *args), listed)


def test_the_readable_transcript_shows_roles_markers_and_notices(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, path = demo
    done = cli("transcript", path, "--branch", "main")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agent ada, branch main (other branches: imported)")
    assert re.search(r"assistant ⟨thinking, signed …\S{4}⟩ → activate_skill\(\{\}\)", done.stdout)
    assert "notice    [reasoning] ada: " in done.stdout
    assert "(imported)" not in done.stdout  # the fork's imports are not on main


def test_transcript_reasoning_shows_the_audit_view_marked_untrusted(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, path = demo
    parts = json_lines(cli("transcript", path, "--reasoning", "--json"))
    ok = [p for p in parts if p["status"] == "ok" and p["untrusted_text"]]
    assert ok
    assert all(p["digest"] and p["ref"].startswith("sha256:") for p in ok)
    assert "The failure started after the dependency bump." in {p["untrusted_text"] for p in ok}
    readable = cli("transcript", path, "--reasoning")
    assert "  untrusted ┆ The failure started after the dependency bump." in readable.stdout


def test_transcript_reasoning_takes_no_kind_filter(
    two_agents: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["transcript", str(two_agents), "--reasoning", "--kind", "summary"]) == 2
    assert "use one" in capsys.readouterr().err


def test_transcript_reasoning_with_a_missing_sidecar_is_an_error(
    demo: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    _, path = demo
    done = cli("transcript", path, "--reasoning", "--sidecar", tmp_path / "none.reasoning")
    assert_refused(done, "no such reasoning sidecar")
    assert not (tmp_path / "none.reasoning").exists()


def test_an_older_schema_is_read_without_migrating_the_file(two_agents: Path) -> None:
    db = sqlite3.connect(two_agents)
    db.execute("ALTER TABLE branch_state DROP COLUMN anchor")  # what schema 2 added
    db.execute("ALTER TABLE releases DROP COLUMN reported_from")  # what schema 4 added
    db.execute("DROP TABLE left_out")  # what schema 5 added
    db.execute("ALTER TABLE releases DROP COLUMN at_seq")
    db.execute("DROP TABLE anchored_heads")  # what schema 6 added
    db.execute("DROP TABLE release_history")  # what schema 8 added (7 is left_out's)
    db.execute("DROP TABLE binding_serials")  # what schema 9 added
    db.execute("DROP TABLE renders")  # what schema 10 added
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    before = snapshot(two_agents.parent)
    records = json_lines(cli("transcript", two_agents, "--agent", "bob", "--json"))
    assert [r["text"] for r in records] == ["bob on main"]
    assert snapshot(two_agents.parent) == before


# bad input


def _not_sqlite(path: Path) -> None:
    path.write_bytes(b"this is not a database, just some text\n" * 50)


def _foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE invoices (id INTEGER)")
    db.commit()
    db.close()


def _newer(path: Path) -> None:
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _directory(path: Path) -> None:
    path.mkdir()


BAD_FILES: dict[str, tuple[Callable[[Path], None], str]] = {
    "not sqlite": (_not_sqlite, "not a context-manager database"),
    "foreign": (_foreign, "tables this library did not write"),
    "newer": (_newer, "schema version 99 is newer"),
    "directory": (_directory, "is a directory"),
}


@pytest.mark.parametrize("command", ["transcript", "run"])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_database_is_one_line_on_stderr_exit_2_and_nothing_written(
    tmp_path: Path, command: str, case: str
) -> None:
    make, message = BAD_FILES[case]
    path = tmp_path / "bad.db"
    make(path)
    before = snapshot(tmp_path)
    if command == "transcript":
        done = cli("transcript", path)
    else:
        done = cli("run", "--db", path, "--agent", "ada", stdin="hello\n")
    assert_refused(done, message)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("make", "message"), [(None, "no such database"), (_empty, "holds no agents yet")]
)
def test_transcript_of_a_missing_or_empty_file_creates_nothing(
    tmp_path: Path, make: Callable[[Path], None] | None, message: str
) -> None:
    path = tmp_path / "agent.db"
    if make is not None:
        make(path)
    before = snapshot(tmp_path)
    assert_refused(cli("transcript", path), message)
    assert snapshot(tmp_path) == before


# run


SESSION_ONE = "\n".join(
    ["hello there", "/fork side", "/tools", "what time is it?", "/branches", "/quit", "after quit"]
)
SESSION_TWO = "\n".join(
    [
        "/branches",
        "back again",
        "/notices",
        "/fold",
        "/system You are terse.",
        "/tools",
        "/tools",
        "/fork",
        "/switch nope",
        "/bogus",
        "/help",
        "/switch main",
    ]
)


def test_run_over_stdin_forks_toggles_a_tool_and_a_second_run_continues_the_branch(
    tmp_path: Path,
) -> None:
    """``/tools`` and ``/system`` are appended (SPEC 7b): nothing is lost or told, the
    transcript shows the ``head-change`` messages, and the fold covers every reply's thinking."""
    path = tmp_path / "agent.db"
    first = cli("run", "--db", path, "--agent", "ada", stdin=SESSION_ONE + "\n")
    assert first.returncode == 0, first.stderr
    said = first.stdout.splitlines()
    assert said[0] == "Using the local simulator (no ANTHROPIC_API_KEY); model claude-opus-5-5."
    assert "forked: now on branch 'side'" in said
    assert any("→ utc_time({})" in line for line in said)
    assert [line for line in said if line[2:] in ("main", "side")] == ["  main", "* side"]

    store = SQLiteStore(path)  # as if the process had died before the model answered
    ContextManager.open(store, namespace="ada").add_message("user", "left unanswered")
    store.close()

    second = cli("run", "--db", path, "--agent", "ada", stdin=SESSION_TWO + "\n")
    assert second.returncode == 0, second.stderr
    said = second.stdout.splitlines()
    assert said[1].startswith("Agent 'ada' on branch 'side'")
    assert said[2] == "(finishing the turn interrupted last time)"
    assert "* side" in said
    assert not any("[reasoning] ada: " in line for line in said)
    assert "no [reasoning] notices on this branch" in said
    assert re.search(
        r"^folded into summary #\d+; the reasoning of 5 replies left out", second.stdout, re.M
    )
    for expected in [
        "system text set",
        "tool utc_time added to the head (ask for the time)",
        "tool utc_time removed from the head",
        "! usage: /fork NAME",
        "! no branch 'nope'; known branches: 'main', 'side'",
        "Type a message to run a turn. Commands:",
        "now on branch 'main'",
    ]:
        assert expected in said
    assert any(line.startswith("! unknown command /bogus; known: /fork") for line in said)

    side = [r["text"] for r in json_lines(cli("transcript", path, "--branch", "side", "--json"))]
    assert {"hello there", "what time is it?", "You said: left unanswered", "back again"} <= set(
        side
    )
    assert "after quit" not in side
    assert texts_on(path, "main") == ["hello there", "You said: hello there"]
    assert not [t for t in side if t.startswith(LOSS)]
    changes = cli("transcript", path, "--branch", "side", "--kind", "head-change").stdout
    # the tool added, then (a new run's default head) removed
    added, removed = "system +⟨tool_addition \\+ utc_time⟩", "system +⟨tool_removal - utc_time⟩"
    assert re.search(f"{added}\n.*{removed}", changes)


def test_run_stops_cleanly_at_ctrl_c_with_everything_stored(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    child = subprocess.Popen(
        [sys.executable, "-m", "context_manager", "run", "--db", str(path), "--agent", "ada"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write("remember this\n")
    child.stdin.flush()
    for line in child.stdout:
        if "You said: remember this" in line:
            break
    interrupt(child)
    with child:  # closes its pipes
        assert child.stderr is not None
        err = child.stderr.read()
    assert child.returncode == 130
    assert err.endswith("stopped; everything stored so far is kept\n")  # the turn had finished
    assert err.count("\n") == 1
    assert texts_on(path) == ["remember this", "You said: remember this"]


def test_run_refuses_an_agent_name_with_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--db", str(tmp_path / "a.db"), "--agent", "a\tb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "agent name 'a\\tb' has control characters" in err
    assert not (tmp_path / "a.db").exists()


# the pure pieces


def test_a_thinking_marker_shows_only_the_signatures_last_characters() -> None:
    signature = "EqQBCkYIBxgCKkD3mZ9a1nY2Vb0x8wQy=="
    marker = thinking_marker(ThinkingBlock("secret reasoning", signature))
    assert marker == "⟨thinking, signed …8wQy⟩"
    assert "secret" not in marker
    assert thinking_marker(ThinkingBlock("", "")) == "⟨thinking, unsigned⟩"


def test_notices_are_highlighted_only_when_styling_is_on() -> None:
    notice = StoredMessage(
        id="msg_9",
        sequence=9,
        branch="b1@1",
        role="system",
        content=(TextBlock(LOSS + "gone"),),
        metadata=notice_metadata("ada"),
        created_at=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    )
    assert format_message(notice, color=False) == [f"#9    notice    {LOSS}gone"]
    (styled,) = format_message(notice, color=True)
    assert styled == f"\x1b[2m#9    notice    \x1b[0m\x1b[1;33m{LOSS}gone\x1b[0m"
    (timed,) = format_message(notice, color=False, clock=True)
    assert timed.startswith("#9    2026-01-02 03:04:05 notice")


def test_printed_text_can_never_carry_a_terminal_escape() -> None:
    assert clean("red \x1b[31m\rtext\u202e") == "red \\x1b[31m\\x0dtext\\u202e"
    assert clean("two\nlines") == "two\nlines"


def test_line_forms_are_told_apart_by_their_wording() -> None:
    assert line_form(HEAD_PREFIX + 'beginning "x" is no longer ...') == "head"
    assert line_form(COUNT_PREFIX + "the reasoning behind 2 of your replies") == "count"
    assert line_form(COUNT_PREFIX + "the reasoning behind at least 2 of your replies.") == (
        "at_least"
    )
    assert line_form("You said: [reasoning] ada:") is None


def test_plurals_read_as_english() -> None:
    assert [plural(1, "reply"), plural(2, "reply"), plural(0, "tool call")] == [
        "1 reply",
        "2 replies",
        "0 tool calls",
    ]
