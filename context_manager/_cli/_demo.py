"""``context-manager demo``: a resident agent on SQLite against the simulator, scene by scene.

No API key, no network: the simulator answers from a scripted plan per scene and signs, verifies
and drops thinking like the real API. Each scene produces one or more SPEC 9 line forms; together
they produce all of them. Everything is stored as it happens in the database (and its sidecar).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import attrs

from context_manager._binding._drops import PlacedDrops
from context_manager._compile._strategies import Compact, Fold, Passthrough
from context_manager._model._content import TextBlock, ThinkingBlock
from context_manager._model._head import Head, ThinkingBinding
from context_manager._model._messages import REASONING_LOSS_KIND, MessageId, StoredMessage
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._reasoning._store import SQLiteReasoningStore
from context_manager._store._sqlite import SQLiteStore
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import (
    END_USER_MISMATCH,
    MODEL_MISMATCH,
    ORGANIZATION_MISMATCH,
    Simulator,
)

from ._db import CliError, check_sidecar, open_for_writing, open_sidecar, sidecar_path
from ._follow import Follower
from ._format import BOLD_YELLOW, CYAN, fold_summary, style
from ._tally import StripCounter, TallyingTeller, summary_lines

AGENT = "ada"
"""The demo's one agent (its namespace in the database)."""
MODEL = "claude-opus-5-5"
"""The demo's model: it runs the prefix check (provider rule 10) and takes mid-conversation
system messages (provider rule 16)."""
STRIPPING = ThinkingBinding(append_changes=False)
"""The first scenes' binding: a head change is not appended, so it strips (and every line form
appears)."""
APPENDING = ThinkingBinding()
"""The binding the host turns to: the same changes are appended and nothing is lost (SPEC 7b)."""
FORK = "imported"
"""The branch scene 4 forks and imports history onto; the demo ends on it."""


def _tool(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "description": description, "input_schema": {"type": "object"}}


