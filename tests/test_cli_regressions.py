"""Regressions of issue 17, item 14: the command line as a new user tries it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from context_manager import ContextManager, SQLiteStore

ENV = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {"NO_COLOR": "1"}


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "context_manager", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )


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


def test_json_lines_describe_tool_calls_and_results_in_their_text(tmp_path: Path) -> None:
    tool_round_db(tmp_path / "a.db")
    done = cli("transcript", tmp_path / "a.db", "--json")
    assert done.returncode == 0, done.stderr
    texts = [json.loads(line)["text"] for line in done.stdout.splitlines()]
    assert texts == ["What time is it?", "called utc_time", "result: noon"]
