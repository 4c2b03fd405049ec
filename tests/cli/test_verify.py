"""``context-manager verify``: a stored branch replayed against the simulator, read-only."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from helpers import FAST_RETRY, cli, invalid_calls, snapshot

from context_manager import ContextManager, Head, SQLiteStore, Window
from context_manager._binding._chain import block_bytes, own_digest
from context_manager._cli._db import open_sidecar, sidecar_path
from context_manager._model._content import block_to_wire, is_thinking
from context_manager._reasoning._capture import ReasoningCapture
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator

SESSION = "hello\nhow are you\n/system You are Ada, terse.\nand now\n/tools\nwhat time is it\n"


def test_verify_on_a_database_written_by_run_holds_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    assert cli("run", "--db", path, "--agent", "ada", stdin=SESSION).returncode == 0
    before = snapshot(tmp_path)

    done = cli("verify", path, "--agent", "ada")

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "5 of 5 replies held."
    assert all(": held, 1 of 1 thinking blocks sent" in line for line in lines[:-1])
    assert snapshot(tmp_path) == before


def test_verify_on_the_demo_database_holds_and_its_summary_counts_the_skipped_replies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "demo.db"
    assert cli("demo", "--db", path).returncode == 0
    done = cli("verify", path, "--agent", "ada")
    assert done.returncode == 0, done.stdout + done.stderr  # a skipped reply is no failure
    *replies, summary = done.stdout.splitlines()
    held = [line for line in replies if ": held, " in line]
    no_head = [line for line in replies if ": skipped, the head it was made under" in line]
    compaction = [line for line in replies if ": skipped, its request carries a server" in line]
    assert len(held) + len(no_head) + len(compaction) == len(replies)
    assert no_head
    assert compaction
    assert summary == (
        f"{len(held)} of {len(replies)} replies held, {len(no_head) + len(compaction)} skipped "
        f"(not replayed: {len(no_head)} made under a head not in the store, {len(compaction)} "
        "carrying a server compaction only the API can judge)."
    )


def test_dry_run_prints_each_request_with_error_mode_and_sends_nothing(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    assert cli("run", "--db", path, "--agent", "ada", stdin="hello\nagain\n").returncode == 0

    done = cli("verify", path, "--agent", "ada", "--dry-run")

    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(printed) == 2
    for item in printed:
        binding = item["request"]["thinking"]["block_binding"]
        assert binding == {"prefix_mismatch_behavior": "error"}


def _forge_signature(path: Path, reply_id: str) -> None:
    """Change a stored reply's thinking signature, and its stamp's own digest to match (as a
    store whose stamps were written wrongly would have it): the compiler, on a model that runs
    no prefix check, believes the block is as it was made and sends it."""
    store = SQLiteStore(path)
    sidecar = open_sidecar(sidecar_path(path), create=False)
    assert sidecar is not None
    cm = ContextManager.open(store, namespace="ada", reasoning=ReasoningCapture(sidecar))
    reply = cm.get_message(reply_id)
    index = next(i for i, b in enumerate(reply.content) if is_thinking(b))
    resolved = cm.resolve_reasoning(reply.content[index])
    assert resolved is not None
    wire = block_to_wire(resolved)
    wire["signature"] = wire["signature"][:-8] + "AAAAAAAA"
    forged = own_digest(block_bytes(wire))
    sidecar.close()
    store.close()
    db = sqlite3.connect(path)
    with db:
        content, stamp = db.execute(
            "SELECT content, stamp FROM messages WHERE id = ?", (reply_id,)
        ).fetchone()
        blocks = json.loads(content)
        blocks[index]["signature"] = wire["signature"]
        stamped = json.loads(stamp)
        stamped["own"][str(index)] = forged
        db.execute(
            "UPDATE messages SET content = ?, stamp = ? WHERE id = ?",
            (json.dumps(blocks), json.dumps(stamped), reply_id),
        )
    db.close()


def test_verify_names_the_path_of_an_edited_reply_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    model = "claude-mythos-5-1"  # runs no prefix check: the compiler reads the stamp's own digest
    ran = cli("run", "--db", path, "--agent", "ada", "--model", model, stdin="hello\nagain\n")
    assert ran.returncode == 0, ran.stderr
    assert cli("verify", path, "--agent", "ada").returncode == 0
    db = sqlite3.connect(path)
    first = db.execute("SELECT id FROM messages WHERE role = 'assistant' ORDER BY seq").fetchone()
    db.close()
    _forge_signature(path, first[0])

    done = cli("verify", path, "--agent", "ada")

    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{first[0]}: REFUSED at messages.1.content.0: ")
    assert "Invalid `signature`" in lines[0]
    assert done.stdout.splitlines()[-1] == "0 of 2 replies held."


def test_verify_of_a_missing_agent_or_postgres_uri_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    assert cli("run", "--db", path, "--agent", "ada", stdin="hello\n").returncode == 0
    assert cli("verify", path, "--agent", "bob").returncode == 2
    assert cli("verify", "postgresql://nowhere/x", "--agent", "ada").returncode == 2


def test_verify_predicts_the_open_rounds_reply_it_must_send_as_recorded(tmp_path: Path) -> None:
    """A reply that called a tool, made under a window that had jumped: verify replays the cut
    after it (its round still open) on the whole branch, where the reply must still go out as
    recorded (provider rule 6) and its thinking fails the prefix check. The compiler says so
    (``CompileResult.put_back``); verify sends that request with ``drop_block`` and expects
    exactly that drop, instead of a refusal it reported as unpredicted."""
    path = tmp_path / "agent.db"
    asyncio.run(_windowed_tool_turns(path))

    done = cli("verify", path, "--agent", "ada")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "REFUSED" not in done.stdout
    assert "1 only in the open round's reply as recorded, predicted dropped" in done.stdout
    assert done.stdout.splitlines()[-1] == "6 of 6 replies held."


async def _windowed_tool_turns(path: Path) -> None:
    tool = {"name": "read_log", "description": "Read.", "input_schema": {"type": "object"}}
    head = Head(
        model="claude-opus-5-5",
        system="You are Ada.",
        tools=[tool],
        settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
    )
    sim = Simulator(script=_long_replies)
    runtime = Runtime(sim.client(), SQLiteStore(path), retry=FAST_RETRY)
    ada = runtime.register(
        Agent("ada", head, tools={"read_log": lambda _: "all quiet"}, strategy=Window(300))
    )
    for n in range(4):
        await ada.run_turn(f"Turn {n}: " + "please go on " * 10)
    await ada.run_turn("Turn 4: please use tool")
    assert invalid_calls(sim) == []
    ada.context.store.close()


def _long_replies(request: dict[str, Any]) -> list[Any]:
    """Think, then call ``read_log`` when asked to use a tool, else answer at length (so a
    window of 300 tokens jumps within a few turns)."""
    last = request["messages"][-1]["content"]
    blocks = last if isinstance(last, list) else [{"type": "text", "text": last}]
    thought = {"type": "thinking", "thinking": f"step {len(request['messages'])}"}
    if any(b.get("type") == "tool_result" for b in blocks):
        return [thought, {"type": "text", "text": "The log is fine."}]
    if any("use tool" in b.get("text", "") for b in blocks):
        return [thought, {"type": "tool_use", "name": "read_log", "input": {}}]
    return [thought, {"type": "text", "text": "Noted. " + "words " * 30}]