READ_LOG = _tool("read_log", "Read the nightly build's log.")
ACTIVATE = _tool("activate_skill", "Load the search skill: adds its tools.")
GREP = _tool("grep", "Search the repository (from the search skill).")
HEAD = Head(
    model=MODEL,
    system="You are Ada, a careful build engineer.",
    tools=[READ_LOG],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
LONG_LOG = "\n".join(f"12:0{n} step {n}: compiling parser module {n}" for n in range(6))
"""What ``read_log`` returns in the fold scene (the fold is forced, so a few lines will do)."""

UNPLACEABLE_AT = "messages.99.content.0"
"""A drop report past every message sent: the provider's report cannot be placed."""
MALFORMED_AT = "content.0"
"""A drop report whose path is not ``messages.I.content.J`` at all."""


@attrs.frozen
class Step:
    """One planned model reply: its thinking, and text or a tool call."""

    think: str
    text: str | None = None
    tool: str | None = None


class ScriptedModel:
    """The simulator's script: answers each call with the next planned ``Step``."""

    def __init__(self) -> None:
        self._steps: deque[Step] = deque()

    def plan(self, steps: Iterable[Step]) -> None:
        self._steps.extend(steps)

    def __call__(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        step = self._steps.popleft() if self._steps else Step("Nothing left to do.", "Done.")
        blocks: list[dict[str, Any]] = [{"type": "thinking", "thinking": step.think}]
        if step.text:
            blocks.append({"type": "text", "text": step.text})
        if step.tool:
            blocks.append({"type": "tool_use", "name": step.tool, "input": {}})
        return blocks


class Demo:
    """The scenes, sharing one runtime, one agent and one simulator."""

    SCENES = 8

    def __init__(
        self, store: SQLiteStore, sidecar: SQLiteReasoningStore, out: TextIO, color: bool
    ) -> None:
        self.out = out
        self.color = color
        self.model = ScriptedModel()
        self.sim = Simulator(script=self.model)
        self.client = self.sim.client()
        self.teller = TallyingTeller(self._read, on_drops=self._heard_drops)
        self.runtime = Runtime(self.client, store, teller=self.teller)
        self.agent = self.runtime.register(
            Agent(
                AGENT,
                HEAD,
                tools={
                    "read_log": self._read_log,
                    "activate_skill": self._activate_skill,
                    "grep": lambda _: (
                        "3 matches: parser 2.4 reads the config key 'strict' as 'mode'"
                    ),
                },
                binding=STRIPPING,
                reasoning=ReasoningCapture(sidecar),
            )
        )
        self.strips = StripCounter()
        self.agent.context.on_thinking_strip(self.strips)
        self.follow = Follower(self.agent.context, out, color=color)
        self._log_hooks: deque[Any] = deque()
        self._scene = 0

    def _read(self, agent: str, message_id: MessageId) -> StoredMessage:
        if agent != self.agent.name:
            raise KeyError(f"agent {agent!r} is not in the demo")
        return self.agent.context.get_message(message_id)

    # output
    def heading(self, title: str, look_for: str) -> None:
        self._scene += 1
        print(file=self.out)
        print(
            style(f"== Scene {self._scene}/{self.SCENES}: {title}", CYAN, self.color), file=self.out
        )
        print(style(f"   Look for: {look_for}", CYAN, self.color), file=self.out)

    def _heard_drops(self, placed: PlacedDrops, line: str | None) -> None:
        if not (placed.placed_blocks or placed.unplaced_count):
            return
        self.follow.show_new()
        parts = []
        if placed.replies:
            where = ", ".join(f"{d.path} ({d.reason})" for d in placed.replies)
            parts.append(f"dropped {len(placed.replies)} block(s) on stored replies: {where}")
        if placed.unplaced:
            where = ", ".join(f"{d.path} ({d.why})" for d in placed.unplaced)
            parts.append(f"reported {len(placed.unplaced)} drop(s) that cannot be placed: {where}")
        told = "the agent will be told" if line else "the agent is told nothing"
        self.follow.note("provider", f"{'; '.join(parts)}; {told}")

    # tools
    def _read_log(self, _: dict[str, Any]) -> str:
        self.follow.show_new()
        hook = self._log_hooks.popleft() if self._log_hooks else None
        return str(hook()) if hook is not None else "12:04 parser 2.4 installed; build failed"

    def _activate_skill(self, _: dict[str, Any]) -> str:
        self.follow.show_new()
        self.agent.head = attrs.evolve(self.agent.head, tools=[*self.agent.head.tools, GREP])
        self.follow.note("tool", "activate_skill adds grep to the head's tools, mid-turn")
        return "search skill active: grep"

    # helpers
    async def turn(self, said: str, *steps: Step) -> tuple[MessageId, ...]:
        self.model.plan(steps)
        result = await self.agent.run_turn(said)
        self.follow.show_new()
        return result.replies

    def force_drop(self, replies: Iterable[MessageId], reason: str) -> None:
        """Make the next call's provider drop these replies' thinking (their signatures)."""
        wanted = set(self._signatures(replies))
        self.sim.force_drop(
            predicate=lambda i, j, block: block.get("signature") in wanted, reason=reason
        )

    def _signatures(self, replies: Iterable[MessageId]) -> Iterator[str]:
        for reply in replies:
            for block in self.agent.context.get_message(reply).content:
                if isinstance(block, ThinkingBlock) and block.signature:
                    yield block.signature

    # scenes
    async def run(self) -> None:
        await self.tool_change()
        await self.skill()
        await self.appended()
        folded = await self.fold()
        imported = await self.fork()
        calls = await self.drops(folded, imported)
        await self.unplaced(calls)
        await self.compaction()

    async def tool_change(self) -> None:
        self.heading(
            "a tool change between turns, appending off (ThinkingBinding(append_changes=False))",
            "the head form naming the newest reply lost, with its cause (tools changed)",
        )
        await self.turn(
            "The nightly build failed. What changed?",
            Step(
                "The failure started after the dependency bump.",
                "The lockfile moved parser to 2.4.",
            ),
        )
        self.agent.head = attrs.evolve(self.agent.head, tools=[READ_LOG, ACTIVATE])
        self.follow.note("host", "adds the tool activate_skill to the head between turns")
        await self.turn(
            "Pin parser back to 2.3 for now.",
            Step("Pinning is safe; the old config still parses.", "Pinned parser to 2.3."),
        )

    async def skill(self) -> None:
        self.heading(
            "a skill activation grows the tool menu mid-turn, appending off",
            "the head form with the this-turn clause, told at the next boundary; the open "
            "round's reply goes out as recorded and the provider's drop is told",
        )
        await self.turn(
            "Load the search skill and find what 2.4 changed.",
            Step("Check the log before loading anything.", tool="read_log"),
            Step("I need search; load the skill first.", tool="activate_skill"),
            Step("Now search for the config keys.", tool="grep"),
            Step("The match explains it.", "parser 2.4 renamed the config key 'strict' to 'mode'."),
        )

    async def appended(self) -> None:
        self.heading(
            "the same changes with appending on: appended, nothing lost",
            "head-change system messages (tool_removal, tool_addition) and no [reasoning] line; "
            "the skill's tool is called in the same turn",
        )
        self.agent.binding = self.agent.context.binding = APPENDING
        self.follow.note("host", "turns append-only head changes on (ThinkingBinding())")
        await self.turn(
            "Is the pin still in place?",
            Step("The pin from earlier still holds.", "Yes: parser is pinned to 2.3."),
        )
        self.agent.head = attrs.evolve(self.agent.head, tools=[READ_LOG, ACTIVATE])
        self.follow.note("host", "drops grep from the head between turns (appended, not stripped)")
        await self.turn(
            "Search again for the renamed key, please.",
            Step("grep is gone; load the skill again.", tool="activate_skill"),
            Step("grep is back in this turn.", tool="grep"),
            Step("Same finding as before.", "Still 'strict' renamed to 'mode' in parser 2.4."),
        )

    async def fold(self) -> MessageId:
        self.heading(
            "a fold forced mid-turn",
            "the count form for several replies, this turn's step among them",
        )

        def fold_now() -> str:
            self.agent.context.strategy = Fold(fold_summary, trigger_tokens=1)
            self.follow.note("host", "forces a fold before the next call, mid-turn")
            return LONG_LOG

        self._log_hooks.append(fold_now)
        replies = await self.turn(
            "Read the whole log and keep your notes short.",
            Step("The log will be long.", tool="read_log"),
            Step("Only the parser steps matter.", "Only the parser steps failed; the rest passed."),
        )
        self.agent.context.strategy = Passthrough()
        return replies[-1]

    async def fork(self) -> MessageId:
        self.heading(
            "a fork whose first compile meets imported history",
            "left out, not told between turns: main compiled before the fork",
        )
        cm = self.agent.context
        cm.fork(FORK)
        self.follow.note(
            "host", f"forks branch {FORK!r} and imports two replies from another system"
        )
        cm.add_message("user", "(imported) What did the incident review decide?")
        cm.add_message(
            "assistant",
            [
                ThinkingBlock("", "EqQBimportedSignatureA1"),
                TextBlock("Roll forward with the fixed config."),
            ],
        )
        cm.add_message("user", "(imported) Who owns the fix?")
        cm.add_message(
            "assistant",
            [
                ThinkingBlock("", "EqQBimportedSignatureB2"),
                TextBlock("The build team owns the fix."),
            ],
        )
        before = dict(self.strips.blocks)
        replies = await self.turn(
            "Given the review, what should we do next?",
            Step("The review says roll forward.", "Unpin parser and apply the fixed config."),
        )
        left_out = sum(self.strips.blocks.values()) - sum(before.values())
        self.follow.note(
            "compiler",
            f"left out {left_out} thinking block(s) of the imported replies (no stamp: no "
            "compile here sent them); nothing told: main compiled before the fork",
        )
        return replies[-1]

    async def drops(self, folded: MessageId, imported: MessageId) -> tuple[MessageId, ...]:
        self.heading(
            "provider drops over several calls",
            "one incident: told when it opens (one reply), told again when it grows "
            "(several), silent when it ends",
        )
        self.force_drop([imported], ORGANIZATION_MISMATCH)
        self.follow.note("host", "the provider will drop one reply's reasoning (organization)")

        def grow() -> str:
            step = [m for m in self.agent.context.messages() if m.role == "assistant"][-1]
            self.force_drop([folded, step.id], END_USER_MISMATCH)
            self.follow.note(
                "host",
                "the next call will drop two replies' reasoning, an older one and this turn's "
                "first step (end user)",
            )
            return "12:04 parser 2.4 installed"

        self._log_hooks.append(grow)
        return await self.turn(
            "Check the log twice while the keys rotate.",
            Step("First look.", tool="read_log"),
            Step("Second look.", tool="read_log"),
            Step("Both looks agree.", "The log is unchanged: parser 2.4 is the cause."),
        )

    async def unplaced(self, earlier: tuple[MessageId, ...]) -> None:
        self.heading(
            "drops some of which cannot be placed",
            "nothing told for a report that matches no block; then the at-least form",
        )
        report = {"type": "thinking_dropped", "reason": "prefix_binding_mismatch"}
        self.sim.malformed_transformations_next([{**report, "path": UNPLACEABLE_AT}])
        self.follow.note(
            "host", f"the provider will report a drop at {UNPLACEABLE_AT}, past the request"
        )

        def mixed() -> str:
            self.force_drop(earlier[1:2], MODEL_MISMATCH)
            self.sim.malformed_transformations_next([{**report, "path": MALFORMED_AT}])
            self.follow.note("host", "the next call drops real blocks beside a malformed report")
            return "12:04 parser 2.4 installed"

        self._log_hooks.append(mixed)
        await self.turn(
            "One last look at the log, please.",
            Step("Last look.", tool="read_log"),
            Step("Nothing new.", "Nothing new in the log."),
        )

    async def compaction(self) -> None:
        self.heading(
            "a long agent compacts on the server (Compact)",
            "a compaction marker, then a turn whose [reasoning] count is zero: the kept reply's "
            "thinking is still sent after the block",
        )
        cm = self.agent.context
        cm.strategy = Compact(trigger_tokens=1)
        self.follow.note("host", "keeps the agent inside its window with server compaction")
        kept = await self.turn(
            "Write up the incident so far.",
            Step("Keep the write-up to the cause and the fix.", "parser 2.4 renamed a key; fixed."),
        )
        lines = len(cm.messages(kind=REASONING_LOSS_KIND))
        cm.strategy = Passthrough()  # one compaction is enough for the scene
        await self.turn(
            "What is left to do?",
            Step("Only the release note is left.", "Write the release note."),
        )
        sent = str(self.sim.calls[-1].request["messages"])
        still = sum(1 for signature in self._signatures(kept[-1:]) if signature in sent)
        told = len(cm.messages(kind=REASONING_LOSS_KIND)) - lines
        self.follow.note(
            "provider",
            f"the call after the block sent the kept reply's thinking ({still} block, valid); "
            f"[reasoning] lines this turn: {told}",
        )

    def summary(self) -> None:
        print(file=self.out)
        print(style("== Summary", CYAN, self.color), file=self.out)
        for line in summary_lines(self.teller, self.strips):
            print(f"   {line}".rstrip(), file=self.out)


@contextlib.contextmanager
def _database(db: str | None) -> Iterator[tuple[Path, bool]]:
    if db is not None:
        yield Path(db), True
        return
    with tempfile.TemporaryDirectory(prefix="context-manager-demo-") as scratch:
        yield Path(scratch) / "demo.db", False


def run_demo(
    args: argparse.Namespace, out: TextIO, *, color: bool, removed_when: str | None = None
) -> int:
    """Run every scene, print the transcript as it goes and a summary; returns 0.

    ``removed_when``: ``args.db`` is a temporary file that outlives the scenes until this
    happens (``demo --serve`` without ``--db``: "the console stops"); the closing lines say so.

    Raises:
        CliError: ``--db`` is unusable, or already holds the demo's agent (an earlier demo, or
            ``run --agent ada``).
    """
    with _database(args.db) as (path, kept):
        check_sidecar(sidecar_path(path))  # both files are checked before either is written
        store = open_for_writing(path)
        try:
            if AGENT in store.namespaces():  # an earlier demo, or `run --agent ada`
                raise CliError(
                    f"{path}: already holds an agent {AGENT!r} (from an earlier demo or from "
                    f"`run --agent {AGENT}`), and the demo starts its own agent {AGENT!r}; pass "
                    "a new --db path"
                )
            sidecar = open_sidecar(sidecar_path(path), create=True)
            assert sidecar is not None
            try:
                print(
                    style("context-manager demo", BOLD_YELLOW, color)
                    + f": agent {AGENT!r} on SQLite ({path}) against the local simulator; "
                    "no API key, no network.",
                    file=out,
                )
                demo = Demo(store, sidecar, out, color)
                asyncio.run(_play(demo))
                demo.summary()
            finally:
                sidecar.close()
        finally:
            store.close()
        print(file=out)
        _closing(path, kept, removed_when, out)
    return 0


def _closing(path: Path, kept: bool, removed_when: str | None, out: TextIO) -> None:
    """Where the transcript is, for how long, and how to read it."""
    if not kept:
        print("The transcript was kept in a temporary file; pass --db PATH to keep it.", file=out)
        return
    if removed_when is None:
        print(f"The transcript is kept in {path}. Read it with:", file=out)
    else:
        print(
            f"The transcript is in a temporary file, {path}, removed when {removed_when} (pass "
            "--db PATH to keep it). Until then, read it with:",
            file=out,
        )
    print(f"  context-manager transcript {path} --branch {FORK}", file=out)
    print(f"  context-manager transcript {path} --kind reasoning-loss --json", file=out)
    print(f"  context-manager transcript {path} --reasoning", file=out)


async def _play(demo: Demo) -> None:
    try:
        await demo.run()
    finally:
        await demo.client.close()
