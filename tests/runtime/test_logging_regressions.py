"""Regressions of issue 17, item 10: a library that embeds the runtime never prints (SPEC 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOST = textwrap.dedent(
    """
    import asyncio, json, logging, sys
    import attrs
    sys.path.insert(0, {tests!r})
    from helpers import GREP_TOOL, READ_LOG_TOOL, THINKING_HEAD, calling_script, runtime_on
    from context_manager.runtime import Agent
    from context_manager.simulator import Simulator

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.events = []
        def emit(self, record):
            if record.name.startswith("context_manager"):
                fields = getattr(record, "fields", {{}})
                self.events.append({{"event": record.getMessage(), **fields}})

    keep = Keep()
    if sys.argv[1] == "configured":
        logging.basicConfig(level=logging.INFO, handlers=[keep])

    async def main():
        print("host: start")
        ada = runtime_on(Simulator(script=calling_script())).register(Agent("ada", THINKING_HEAD))
        await ada.run_turn("hello")
        print("host: first turn done")
        ada.head = attrs.evolve(ada.head, tools=[READ_LOG_TOOL, GREP_TOOL])
        async with ada.forked("side"):
            await ada.run_turn("on the side")
        print("host: end")

    asyncio.run(main())
    if keep.events:
        sys.stderr.write(json.dumps(keep.events, default=repr))
    """
)


def run_host(mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = HOST.format(tests=str(ROOT / "tests"))
    return subprocess.run(
        [sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=120, env=env
    )


def test_a_host_embedding_the_runtime_sees_only_its_own_prints_on_stdout() -> None:
    done = run_host("silent")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["host: start", "host: first turn done", "host: end"]
    assert "thinking_stripped" not in done.stderr
    assert "branch_forked" not in done.stderr


def test_a_host_that_configures_logging_at_info_sees_the_events_with_their_fields() -> None:
    done = run_host("configured")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["host: start", "host: first turn done", "host: end"]
    events = json.loads(done.stderr)
    stripped = [e for e in events if e["event"] == "thinking_stripped"]
    forked = [e for e in events if e["event"] == "branch_forked"]
    assert len(stripped) >= 1
    assert stripped[0]["namespace"] == "ada"
    assert stripped[0]["cause"] == "head"
    assert stripped[0]["changed"] == ["tools"]
    assert stripped[0]["replies"] == 1
    assert [(e["namespace"], e["branch"]) for e in forked] == [("ada", "side")]


# Issue 35: the simulator logs through its own stdlib-bridged logger, and a warning shown with
# nothing configured carries its fields and its note.

REFUSAL = textwrap.dedent(
    """
    import anthropic
    from context_manager.simulator import Simulator

    with Simulator().sync_client() as client:
        for model, text in (("claude-opus-55", "hi"), ("claude-opus-5-5", "  ")):
            try:
                client.beta.messages.create(
                    model=model, max_tokens=64, messages=[{"role": "user", "content": text}]
                )
            except anthropic.APIStatusError as err:
                print("host: refused", err.status_code)
    """
)

UNCONFIGURED_WARNINGS = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from helpers import THINKING_HEAD, calling_script, runtime_on
    from context_manager.runtime import Agent
    from context_manager.simulator import Simulator

    def broken(_):
        raise RuntimeError("disk on fire")

    async def main():
        runtime = runtime_on(Simulator(script=calling_script()))
        ada = runtime.register(Agent("ada", THINKING_HEAD, tools={{"read_log": broken}}))
        await ada.run_turn("please use tool")

    asyncio.run(main())
    """
)


def run_code(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )


def test_a_simulator_refusal_prints_nothing_on_stdout() -> None:
    done = run_code(REFUSAL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["host: refused 404", "host: refused 400"]
    assert "simulator_refused" not in done.stderr  # an info event: dropped unless asked for


def test_an_unconfigured_warning_shows_its_fields_and_its_note_on_stderr() -> None:
    done = run_code(UNCONFIGURED_WARNINGS.format(tests=str(ROOT / "tests")))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    (tool_failed,) = [line for line in lines if line.startswith("tool_failed")]
    assert "tool='read_log'" in tool_failed
    assert "disk on fire" in tool_failed
    (unconfigured,) = [line for line in lines if line.startswith("reasoning_unconfigured")]
    assert "agent='ada'" in unconfigured
    assert "no reasoning sidecar is configured" in unconfigured
