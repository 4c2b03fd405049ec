"""``context-manager run``: an interactive resident agent over stdin, one line per turn.

Everything is stored as it happens (each message is its own durable write), so Ctrl-C loses
nothing: the session exits 130 and the next ``run`` on the same file finishes an interrupted turn
and continues the same agent on the same branch. The head (``/system``, ``/tools``) lasts for the
session; a new run starts from the default head.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
from collections.abc import Callable
from typing import Any, TextIO

import anthropic
import attrs

from context_manager._compile._strategies import Compact, Fold
from context_manager._manager import ContextManager
from context_manager._model._errors import BranchExists, CommandLineError, ContextManagerError
from context_manager._model._head import Head
from context_manager._model._messages import REASONING_LOSS_KIND, MessageId, StoredMessage
from context_manager._model._results import ThinkingStrip
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._protocol import Store
from context_manager.runtime import Agent, Runtime, check_agent_name
from context_manager.simulator import Simulator

from ._db import (
    EMPTY_FILE,
    NEW_FILE,
    CliError,
    check_sidecar,
    check_writable,
    is_postgres,
    open_for_writing,
    open_postgres,
    open_sidecar,
    sidecar_path,
    url_for_humans,
)
from ._follow import Follower
from ._format import BOLD_YELLOW, clean, fold_summary, format_message, plural, style
from ._otel import tracing_for

DEFAULT_MODEL = "claude-opus-5-5"
"""The model when ``--model`` is not given (the one the SPEC's examples use)."""
API_KEY_VARIABLE = "ANTHROPIC_API_KEY"
"""Set: the real API (the SDK reads the key itself). Unset: the local simulator."""
SETTINGS = {"max_tokens": 2048, "thinking": {"type": "adaptive"}}
"""Thinking on, so replies carry signed reasoning for the context manager to keep valid."""
TIME_TOOL = {
    "name": "utc_time",
    "description": "The current date and time in UTC.",
    "input_schema": {"type": "object", "properties": {}},
}
"""The demo tool ``/tools`` adds to (and removes from) the head."""

HELP = """\
Type a message to run a turn. Commands:
  /fork NAME     branch at the current head and switch to it
  /switch NAME   switch to another branch
  /delete NAME   delete a branch other than the current one (its messages stay stored)
  /branches      list the branches (* marks the current one)
  /tools         add or remove the demo tool utc_time in the head
  /system TEXT   set the system text
  /fold          fold the branch into a summary now
  /compact       compact the branch on the server now (the last reply is kept)
  /notices       show the [reasoning] notices on this branch
  /help          show this
  /quit          leave (so does end of input; Ctrl-C too, exit 130)"""
COMMANDS = ", ".join(
    line.split("  ")[1].strip() for line in HELP.splitlines() if line.startswith("  /")
)
"""The commands ``HELP`` lists, for ``run --help``: "/fork NAME, /switch NAME, ..."."""


def utc_time(_: dict[str, Any]) -> str:
    """The demo tool."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def chat_script(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The simulator's answers in ``run``: echo the user; call ``utc_time`` when asked the time."""
    last = [m for m in request["messages"] if m["role"] != "system"][-1]
    content = last["content"]
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if results:
        said = results[0].get("content")
        text = said if isinstance(said, str) else "(no text)"
        return [
            {"type": "thinking", "thinking": "The tool answered."},
            {"type": "text", "text": f"The tool says: {text}"},
        ]
    words = " ".join(
        str(b.get("text", ""))
        for b in blocks
        if b.get("type") == "text" and not str(b.get("text", "")).startswith("[")
    )
    tools = {t.get("name") for t in request.get("tools", [])}
    if TIME_TOOL["name"] in tools and "time" in words.lower():
        return [
            {"type": "thinking", "thinking": "The user asks the time; I have a tool for that."},
            {"type": "tool_use", "name": TIME_TOOL["name"], "input": {}},
        ]
    snippet = " ".join(words.split())[:60]
    return [
        {"type": "thinking", "thinking": f"The user wrote: {snippet}"},
        {"type": "text", "text": f"You said: {snippet}"},
    ]


def make_client(environ: dict[str, str]) -> tuple[anthropic.AsyncAnthropic, str]:
    """The real API client when the key is set, else the simulator's; and which one it is."""

    if environ.get(API_KEY_VARIABLE):
        return anthropic.AsyncAnthropic(), f"the Anthropic API ({API_KEY_VARIABLE} is set)"
    return Simulator(script=chat_script).client(), f"the local simulator (no {API_KEY_VARIABLE})"


def force_fold(cm: ContextManager, head: Head) -> tuple[StoredMessage | None, ThinkingStrip | None]:
    """Fold the current branch into a summary now: one committing compile under a ``Fold``
    whose trigger any history exceeds. The request is not sent; the strategy is restored.

    Returns:
        The stored summary (``None``: nothing to fold) and the compile's strip.
    """
    _, before = cm.branch_head()
    kept = cm.strategy
    cm.strategy = Fold(fold_summary, trigger_tokens=1)
    try:
        result = cm.compile(head)
    finally:
        cm.strategy = kept
    summaries = [m for m in cm.messages(since=before) if m.metadata.kind == "summary"]
    return (summaries[-1] if summaries else None), result.thinking_strip


async def force_compaction(cm: ContextManager, client: Any) -> MessageId | None:
    """Compact the current branch on the server now (``cm.compact_async``), under the
    context's ``Compact`` strategy or, with another strategy, a ``Compact`` used once."""
    kept = cm.strategy
    if not isinstance(kept, Compact):
        cm.strategy = Compact(1)
    try:
        return await cm.compact_async(client)
    finally:
        if not isinstance(kept, Compact):
            cm.strategy = kept


class Session:
    """One ``run`` session: reads lines, runs turns and commands, prints what is stored."""

    def __init__(
        self, agent: Agent, runner: asyncio.Runner, out: TextIO, *, color: bool, client: Any = None
    ) -> None:

        self._failures = (anthropic.APIError, ContextManagerError)
        """What a failed turn raises: reported in one line, and the session goes on."""
        self.failed = False
        """Whether a turn (or the resumed one) failed: a run that is not interactive exits 1."""
        self.agent = agent
        self.client = client
        """The session's SDK client (``/compact`` sends its request through it)."""
        self.runner = runner
        self.out = out
        self.color = color
        self.follow = Follower(agent.context, out, color=color)
        self._commands: dict[str, Callable[[str], None]] = {
            "fork": self._fork,
            "switch": self._switch,
            "delete": self._delete,
            "branches": self._branches,
            "tools": self._tools,
            "system": self._system,
            "fold": self._fold,
            "compact": self._compact,
            "notices": self._notices,
            "help": lambda _: self.say(HELP),
        }

    def say(self, text: str) -> None:
        print(text, file=self.out)
        self.out.flush()

    def problem(self, text: str) -> None:
        """A command's error: one line, the session goes on."""
        self.say(style(f"! {clean(text)}", BOLD_YELLOW, self.color))

    def handle(self, line: str) -> bool:
        """Run one input line; returns ``False`` when the session should end."""
        text = line.strip()
        if not text:
            return True
        if not text.startswith("/"):
            self.turn(text)
            return True
        name, _, rest = text[1:].partition(" ")
        if name in ("quit", "exit"):
            return False
        command = self._commands.get(name)
        if command is None:
            known = ", ".join(f"/{c}" for c in [*self._commands, "quit"])
            self.problem(f"unknown command /{name}; known: {known}")
            return True
        try:
            command(rest.strip())
        except (ContextManagerError, ValueError) as err:
            self.problem(str(err))
        return True

    def turn(self, text: str) -> None:
        running = self.agent.run_turn(text)
        try:
            self.runner.run(running)
        except self._failures as err:
            self.failed = True
            self.follow.show_new()
            self.problem(f"the turn failed: {err}")
            return
        finally:
            running.close()  # a Ctrl-C before it started: closed, never "never awaited"
        self.follow.show_new()

    def stop(self) -> Stopped | None:
        """At Ctrl-C: print what the turn stored; ``Stopped`` when no turn was left unfinished
        (the Ctrl-C cut nothing), ``None`` when the next run has a turn to finish."""
        self.follow.show_new()
        return None if self.agent.has_unfinished_turn() else Stopped()

    def resume(self) -> None:
        """Finish a turn a crash or Ctrl-C interrupted last time, if there is one."""
        resuming = self.agent.resume_turn()
        try:
            result = self.runner.run(resuming)
        except self._failures as err:
            self.failed = True
            self.problem(f"could not finish the interrupted turn: {err}")
            return
        finally:
            resuming.close()
        if result is not None:
            self.say("(finishing the turn interrupted last time)")
            self.follow.show_new()

    # commands
    def _fork(self, name: str) -> None:
        if not name:
            raise CommandLineError("usage: /fork NAME")
        try:
            self.agent.context.fork(name)
        except BranchExists as err:
            raise CommandLineError(
                f"branch {name!r} already exists; /switch {name} goes to it, or pick another "
                f"name (/delete {name} deletes it, from another branch)"
            ) from err
        self.say(f"forked: now on branch {name!r}")

    def _delete(self, name: str) -> None:
        if not name:
            raise CommandLineError("usage: /delete NAME")
        self.agent.context.delete_branch(name)
        self.say(f"deleted branch {name!r} (its messages stay stored; the name is free again)")

    def _switch(self, name: str) -> None:
        if not name:
            raise CommandLineError("usage: /switch NAME")
        self.agent.context.switch_branch(name)
        self.follow.catch_up()
        self.say(f"now on branch {name!r}")

    def _branches(self, _: str) -> None:
        current = self.agent.context.current_branch().name
        for ref in self.agent.context.list_branches():
            self.say(f"{'*' if ref.name == current else ' '} {clean(ref.name)}")

    def _tools(self, _: str) -> None:
        head = self.agent.head
        name = TIME_TOOL["name"]
        if any(t.get("name") == name for t in head.tools):
            self.agent.head = attrs.evolve(
                head, tools=[t for t in head.tools if t.get("name") != name]
            )
            self.say(f"tool {name} removed from the head")
        else:
            self.agent.head = attrs.evolve(head, tools=[*head.tools, TIME_TOOL])
            self.say(f"tool {name} added to the head (ask for the time)")

    def _system(self, text: str) -> None:
        if not text:
            raise CommandLineError("usage: /system TEXT")
        self.agent.head = attrs.evolve(self.agent.head, system=text)
        self.say("system text set")

    def _fold(self, _: str) -> None:
        summary, strip = force_fold(self.agent.context, self.agent.head)
        self.follow.show_new()
        if summary is None:
            self.say("nothing to fold")
            return
        lost = len(strip.replies) if strip is not None else 0
        self.say(
            f"folded into summary #{summary.sequence}; the reasoning of {plural(lost, 'reply')} "
            "left out (a fold between turns is not told to the agent)"
        )

    def _compact(self, _: str) -> None:
        try:
            stored = self.runner.run(force_compaction(self.agent.context, self.client))
        except anthropic.APIError as err:
            self.problem(f"compaction refused: {err}")
            return
        self.follow.show_new()
        if stored is None:
            self.say("nothing to compact now (run a turn first; no block came back)")
            return
        block = self.agent.context.get_message(stored)
        self.say(
            f"compacted into block #{block.sequence} (covers up to "
            f"#{block.metadata.extra.get('covers_upto')}); the last reply keeps its reasoning"
        )

    def _notices(self, _: str) -> None:
        found = self.agent.context.messages(kind=REASONING_LOSS_KIND)
        for message in found:
            for line in format_message(message, color=self.color):
                self.say(line)
        if not found:
            self.say("no [reasoning] notices on this branch")


_NEW_DATABASE = {
    NEW_FILE: " (a new database)",
    EMPTY_FILE: " (a new database: the file was empty)",
}
"""How the start line tells that ``run`` made a new database (an empty file is one, as in SQLite;
``transcript`` says such a file holds no agents yet)."""


class Stopped(KeyboardInterrupt):
    """Ctrl-C that cut no turn (the last one had finished): said as "stopped", not
    "interrupted", and still exit 130."""


def run_session(args: argparse.Namespace, out: TextIO, stdin: TextIO, *, color: bool) -> int:
    """The ``run`` command. Returns 0 at ``/quit`` or end of input, 130 at Ctrl-C, and 1 at the
    end of a run that is not interactive (stdin not a terminal) in which a turn failed.

    Raises:
        CliError: a bad agent name, or an unusable database or sidecar.
    """
    postgres = is_postgres(args.db)
    made = None
    if not postgres:
        made = check_writable(args.db)
        check_sidecar(sidecar_path(args.db))
    try:
        name = check_agent_name(args.agent)
    except ValueError as err:
        raise CliError(str(err)) from err
    store: Store = open_postgres(args.db, writing=True) if postgres else open_for_writing(args.db)
    try:
        # many hosts share a PostgreSQL transcript: its reasoning text stays in it, inline
        sidecar = None if postgres else open_sidecar(sidecar_path(args.db), create=True)
    except BaseException:
        store.close()
        raise
    tracing = None
    try:
        tracing = tracing_for(getattr(args, "otel", None), os.environ)
        client, which = make_client(dict(os.environ))
        model = args.model or DEFAULT_MODEL
        head = Head(model=model, system=f"You are {name}, a resident agent.", settings=SETTINGS)
        runtime = Runtime(
            client,
            store,
            tracer_provider=tracing.tracer_provider,
            meter_provider=tracing.meter_provider,
        )
        agent = runtime.register(
            Agent(
                name,
                head,
                tools={"utc_time": utc_time},
                reasoning=False if sidecar is None else ReasoningCapture(sidecar),
            )
        )
        cm = agent.context
        print(f"Using {which}; model {model}.", file=out)
        where = url_for_humans(args.db) if postgres else args.db
        new = _NEW_DATABASE.get(made or "", "")
        print(
            f"Agent {name!r} on branch {cm.current_branch().name!r} in {where}{new}. "
            "/help lists the commands.",
            file=out,
        )
        with asyncio.Runner() as runner:
            session = Session(agent, runner, out, color=color, client=client)
            try:
                session.resume()
                while True:
                    if stdin.isatty():
                        out.write("> ")
                        out.flush()
                    line = stdin.readline()
                    if not line or not session.handle(line):
                        break
            except KeyboardInterrupt:
                stopped = session.stop()
                if stopped is not None:
                    raise stopped from None
                raise
            runner.run(client.close())  # not after Ctrl-C: the process is ending anyway
        return 1 if session.failed and not stdin.isatty() else 0
    finally:
        if tracing is not None:
            tracing.close()  # the spans still batched are exported now
        if sidecar is not None:
            sidecar.close()
        store.close()
