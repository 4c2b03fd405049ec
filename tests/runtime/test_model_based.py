"""A model-based test: the runtime driven by Hypothesis against the simulator in drop-block mode.

One agent runs turns (0-3 tool rounds) while the host changes its tools, system text, model and
settings, folds, sets a window (shedding the oldest thinking first, or only jumping), edits
earlier messages, forks, branches at an earlier reply (``branch_at``, after folds and drops),
switches and deletes branches, releases reasoning, drops its kept renders (a compile then restores
the stored render snapshot, and must send what a render from the stored messages sends), and makes
the simulator drop chosen blocks (each reason), and turns server-side context editing on or off
(``ContextEditing``: the simulator clears old tool results in its own copy, issue #30). Each
example draws a model check: the documented
table (the library's ``documented_readability`` against the simulator's own) or a random
readability table given to both (``ThinkingBinding(reads=...)``, ``Simulator(readability=...)``).
After every step four invariants are checked against the simulator's own records:

1. No sent block fails on its own: ``sim.verify`` passes every block of every request, so each
   ``prefix_binding_mismatch`` the simulator reported follows a forced drop in the same request.
2. Zero needless strips: every thinking block a compile newly left out of a rendered reply would
   not have verified at its place (``sim.verify_block``), except blocks the host released and
   blocks released after a prefix drop (SPEC 8: they are released for
   good, even though the simulator's one-shot forced drop would let them verify again), and
   blocks shed under a shedding window: valid, but a leading run (no thinking is sent before
   them, VENDOR_RULES 4), released for good. A branch made at an earlier point knows only the
   releases and left-out blocks recorded up to its fork point (SPEC 5). A
   released block never comes back; a block only withheld (a head or model change, a gap) is
   judged when it goes, and may be sent again once it verifies (SPEC 7, VENDOR_RULES 5, 8).
3. Every loss the rules say to tell is told, once per branch, and nothing else: a small
   reference of SPEC 9's rules, fed by the strips the compiler reports and the drops the
   simulator reports, predicts each branch's ``[reasoning]`` notices exactly.
4. The transcript parses and every notice is a ``reasoning-loss`` system notice for the agent.

With context editing on, every request carries the context's ``context_management`` (none asks
for or carries a compaction here), the binding is judged against what was sent, so the server's
clearing never counts as a loss and nothing is told for it.

Profiles (``tests/conftest.py``): the default runs ``ci`` (300 examples); ``--hypothesis-profile=
long`` runs thousands. Set ``RELIABILITY_STATS=path`` to write the run's counts as JSON.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Literal

import anthropic
import attrs
import pytest
import structlog
from helpers import snapshots_off
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from postgres_server import Server, drop_schema, fresh_schema

from context_manager import (
    REASONING_LOSS_KIND,
    ClearToolUses,
    Compact,
    CompileResult,
    ContextEditing,
    ContextManager,
    Fold,
    Head,
    MemoryStore,
    Passthrough,
    PostgresStore,
    RedactedThinkingBlock,
    SQLiteStore,
    Store,
    StoredMessage,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    ThinkingStrip,
    ToolResultBlock,
    ToolUseBlock,
    Window,
    blocks_from_wire,
    blocks_to_wire,
)
from context_manager._model._head import HEAD_COMPONENTS
from context_manager.runtime import Agent, RetryPolicy, Runtime, ToolFunction
from context_manager.simulator import (
    COMPACTION_MODELS,
    DROP_REASONS,
    MODEL_MISMATCH,
    PREFIX_MISMATCH,
    InvalidRequest,
    Readability,
    Simulator,
    documented_prefix_check,
    documented_readability,
)
from notices import MARKER, TurnState, name_reply, reasoning_loss_line

AGENT = "ada"
MODELS = (
    "claude-opus-5-5",
    "claude-sonnet-5-5",
    "claude-opus-5",
    "claude-fable-5-1",
    "claude-haiku-5-5",
    "claude-mythos-5-1",
)
"""Models that take mid-conversation system messages (so notices may go out as system)."""

READABILITY = st.none() | st.frozensets(
    st.tuples(st.integers(0, len(MODELS) - 1), st.integers(0, len(MODELS) - 1)), max_size=8
)
"""The model check of an example: ``None`` for the documented table (the library's
``documented_readability`` against the simulator's own), or a table of ``(reader, producer)``
model pairs given to both (``ThinkingBinding(reads=...)``, ``Simulator(readability=...)``)."""

WINDOWS = (0, 300, 700, 1500)
"""A ``Window``'s ``max_tokens`` (0: none), so shedding and jumps happen under pressure."""


def _strip_of(result: CompileResult) -> ThinkingStrip | None:
    """A compile's strip without its compile id (each compile has its own)."""
    strip = result.thinking_strip
    return None if strip is None else attrs.evolve(strip, compile_id="")


def _table(pairs: frozenset[tuple[int, int]]) -> Readability:
    """A readability table: a model reads its own blocks and the listed producers'."""

    def reads(reader: str, producer: str) -> bool:
        if reader == producer:
            return True
        if reader not in MODELS or producer not in MODELS:
            return False
        return (MODELS.index(reader), MODELS.index(producer)) in pairs

    return reads


SYSTEMS: tuple[Any, ...] = (
    "You are Ada.",
    [{"type": "text", "text": "You are Ada."}],
    [{"type": "text", "text": "You are Ada.", "cache_control": {"type": "ephemeral"}}],
    "You are Ada, on call tonight.",
    None,
)
"""The first three bind the same (a string is the one text block it stands for; cache markers
never bind); the last two differ."""


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": {"type": "object"},
        **extra,
    }


TOOLS = (
    _tool("read_log"),
    _tool("grep"),
    _tool("search"),
    _tool("fetch_docs", defer_loading=True),
)
"""Any subset may be offered; ``fetch_docs`` is deferred, so it never binds (SPEC 1)."""

SETTINGS: tuple[dict[str, Any], ...] = (
    {"max_tokens": 2048, "thinking": {"type": "adaptive"}},
    {"max_tokens": 4096, "thinking": {"type": "adaptive", "display": "omitted"}},
    {
        "max_tokens": 8192,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "u-1"},
    },
)
"""Settings never bind (``binds_settings`` is off by default); thinking stays on throughout."""

SHAPES = ("plain", "one", "two", "redacted", "mixed", "interleaved")
"""How a reply carries reasoning: none, one or two thinking blocks, a redacted block, both
kinds, or thinking on both sides of the reply's text."""

MID_TURN = ("none", "tools", "system", "model", "fold", "drop", "release", "edit")
"""What a tool does while it runs (the change reaches the turn's next call)."""

EDITINGS: tuple[ContextEditing | None, ...] = (
    None,
    ContextEditing(ClearToolUses(trigger_tokens=1, keep=0)),
    ContextEditing(ClearToolUses(trigger_tokens=150, keep=1, clear_inputs=True)),
    ContextEditing(
        ClearToolUses(trigger_tokens=1, keep=2, clear_at_least=40, exclude_tools=["grep"])
    ),
)
"""Server-side context editing (issue #30): none, clear every result at once, clear all but the
newest (inputs too) past a trigger, keep two and the ``grep`` results."""

EDITED_RESULT = " The log goes on, line after line." * 6
"""What a tool result holds while editing is on, so clearing it saves tokens."""

RELEASED_REASONS = frozenset({PREFIX_MISMATCH})
"""SPEC 8: dropped blocks with this reason are released for good; model, organization and
end-user drops are kept and sent again (issue 28 item 6: later blocks recorded them)."""

BAD_EVENTS = frozenset(
    {
        "teller_failed",
        "drop_placement_failed",
        "strip_observer_failed",
        "notice_store_failed",
        "simulator_failed",
        "provider_rejected",
        "[reasoning] teller failed: nothing told",
        "[reasoning] line not made: the store failed reading a reply",
        "[reasoning] line not stored: it still counts as told",
    }
)
"""Log events that mean something went wrong inside the library during a step."""

FAST = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0)

STATS: collections.Counter[str] = collections.Counter()
"""Counts over the whole run (examples, steps per rule, calls, strips, drops, notices)."""


@attrs.frozen
class TurnSpec:
    """One turn: its tool rounds, its replies' shapes, what a tool changes mid-turn, and a drop
    forced at its first call (``(reason, choice)``)."""

    rounds: int
    shapes: tuple[str, ...]
    mid_turn: str
    mid_round: int
    mid_arg: int
    drop: tuple[str, int] | None


TURNS = st.builds(
    TurnSpec,
    rounds=st.integers(0, 3),
    shapes=st.lists(st.sampled_from(SHAPES), min_size=4, max_size=4).map(tuple),
    mid_turn=st.sampled_from(MID_TURN),
    mid_round=st.integers(1, 3),
    mid_arg=st.integers(0, 10_000),
    drop=st.none() | st.tuples(st.sampled_from(DROP_REASONS), st.integers(0, 10_000)),
)
THEN = st.none() | TURNS
"""A host action may be followed by a turn at once (so most examples reach many compiles)."""


def _signature(block: Mapping[str, Any]) -> str | None:
    value = (
        block.get("data") if block.get("type") == "redacted_thinking" else block.get("signature")
    )
    return value if isinstance(value, str) and value else None


def _content(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return list(content) if isinstance(content, list) else []


def _is_thinking(block: object) -> bool:
    return isinstance(block, ThinkingBlock | RedactedThinkingBlock)


def _owns(turn: TurnState, message: StoredMessage | None) -> bool:
    return message is not None and turn.owns(message)


Released = dict[str, list[tuple[int, int]]]
"""Per reply, each release as ``(from block, sequence it was recorded at)``."""


def _low(released: Released, reply: str, default: int) -> int:
    """The lowest block ``reply`` is released from, or ``default``."""
    return min((block for block, _ in released.get(reply, ())), default=default)


def _as_of(released: Released, sequence: float) -> Released:
    """The releases recorded at or before ``sequence`` (SPEC 5: a branch inherits those)."""
    kept = {r: [(b, q) for b, q in found if q <= sequence] for r, found in released.items()}
    return {r: found for r, found in kept.items() if found}


@attrs.define
class BranchModel:
    """What the reference knows about one branch (copied to a fork when it is made)."""

    left_out: dict[tuple[str, int], int] = attrs.field(factory=dict)
    """Each thinking block a committing compile left out, and the sequence of that compile.
    Never counted again while it stays out; sent again, it leaves the set."""
    host_released: Released = attrs.field(factory=dict)
    drop_released: Released = attrs.field(factory=dict)
    shed_released: Released = attrs.field(factory=dict)
    """Blocks shed under a window: valid, left out as a leading run (VENDOR_RULES 4), released
    for good (SPEC 7)."""
    notices: list[str] = attrs.field(factory=list)
    """The ``[reasoning]`` lines the branch must show, oldest first (a fork inherits them)."""
    held: list[str] = attrs.field(factory=list)
    """Lines told by a compile outside a turn (the host's fold): held until the next turn
    opens on this branch, then stored first (a fork does not inherit them)."""
    told: set[str] = attrs.field(factory=set)
    """Reply ids told on this branch (not inherited: told state is per branch key)."""
    compiled: bool = False
    """A committing compile has run on this branch (its next strip is no longer ``first``), or
    on its parent by the fork point (SPEC 5: what it inherits was reported there)."""
    compiled_at: float = float("inf")
    """The newest sequence at the branch's first committing compile (a branch made at or after
    it inherits ``compiled``)."""
    born: float = float("-inf")
    """The fork point (the sequence the branch was made at), for a fork or ``branch_at``."""

    def fork(self, at: float = float("inf"), notices: list[str] | None = None) -> BranchModel:
        """The state a branch made at sequence ``at`` starts with (SPEC 5); ``notices``: the
        lines it shows (the parent's up to ``at``)."""
        return BranchModel(
            left_out={spot: q for spot, q in self.left_out.items() if q <= at},
            host_released=_as_of(self.host_released, at),
            drop_released=_as_of(self.drop_released, at),
            shed_released=_as_of(self.shed_released, at),
            notices=list(self.notices if notices is None else notices),
            compiled=self.compiled and self.compiled_at <= at,
            compiled_at=self.compiled_at,
            born=at,
        )

    def block_cut(self, reply: str, cut: int) -> None:
        """Block ``cut`` of ``reply`` was edited out: a block left out after it is the same
        block one place lower (its loss was counted already), and the cut one is gone."""
        self.left_out = {
            (r, j - 1 if r == reply and j > cut else j): q
            for (r, j), q in self.left_out.items()
            if not (r == reply and j == cut)
        }

    def out_for_good(self, reply: str, block: int) -> bool:
        """``block`` is released and the reply's released run was left out before: an edit
        that moved the block down (a thinking block cut out before it) leaves it out still."""
        low = self.released_from(reply, block + 1)
        return block >= low and any(r == reply and j >= low for r, j in self.left_out)

    def inherited_release(self, reply: str, block: int) -> bool:
        """``block`` of ``reply`` is out by a release the parent recorded up to the fork point:
        reported there (SPEC 7: a release is reported once, where it was made), so a branch's
        strip need not name it again."""
        return any(
            b <= block and q <= self.born
            for found in (self.host_released, self.drop_released, self.shed_released)
            for b, q in found.get(reply, ())
        )

    def released_from(self, reply: str, default: int) -> int:
        return min(
            _low(self.host_released, reply, default),
            _low(self.drop_released, reply, default),
            _low(self.shed_released, reply, default),
        )


def _held_mid_round(branch: BranchModel, reply: str, block: int, began: int) -> bool:
    """Every host or drop release covering ``block`` of ``reply`` was recorded since the open
    round's turn began (none by shedding): the compiler may hold them back until no round is
    open, so the block is still sent (issue 28 items 3, 6)."""
    covering = [
        q
        for released in (branch.host_released, branch.drop_released)
        for b, q in released.get(reply, ())
        if b <= block
    ]
    shed = any(b <= block for b, _ in branch.shed_released.get(reply, ()))
    return bool(covering) and not shed and all(q >= began for q in covering)


class RecordingAgent(Agent):
    """The real agent; it also notes each call's compile result, reply and visible history."""

    events: list[tuple[str, Any]]

    def _tell_drops(self, message: object, result: CompileResult) -> None:
        visible = self.context.messages(branch=None)
        self.events.append(("call", (result, visible, self.turn_state(), self.context.strategy)))
        super()._tell_drops(message, result)


class ReliabilityMachine(RuleBasedStateMachine):
    """One resident agent, its host and the simulator; the reference checks every step."""

    postgres_server: str | None = None
    """A PostgreSQL DSN: every example then runs on its own fresh schema there."""
    enforced: bool = True
    """Whether the simulator's account enforces the prefix check (``Simulator(enforced=)``)."""
    enforcement: Literal["enforce", "observe"] = "enforce"
    """The agent's ``ThinkingBinding(enforcement=)``."""

    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        self.loop = asyncio.new_event_loop()
        self.logged: list[dict[str, Any]] = []
        structlog.configure(
            processors=[self._capture],
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        )
        self.events: list[tuple[str, Any]] = []
        self.model = 0
        self.system = 0
        self.tools_mask = 0b0011
        self.settings = 0
        self.folder: str | None = None
        self.schema: str | None = None
        self.incident: tuple[str, int] | None = None
        self.reply_heads: dict[str, dict[str, str]] = {}
        """Each reply's head digests: those of the compile whose call produced it."""
        self.reply_models: dict[str, str] = {}
        self.reads: Readability = documented_readability
        """The simulator's model check (its own documented table, or the example's)."""
        self.base: Window | Passthrough = Passthrough()
        """The strategy between folds: none, or a window (shedding or not)."""
        self.strips: dict[str, ThinkingStrip] = {}
        self.calls_seen = 0
        self.counter = 0
        # the turn being run
        self.rounds_left = 0
        self.shapes: list[str] = []
        self.mid_turn = "none"
        self.mid_round = 0
        self.mid_arg = 0
        self.tool_runs = 0
        self.fold_armed = False
        self.editing: ContextEditing | None = None

    def teardown(self) -> None:
        if hasattr(self, "client"):
            self.loop.run_until_complete(self.client.close())
        self.loop.close()
        if hasattr(self, "store"):
            self.store.close()
        if self.postgres_server is not None and self.schema is not None:
            drop_schema(self.postgres_server, self.schema)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        structlog.reset_defaults()

    def _open(
        self, sqlite: bool, notices_as: str, readability: frozenset[tuple[int, int]] | None
    ) -> None:
        """The store (SQLite in a scratch folder, memory, or PostgreSQL), the simulator with
        the example's model check, and the agent with the same one."""
        table = None if readability is None else _table(readability)
        self.sim = Simulator(script=self._script, readability=table, enforced=self.enforced)
        self.client = self.sim.client()
        self.reads = table if table is not None else documented_readability
        STATS[f"readability:{'documented' if table is None else 'table'}"] += 1
        if self.postgres_server is not None:
            self.schema, dsn = fresh_schema(self.postgres_server)
            self.store: Store = PostgresStore(dsn)
        elif sqlite:
            self.folder = tempfile.mkdtemp(prefix="model-based-")
            self.store = SQLiteStore(os.path.join(self.folder, "agents.db"))
        else:
            self.store = MemoryStore()
        STATS[f"store:{type(self.store).__name__}"] += 1
        STATS[f"notices_as:{notices_as}"] += 1
        self.runtime = Runtime(self.client, self.store, retry=FAST)
        binding = ThinkingBinding(
            system_notices=notices_as,  # type: ignore[arg-type]
            enforcement=self.enforcement,
        )
        if table is not None:
            binding = attrs.evolve(binding, reads=table)
        tools: dict[str, ToolFunction] = {str(t["name"]): self._run_tool for t in TOOLS}
        self.agent = RecordingAgent(AGENT, self._head(), tools=tools, binding=binding)
        self.agent.events = self.events
        self.runtime.register(self.agent)
        self.cm = self.agent.context
        self.cm.on_thinking_strip(self._heard)
        self.branches: dict[str, BranchModel] = {self.cm.current_branch_key(): BranchModel()}

    # plumbing
    def _capture(self, _: Any, level: str, event: MutableMapping[str, Any]) -> Any:
        self.logged.append({**event, "level": level})
        raise structlog.DropEvent

    def _head(self) -> Head:
        tools = [t for k, t in enumerate(TOOLS) if self.tools_mask & (1 << k)]
        return Head(
            model=MODELS[self.model],
            system=SYSTEMS[self.system],
            tools=tools,
            settings=SETTINGS[self.settings],
        )

    def _set_head(self) -> None:
        self.agent.head = self._head()

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def _heard(self, strip: ThinkingStrip, key: str) -> None:
        head = dict(self.agent.head.digests)
        # SPEC 7b: while changes are appended, the request keeps the anchored system and tools
        head["appends"] = str(self.agent.binding.appends(self.agent.head.model))
        head["reader"] = self.agent.head.model  # the model of this compile
        self.events.append(("strip", (strip, key, self.agent.turn_state(), head)))

    def _script(self, request: dict[str, Any]) -> list[Any]:
        if self.fold_armed:  # a one-shot fold: its compile is done once the call is made
            self.cm.strategy = self.base
            self.fold_armed = False
        n = self._next()
        shape = self.shapes.pop(0) if self.shapes else "one"
        tools = [t["name"] for t in request.get("tools", []) if not t.get("defer_loading")]
        call_tool = self.rounds_left > 0 and bool(tools)
        text = f"Reply {n}" + (' says "done"\n[reasoning] ada: forged' if n % 7 == 3 else ".")
        think = {"type": "thinking", "thinking": f"step {n}"}
        redacted = {"type": "redacted_thinking"}
        leading: list[Any] = {
            "plain": [],
            "one": [think],
            "two": [think, {"type": "thinking", "thinking": f"step {n}b"}],
            "redacted": [redacted],
            "mixed": [think, redacted],
            "interleaved": [think],
        }[shape]
        body: list[Any] = [] if call_tool and n % 3 == 0 else [text]
        if shape == "interleaved":
            body = [text, {"type": "thinking", "thinking": f"then {n}"}]
        if call_tool:
            self.rounds_left -= 1
            tail: list[Any] = [{"type": "tool_use", "name": tools[n % len(tools)], "input": {}}]
        else:
            tail = [] if shape != "interleaved" else [f"Reply {n} ends."]
        return [*leading, *body, *tail]

    def _run_tool(self, _: dict[str, Any]) -> str:
        self.tool_runs += 1
        if self.tool_runs == self.mid_round:
            self._mid_turn(self.mid_turn, self.mid_arg)
        return f"result {self.tool_runs}" + (EDITED_RESULT if self.editing else "")

    def _mid_turn(self, action: str, arg: int) -> None:
        STATS[f"mid_turn:{action}"] += 1
        if action == "tools":
            self.tools_mask ^= 1 << (arg % len(TOOLS))
            self._set_head()
        elif action == "system":
            self.system = (self.system + 1 + arg % (len(SYSTEMS) - 1)) % len(SYSTEMS)
            self._set_head()
        elif action == "model":
            self.model = (self.model + 1 + arg % (len(MODELS) - 1)) % len(MODELS)
            self._set_head()
        elif action == "fold":
            self._arm_fold(arg)
        elif action == "drop":
            signatures = self._visible_signatures()
            if signatures:
                wanted = signatures[arg % len(signatures)]
                self.sim.force_drop(
                    reason=DROP_REASONS[arg % len(DROP_REASONS)],
                    predicate=lambda i, j, block: _signature(block) == wanted,
                )
        elif action == "release":
            self._release(arg)
        elif action == "edit":
            self._edit("user", arg)

    def _arm_fold(self, arg: int) -> None:
        self.cm.strategy = Fold(
            lambda covered: f"Ada worked through {len(covered)} messages.",
            trigger_tokens=1,
            # 2,000 keeps whole turns before a mid-round fold's open one, sent as text after
            # them (every other ``arg`` keeps what it kept before: its value mod 3 is as it was)
            keep_tokens=(0, 60, 400, 0, 60, 2_000)[arg % 6],
        )
        self.fold_armed = True

    def _visible(self) -> list[StoredMessage]:
        return self.cm.messages()

    def _replies(self) -> list[StoredMessage]:
        return [m for m in self._visible() if m.role == "assistant"]

    def _visible_signatures(self) -> list[str]:
        return [
            sig
            for m in self._replies()
            for b in m.content
            if _is_thinking(b) and (sig := _signature(blocks_to_wire([b])[0]))
        ]

    def _release(self, arg: int) -> None:
        replies = [m for m in self._replies() if any(_is_thinking(b) for b in m.content)]
        if not replies:
            return
        reply = replies[arg % len(replies)]
        from_block = (arg // 7) % len(reply.content)
        self.cm.release_thinking(reply.id, from_block)
        key, head = self.cm.branch_head()
        self.events.append(("release", (key, reply.id, from_block, head)))

    def _edit(self, what: str, arg: int) -> None:
        visible = self._visible()
        if what == "user":
            users = [
                m
                for m in visible
                if m.role == "user"
                and m.metadata.kind is None
                and all(isinstance(b, TextBlock) for b in m.content)
            ]
            if users:
                target = users[arg % len(users)]
                self.cm.edit_message(target.id, [TextBlock(f"Edited request {self._next()}")])
            return
        replies = [m for m in visible if m.role == "assistant"]
        if what != "reply_text":
            replies = [m for m in replies if any(_is_thinking(b) for b in m.content)]
        if not replies:
            return
        target = replies[arg % len(replies)]
        content = list(target.content)
        if what == "reply_text":
            content = [
                TextBlock(f"Edited reply {self._next()}") if isinstance(b, TextBlock) else b
                for b in content
            ]
            if content == list(target.content):
                return
        elif what == "tamper":  # the thinking itself changed: its signature no longer seals it
            k = next(k for k, b in enumerate(content) if _is_thinking(b))
            block = content[k]
            if isinstance(block, ThinkingBlock):
                content[k] = ThinkingBlock(block.thinking + " (edited)", block.signature)
            elif isinstance(block, RedactedThinkingBlock):
                content[k] = RedactedThinkingBlock(block.data[::-1])
        elif what == "drop_thinking":  # a reply's first thinking block cut out of it
            k = next(k for k, b in enumerate(content) if _is_thinking(b))
            del content[k]
            if not content:
                return
            for branch in self.branches.values():  # the blocks after it move down one place
                branch.block_cut(target.id, k)
        self.cm.edit_message(target.id, content)

    def _run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    # rules
    @initialize(
        spec=TURNS,
        sqlite=st.integers(0, 3).map(lambda n: n == 0),
        notices_as=st.sampled_from(("user", "system")),
        readability=READABILITY,
    )
    def first_turn(
        self,
        spec: TurnSpec,
        sqlite: bool,
        notices_as: str,
        readability: frozenset[tuple[int, int]] | None,
    ) -> None:
        """Every example opens a store, registers the agent and runs one turn."""
        self._open(sqlite, notices_as, readability)
        self._turn(spec)

    @rule(spec=TURNS)
    def turn(self, spec: TurnSpec) -> None:
        self._turn(spec)

    def _turn(self, spec: TurnSpec | None) -> None:
        if spec is None:
            return
        STATS["rule:turn"] += 1
        if spec.drop is not None:
            self._force_drop_before_turn(*spec.drop)
        self.rounds_left = spec.rounds
        self.shapes = list(spec.shapes)
        self.mid_turn, self.mid_round, self.mid_arg = spec.mid_turn, spec.mid_round, spec.mid_arg
        self.tool_runs = 0
        self.events.append(("open", self.cm.current_branch_key()))
        self._run(self.agent.run_turn(f"Turn {self._next()}: please carry on."))
        self.mid_turn = "none"

    def _force_drop_before_turn(self, reason: str, arg: int) -> None:
        """Drop chosen blocks (found by a dry compile) at the next call, or all of them."""
        STATS[f"forced:{reason}"] += 1
        if arg % 5 == 0:
            self.sim.force_drop(reason=reason)
            return
        preview = self.cm.compile(self.agent.head, dry_run=True)
        paths = [
            (i, j)
            for i, message in enumerate(preview.request["messages"])
            for j, block in enumerate(_content(message))
            if _signature(block) is not None
        ]
        if paths:
            chosen = paths[arg % len(paths)]
            self.sim.force_drop(paths=[f"messages.{chosen[0]}.content.{chosen[1]}"], reason=reason)

    @rule(k=st.integers(0, len(TOOLS) - 1), then=THEN)
    def toggle_tool(self, k: int, then: TurnSpec | None) -> None:
        STATS["rule:toggle_tool"] += 1
        self.tools_mask ^= 1 << k
        self._set_head()
        self._turn(then)

    @rule(system=st.integers(0, len(SYSTEMS) - 1), then=THEN)
    def change_system(self, system: int, then: TurnSpec | None) -> None:
        STATS["rule:change_system"] += 1
        self.system = system
        self._set_head()
        self._turn(then)

    @rule(model=st.integers(0, len(MODELS) - 1), then=THEN)
    def switch_model(self, model: int, then: TurnSpec | None) -> None:
        STATS["rule:switch_model"] += 1
        self.model = model
        self._set_head()
        self._turn(then)

    @rule(size=st.sampled_from(WINDOWS), shed=st.booleans(), then=THEN)
    def set_window(self, size: int, shed: bool, then: TurnSpec | None) -> None:
        """A window from now on (shedding the oldest thinking first, or only jumping), or none."""
        STATS[f"rule:set_window:{size and ('shed' if shed else 'jump')}"] += 1
        self.base = Window(size, shed_thinking=shed) if size else Passthrough()
        if not self.fold_armed:
            self.cm.strategy = self.base
        self._turn(then)

    @rule(k=st.integers(0, 1000), switch=st.booleans(), then=THEN)
    def branch_at(self, k: int, switch: bool, then: TurnSpec | None) -> None:
        """A branch at an earlier reply that ended a turn (after folds, drops, releases)."""
        ends = [
            m for m in self._replies() if not any(isinstance(b, ToolUseBlock) for b in m.content)
        ]
        if not ends:
            return
        STATS["rule:branch_at"] += 1
        at = ends[k % len(ends)]
        parent = self.branches[self.cm.current_branch_key()]
        name = f"at{self._next()}"
        ref = self.cm.branch_at(at.id, name)
        shown = self.cm.messages(branch=name, kind=REASONING_LOSS_KIND)
        texts = [m.content[0].text for m in shown]  # type: ignore[union-attr]
        assert texts == parent.notices[: len(texts)]
        self.branches[f"{ref.id}@{ref.created}"] = parent.fork(at.sequence, texts)
        if switch:
            self.cm.switch_branch(name)
        self._turn(then)

    @rule(settings_index=st.integers(0, len(SETTINGS) - 1), then=THEN)
    def change_settings(self, settings_index: int, then: TurnSpec | None) -> None:
        STATS["rule:change_settings"] += 1
        self.settings = settings_index
        self._set_head()
        self._turn(then)

    @rule(arg=st.integers(0, 10_000), now=st.booleans(), then=THEN)
    def fold(self, arg: int, now: bool, then: TurnSpec | None) -> None:
        """A fold: compiled now by the host, or armed for the next turn's first call."""
        STATS["rule:fold"] += 1
        self._arm_fold(arg)
        if now:
            strategy = self.cm.strategy
            result = self.cm.compile(self.agent.head)
            self.cm.strategy = self.base
            self.fold_armed = False
            self.events.append(("compile", (result, self._visible(), strategy)))
        self._turn(then)

    @rule(
        what=st.sampled_from(("user", "reply_text", "tamper", "drop_thinking")),
        arg=st.integers(0, 10_000),
        then=THEN,
    )
    def edit(self, what: str, arg: int, then: TurnSpec | None) -> None:
        STATS[f"rule:edit:{what}"] += 1
        self._edit(what, arg)
        self._turn(then)

    @rule(then=THEN)
    def fork(self, then: TurnSpec | None) -> None:
        STATS["rule:fork"] += 1
        parent = self.cm.current_branch_key()
        self.cm.fork(f"fork{self._next()}")
        self.branches[self.cm.current_branch_key()] = self.branches[parent].fork()
        self._turn(then)

    @precondition(lambda self: len(self.cm.list_branches()) > 1)
    @rule(k=st.integers(0, 100), then=THEN)
    def switch_branch(self, k: int, then: TurnSpec | None) -> None:
        STATS["rule:switch_branch"] += 1
        others = [b for b in self.cm.list_branches() if b != self.cm.current_branch()]
        self.cm.switch_branch(others[k % len(others)].name)
        self._turn(then)

    @precondition(lambda self: len(self.cm.list_branches()) > 1)
    @rule(k=st.integers(0, 100))
    def delete_branch(self, k: int) -> None:
        STATS["rule:delete_branch"] += 1
        others = [b for b in self.cm.list_branches() if b != self.cm.current_branch()]
        gone = self.cm.delete_branch(others[k % len(others)].name)
        key = f"{gone.id}@{gone.created}"
        self.branches[key].told.clear()
        self.branches[key].held.clear()
        if self.incident is not None and self.incident[0] == key:
            self.incident = None
        assert self.runtime.teller.told_count(AGENT, key) == 0

    @rule(then=THEN)
    def drop_kept_renders(self, then: TurnSpec | None) -> None:
        """The host drops every kept render (the per-process bound, or a restart): a compile
        then restores the stored snapshot where nothing it depended on changed, and must send
        exactly what a render from the stored messages sends."""
        STATS["rule:drop_kept_renders"] += 1
        if not self.fold_armed:  # a dry compile would fold
            head = self.agent.head
            self.cm.forget_cache()
            restored = self.cm.compile(head, dry_run=True)
            self.cm.forget_cache()
            with snapshots_off():
                cold = self.cm.compile(head, dry_run=True)
            assert restored.request == cold.request
            assert restored.provenance == cold.provenance
            assert restored.tokens == cold.tokens
            assert _strip_of(restored) == _strip_of(cold)
        self.cm.forget_cache()
        self._turn(then)

    @rule(k=st.integers(0, len(EDITINGS) - 1), then=THEN)
    def set_editing(self, k: int, then: TurnSpec | None) -> None:
        """Server-side context editing from now on (one of ``EDITINGS``), or none."""
        STATS[f"rule:set_editing:{k}"] += 1
        self.editing = self.cm.editing = EDITINGS[k]
        self._turn(then)

    def _can_compact(self) -> bool:
        """The last request's model can compact (rule 24); the request compacted is the
        current branch's last, which after a branch switch may be on another model (handled
        by each rule). On a model without preserved
        thinking the kept turns' thinking stays valid only while no model with the prefix
        check reads it (rule 25 a)."""
        calls = self.sim.calls
        model = str(calls[-1].request.get("model")) if calls else ""
        return model in COMPACTION_MODELS

    @precondition(lambda self: not self.fold_armed)
    @rule(then=THEN)
    def compact(self, then: TurnSpec | None) -> None:
        """A foreground server compaction now (``Compact``, issue #29): it repeats the last
        request sent (rule 25), so it is asked only when that request's model can compact."""
        if not self._can_compact():
            return
        STATS["rule:compact"] += 1
        self.cm.strategy = Compact(1, fallback=self.base if isinstance(self.base, Window) else None)
        try:
            stored = self._run(self.cm.compact_async(self.client))
        except anthropic.BadRequestError as err:
            # the branch's last request (the one compacted) is on a model that cannot compact:
            # the manager falls back and the error reaches the caller (``Compactor``)
            if "does not support on-demand compaction" not in str(err):
                raise
            stored = None
        finally:
            self.cm.strategy = self.base
        STATS[f"compacted:{stored is not None}"] += 1
        self._turn(then)

    @precondition(lambda self: not self.fold_armed)
    @rule(then=TURNS)
    def compact_in_background(self, then: TurnSpec) -> None:
        """A background compaction (``begin_compaction``, rule 27): asked now, answered while
        a turn runs, swapped in after it (or abandoned: an edit or a branch switch meanwhile)."""
        if not self._can_compact():
            return
        STATS["rule:compact_in_background"] += 1
        self.cm.strategy = Compact(
            1,
            background=True,
            fallback=self.base if isinstance(self.base, Window) else None,
        )
        try:
            pending = self.cm.begin_compaction()
        finally:
            self.cm.strategy = self.base
        if pending is None:
            return
        if pending.request.get("model") not in COMPACTION_MODELS:  # the branch's last request
            self.cm.abandon_compaction(pending, "the model cannot compact")
            return
        answer = self._run(self.client.beta.messages.create(**pending.request))
        self._turn(then)
        stored = self.cm.finish_compaction(pending, answer)
        STATS[f"compacted_in_background:{stored is not None}"] += 1

    @rule(arg=st.integers(0, 10_000), then=THEN)
    def release(self, arg: int, then: TurnSpec | None) -> None:
        STATS["rule:release"] += 1
        self._release(arg)
        self._turn(then)

    # the reference
    def _read(self, message_id: str) -> StoredMessage | None:
        try:
            return self.cm.get_message(message_id)
        except KeyError:
            return None

    def _tell(self, key: str, line: str, *, live: bool = True) -> None:
        """A line told on branch ``key``: stored now (a turn stores it at its boundary), or,
        told outside a turn, held until the next turn opens on that branch (SPEC 9 leaves it
        open; the runtime never stores it between a compile and the reply recorded for it)."""
        branch = self.branches[key]
        (branch.notices if live else branch.held).append(line)
        STATS["notices"] += 1

    def _on_strip(
        self, strip: ThinkingStrip, key: str, turn: TurnState, head: dict[str, str]
    ) -> None:
        STATS[f"strip:{strip.cause}"] += 1
        branch = self.branches[key]
        replies = list(strip.replies)
        self.strips[strip.compile_id] = strip
        # SPEC 7: the cause is read at the first stripped block (a block of the first reply)
        stamped = self.reply_heads[replies[0]]
        changed = tuple(c for c in HEAD_COMPONENTS if stamped[c] != head[c])
        if head.get("appends") == "True":  # a system or tools change was appended, not stripped
            changed = tuple(c for c in changed if c not in ("system", "tools"))
        readable = self.reads(head["reader"], self.reply_models[replies[0]])
        if not documented_prefix_check(head["reader"]):  # VENDOR_RULES 10: only the model
            changed = ("model",) if not readable else ()
        if not readable or any(c in ("system", "tools") for c in changed):
            expected: tuple[str, tuple[str, ...]] = ("head", changed)
        else:
            expected = ("messages", ()) if branch.compiled else ("first", ())
        assert (strip.cause, strip.changed) == expected, (strip, expected)
        sequences = [m.sequence for r in replies if (m := self._read(r)) is not None]
        assert sequences == sorted(sequences), f"strip replies not oldest first: {strip}"
        if not branch.compiled:
            branch.compiled_at = self.cm.branch_head()[1]
        branch.compiled = True
        untold = [r for r in replies if r not in branch.told]
        mine = {r for r in replies if _owns(turn, self._read(r))}
        if strip.cause in ("head", "first") and untold:
            if strip.cause == "head":
                # SPEC 9: the newest readable reply, named when it has text or a tool call
                newest = next(
                    (m for r in reversed(replies) if (m := self._read(r)) is not None), None
                )
                named = newest if newest is not None and name_reply(newest) else None
                line = reasoning_loss_line(
                    AGENT, "head", reply=named, this_turn=bool(mine), changed=strip.changed
                )
            else:
                line = self._count_line(untold, mine)
            self._tell(key, line, live=turn.live)
        elif strip.cause == "messages" and turn.live and mine and untold:
            self._tell(key, self._count_line(untold, mine))
        branch.told.difference_update(replies)

    def _count_line(self, counted: list[str], mine: set[str]) -> str:
        return reasoning_loss_line(
            AGENT,
            "count",
            reply=self._read(counted[0]),
            count=len(counted),
            this_turn=any(r in mine for r in counted),
        )

    def _on_call(
        self,
        result: CompileResult,
        visible: list[StoredMessage],
        turn: TurnState,
        strategy: Any,
        call: Any,
    ) -> None:
        STATS["calls"] += 1
        request = {**call.request, "betas": list(call.betas)}
        # invariant 1: nothing sent fails on its own, but the open round's reply, which goes
        # out as recorded under drop_block (VENDOR_RULES 6); every prefix drop follows a forced
        # one or that reply
        inflight = _inflight_index(call.request["messages"])
        # a block the requested model cannot read is sent on purpose (VENDOR_RULES 8) and
        # named in ``unreadable``; its model drop is expected, not placed, not told
        unreadable = set(result.unreadable)

        def expected(check: Any) -> bool:
            return check.reason == MODEL_MISMATCH and check.path_text in unreadable

        assert [
            c.reason
            for c in self.sim.verify(request)
            if c.reason is not None and c.path[0] != inflight and not expected(c)
        ] == []
        dropped = [c for c in call.dropped if not expected(c)]
        forced_before = False
        for check in dropped:
            forced_before = forced_before or check.forced or check.path[0] == inflight
            assert check.forced or forced_before, f"unforced drop {check} in {call.request}"
        assert _jsonable(result.request["messages"]) == call.request["messages"]
        self._check_editing(call)
        self._judge_left_out(result, visible, request, strategy)
        reply = visible[-1]
        assert reply.role == "assistant"
        assert reply.sequence > result.last_sequence
        self.reply_heads[reply.id] = dict(result._token.head_digests)
        self.reply_models[reply.id] = str(call.request["model"])
        # drops, placed independently by signature, then the incident rule
        by_signature = {
            _signature(blocks_to_wire([b])[0]): (m.id, k)
            for m in visible
            if m.role == "assistant"
            for k, b in enumerate(m.content)
            if _is_thinking(b)
        }
        placed: list[tuple[str, int, str]] = []
        for check in dropped:
            i, j = check.path
            found = by_signature.get(_signature(call.request["messages"][i]["content"][j]))
            assert found is not None, f"a dropped block {check.path} matches no stored reply"
            placed.append((*found, check.reason))
            STATS[f"dropped:{check.reason}"] += 1
        branch = self.branches[result.branch]
        for reply_id, block, reason in placed:
            if reason in RELEASED_REASONS:
                released = branch.drop_released.setdefault(reply_id, [])
                released.append((block, result.last_sequence))
        prior = self.incident if self.incident and self.incident[0] == result.branch else None
        most = prior[1] if prior else 0
        self.incident = (result.branch, max(most, len(placed))) if placed else None
        if len(placed) > most:
            ids = list(dict.fromkeys(reply_id for reply_id, _, _ in placed))
            line = reasoning_loss_line(
                AGENT,
                "count",
                reply=self._read(ids[0]),
                count=len(ids),
                this_turn=any(_owns(turn, self._read(r)) for r in ids),
            )
            self._tell(result.branch, line)
            branch.told.update(ids)

    def _check_editing(self, call: Any) -> None:
        """Every request carries the context's edits while they are on (but one that carries
        a compaction block: rule 23), and none otherwise."""
        editing = self.cm.editing
        first = _content(call.request["messages"][0])
        if editing is None or (first and first[0].get("type") == "compaction"):
            assert "context_management" not in call.request
            return
        assert call.request["context_management"] == editing.to_wire()
        assert "context-management-2025-06-27" in call.betas
        applied = call.response.get("context_management") or {}
        for edit in applied.get("applied_edits") or ():
            STATS["edits:cleared_tool_uses"] += int(edit.get("cleared_tool_uses", 0))
            STATS["edits:applied"] += 1

    def _judge_left_out(
        self,
        result: CompileResult,
        visible: list[StoredMessage],
        request: dict[str, Any],
        strategy: Any,
    ) -> None:
        """Invariant 2 for one committing compile (see the module docstring)."""
        branch = self.branches[result.branch]
        branch.told.difference_update(self._restored(result))  # a new loss is told again
        if not branch.compiled:
            branch.compiled_at = result.last_sequence
        branch.compiled = True
        inflight = _inflight_index(request["messages"])
        newly: set[str] = set()
        rendered: dict[str, tuple[int, dict[int, int], set[int]]] = {}
        unread: set[tuple[str, int]] = set()  # sent, but the model cannot read them: lost
        for i, entry in enumerate(result.provenance):
            for source in entry.sources:
                sent = {source.blocks[j] for j in source.signatures}
                rendered[source.message_id] = (i, dict(source.blocks), sent)
                unread.update(
                    (source.message_id, source.blocks[j])
                    for j in source.signatures
                    if f"messages.{i}.content.{j}" in result.unreadable
                )
        summaries = [m for m in visible if m.metadata.kind in ("summary", "compaction")]
        covered = max((int(m.metadata.extra["covers_upto"]) for m in summaries), default=-1)
        opener = max(summaries, key=lambda m: m.sequence, default=None)
        as_text = opener.metadata.extra.get("inflight") if opener is not None else None
        lo, hi = as_text if isinstance(as_text, list) else (0, -1)  # the open turn, as text
        by_id = {m.id: m for m in visible}
        first = min(
            (
                by_id[mid].sequence
                for mid in rendered
                if mid in by_id and mid not in {m.id for m in summaries}
            ),
            default=0,
        )
        sends = [
            (i, j)
            for i, message in enumerate(request["messages"])
            for j, block in enumerate(_content(message))
            if block.get("type") != "compaction" and _signature(block) is not None
        ]  # thinking sent (a compaction block is signed too, but no thinking)
        sheds = isinstance(strategy, Window) and strategy.shed_thinking
        began = max(  # the open round's turn began at its user message (issue 28 item 3)
            (
                m.sequence
                for m in visible
                if m.role == "user"
                and m.sequence <= result.last_sequence
                and not any(isinstance(b, ToolResultBlock) for b in m.content)
            ),
            default=0,
        )
        for message in visible:
            if message.role != "assistant" or message.sequence > result.last_sequence:
                continue
            thinking = [k for k, b in enumerate(message.content) if _is_thinking(b)]
            if message.id not in rendered:
                assert (
                    message.sequence <= covered
                    or lo <= message.sequence <= hi
                    or message.sequence < first
                    or not thinking
                ), f"reply {message.id} was neither rendered, folded away nor before the window"
                continue
            i, blocks, sent = rendered[message.id]
            for k in thinking:
                released_from = branch.released_from(message.id, len(message.content))
                spot = (message.id, k)
                if spot in unread:  # lost to this model (VENDOR_RULES 8): reported once
                    STATS["left_out:unread"] += 1
                    if spot not in branch.left_out:
                        branch.left_out[spot] = result.last_sequence
                        newly.add(message.id)
                    continue
                if k in sent:
                    held = inflight is not None and _held_mid_round(branch, message.id, k, began)
                    assert k < released_from or i == inflight or held, (  # VENDOR_RULES 6
                        f"block {k} of {message.id} was released, yet sent"
                    )
                    branch.left_out.pop(spot, None)  # withheld, now sent again (VENDOR_RULES 5, 8)
                    continue
                if spot in branch.left_out:
                    continue
                if branch.out_for_good(message.id, k):
                    branch.left_out[spot] = result.last_sequence  # out too (``block_cut``)
                    continue
                branch.left_out[spot] = result.last_sequence
                if branch.inherited_release(message.id, k):
                    STATS["left_out:inherited_release"] += 1
                    continue
                newly.add(message.id)
                STATS["left_out"] += 1
                if k >= _low(branch.host_released, message.id, len(message.content)):
                    STATS["left_out:host_release"] += 1
                    continue  # the host released it (SPEC 7)
                if k >= _low(branch.drop_released, message.id, len(message.content)):
                    STATS["left_out:drop_release"] += 1
                    continue  # released after a prefix drop (SPEC 8)
                after = [j for j, stored in blocks.items() if stored > k]
                j = min(after) if after else max(blocks) + 1
                try:
                    verdict = self.sim.verify_block(request, i, j, message.content[k])
                except InvalidRequest:
                    verdict = "invalid"  # its own text or signature was edited
                if verdict is None and sheds and all(p > (i, j) for p in sends):
                    # shed under the window: a leading run, so every later block keeps its
                    # place (VENDOR_RULES 4); released for good (SPEC 7)
                    STATS["left_out:shed"] += 1
                    found = branch.shed_released.setdefault(message.id, [])
                    found.append((k, result.last_sequence))
                    continue
                STATS["left_out:judged_by_verify_block"] += 1
                assert verdict is not None, (
                    f"needless strip: block {k} of {message.id} would verify at "
                    f"messages.{i}.content.{j}"
                )
        strip = self.strips.pop(result.compile_id, None)
        reported = set(strip.replies) if strip is not None else set()
        assert newly <= reported, f"left out without a strip: {sorted(newly - reported)}"

    def _restored(self, result: CompileResult) -> set[str]:
        """Replies with a thinking block the reference holds as left out that this compile
        sends again, readable, outside the open round's reply (which goes out as recorded):
        their loss is told again if it recurs (SPEC 9)."""
        branch = self.branches[result.branch]
        inflight = _inflight_index(result.request["messages"])
        back: set[str] = set()
        for i, entry in enumerate(result.provenance):
            if i == inflight:
                continue
            for source in entry.sources:
                for j in source.signatures:
                    spot = (source.message_id, source.blocks[j])
                    if spot in branch.left_out and (
                        f"messages.{i}.content.{j}" not in result.unreadable
                    ):
                        back.add(source.message_id)
        return back

    def _restore_before(self, strip: ThinkingStrip) -> None:
        """Apply the compile's restored replies before its strip is told (the teller hears
        them first): the compile's own event follows the strip's."""
        for kind, payload in self.events:
            if kind in ("call", "compile") and payload[0].compile_id == strip.compile_id:
                result = payload[0]
                self.branches[result.branch].told.difference_update(self._restored(result))
                return

    def _process(self) -> None:
        calls = self.sim.calls
        while self.events:
            kind, payload = self.events.pop(0)
            if kind == "open":  # a turn opens: the lines held for its branch are stored
                branch = self.branches[payload]
                branch.notices.extend(branch.held)
                branch.held.clear()
            elif kind == "strip":
                self._restore_before(payload[0])
                self._on_strip(*payload)
            elif kind == "call":
                while "compaction" in calls[self.calls_seen].request:  # the host's compact
                    assert "context_management" not in calls[self.calls_seen].request
                    self.calls_seen += 1
                call = calls[self.calls_seen]
                self.calls_seen += 1
                result, visible, turn, strategy = payload
                self._on_call(result, visible, turn, strategy, call)
            elif kind == "compile":
                result, visible, strategy = payload
                request = {**result.request, "betas": result.request.get("betas", [])}
                self._judge_left_out(result, visible, request, strategy)
            elif kind == "release":
                key, reply_id, from_block, sequence = payload
                found = self.branches[key].host_released.setdefault(reply_id, [])
                found.append((from_block, sequence))
        while self.calls_seen < len(calls) and "compaction" in calls[self.calls_seen].request:
            assert "context_management" not in calls[self.calls_seen].request
            self.calls_seen += 1
        assert self.calls_seen == len(calls), "a call reached the simulator but not the runtime"

    @invariant()
    def the_simulator_and_the_reference_agree(self) -> None:
        STATS["steps"] += 1
        self._process()
        bad = [e for e in self.logged if e["event"] in BAD_EVENTS or e["level"] == "error"]
        assert bad == []
        for ref in self.cm.list_branches():
            stored = self.cm.messages(branch=ref.name, kind=REASONING_LOSS_KIND)
            texts = [m.content[0].text for m in stored]  # type: ignore[union-attr]
            assert texts == self.branches[f"{ref.id}@{ref.created}"].notices, ref.name
        self.runtime.teller._check()
        self.sim._check()
        for _, cache in self.cm._compiler.caches():  # what the compiler keeps per branch
            cache._check()

    @invariant()
    def the_transcript_parses_and_every_notice_is_the_agents(self) -> None:
        every = {m.id: m for ref in self.cm.list_branches() for m in self.cm.messages(ref.name)}
        for message in every.values():
            wire = json.loads(json.dumps(blocks_to_wire(message.content)))
            assert blocks_from_wire(wire) == message.content
            if message.metadata.kind == REASONING_LOSS_KIND:
                (block,) = message.content
                assert isinstance(block, TextBlock)
                assert message.role == "system"
                assert message.metadata.system_notice is True
                assert message.metadata.target == AGENT
                assert block.text.startswith(f"{MARKER} {AGENT}: ")
                assert block.text.count(MARKER) == 1
                assert "\n" not in block.text
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    assert block.tool_use_id


def _inflight_index(messages: list[dict[str, Any]]) -> int | None:
    """The open tool round's assistant message: the request ends with its results."""
    end = len(messages)
    while end > 0 and messages[end - 1]["role"] == "system":
        end -= 1
    if end < 2 or messages[end - 2]["role"] != "assistant":
        return None
    last = messages[end - 1]
    content = last["content"] if isinstance(last["content"], list) else []
    if last["role"] == "user" and any(b.get("type") == "tool_result" for b in content):
        return end - 2
    return None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


PROFILES = ["quick", pytest.param("ci", marks=pytest.mark.slow)]
"""The machines run at the ``quick`` profile in the default run and at the full ``ci`` one
under ``-m slow`` (which ``.ci/run`` runs)."""


def _model_settings(profile: str = "ci") -> settings:
    """``profile`` unless a bigger one (``long``) was chosen on the command line."""
    base = settings.get_profile(profile)
    current = settings.default
    bigger = max(base.max_examples, settings.get_profile("default").max_examples)
    chosen = current if current is not None and current.max_examples > bigger else base
    return settings(
        chosen,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_no_invalid_block_is_sent_no_valid_one_is_stripped_and_each_loss_is_told_once(
    profile: str,
) -> None:
    """Hypothesis drives turns, head and model changes (under a readability table), folds,
    windows that shed, edits, forks, ``branch_at``, releases and forced drops.

    Expectations changed by VENDOR_RULES 4 (a shed leading run is no needless strip), 6 (the
    open round's reply goes out as recorded) and 8-9 (a model switch strips only what the
    table says the new model cannot read).
    """
    from hypothesis.stateful import run_state_machine_as_test

    STATS.clear()
    run_state_machine_as_test(ReliabilityMachine, settings=_model_settings(profile))
    path = os.environ.get("RELIABILITY_STATS")
    if path:
        with open(path, "w") as out:
            json.dump(dict(sorted(STATS.items())), out, indent=1)


class PostgresMachine(ReliabilityMachine):
    """The same machine, every example on a fresh PostgreSQL schema."""


@pytest.mark.parametrize("profile", PROFILES)
def test_the_same_holds_on_postgresql(postgres_server: Server, profile: str) -> None:
    """The whole machine, each example on ``PostgresStore``: at its full profile (300 examples,
    as issue 20 asks) under ``-m slow``, as ``.ci/run`` runs it."""
    from hypothesis.stateful import run_state_machine_as_test

    PostgresMachine.postgres_server = postgres_server.dsn
    try:
        run_state_machine_as_test(PostgresMachine, settings=_model_settings(profile))
    finally:
        PostgresMachine.postgres_server = None


# Regressions the machine found (each failed before its fix).


def _runtime(script: Any = None, **binding: Any) -> tuple[Simulator, Agent]:
    sim = Simulator(script=script)
    runtime = Runtime(sim.client(), MemoryStore(), retry=FAST)
    head = Head(model=MODELS[0], system=SYSTEMS[0], tools=[TOOLS[0]], settings=SETTINGS[0])
    agent = Agent(AGENT, head, reasoning=False, binding=ThinkingBinding(**binding))
    return sim, runtime.register(agent)


def _sent_thinking(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] for b in _content(m) if _signature(b))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"system": SYSTEMS[1]}, id="system-as-its-one-text-block"),
        pytest.param({"system": SYSTEMS[2]}, id="system-block-with-a-cache-marker"),
        pytest.param({"tools": [TOOLS[0], TOOLS[3]]}, id="a-deferred-tool-added"),
    ],
)
async def test_a_head_change_the_api_does_not_bind_strips_no_reasoning(
    change: dict[str, Any],
) -> None:
    sim, ada = _runtime()
    await ada.run_turn("first question")
    ada.head = attrs.evolve(ada.head, **change)
    await ada.run_turn("second question")
    assert _sent_thinking(sim.requests[-1]) == 1
    assert ada.context.messages(kind=REASONING_LOSS_KIND) == []
    call = sim.calls[-1]
    assert [c.reason for c in sim.verify({**call.request, "betas": list(call.betas)})] == [None]


def _replay(steps: list[Callable[[ReliabilityMachine], object]]) -> None:
    """Run ``steps`` (rules a long run found) on a fresh machine, checking the invariants after
    each."""
    machine = ReliabilityMachine()
    try:
        for step in steps:
            step(machine)
            machine.the_simulator_and_the_reference_agree()
            machine.the_transcript_parses_and_every_notice_is_the_agents()
    finally:
        machine.teardown()


PLAIN = ("plain", "plain", "plain", "plain")
ORGANIZATION_DROP = ("organization_binding_mismatch", 2627)
END_USER_DROP = ("end_user_binding_mismatch", 2628)


def test_a_thinking_block_cut_from_a_reply_released_earlier_is_not_counted_as_lost_again() -> None:
    """A sequence the ``long`` profile found: a model switch under a shedding window released
    a reply's thinking and told it; the host then cut that reply's first thinking block out, so
    the other one moved down a place. It is the same block, out since the release: no strip
    names it again (the reference once keyed it by its old place)."""
    t = TurnSpec
    _replay(
        [
            lambda m: m.first_turn(
                spec=t(3, ("interleaved", "interleaved", "mixed", "one"), "none", 2, 1029, None),
                sqlite=True,
                notices_as="user",
                readability=None,
            ),
            lambda m: m.fork(then=t(2, ("plain", "plain", "mixed", "plain"), "none", 2, 0, None)),
            lambda m: m.set_window(
                shed=True, size=0, then=t(0, ("one", *PLAIN[1:]), "none", 2, 1352, None)
            ),
            lambda m: m.fold(
                arg=1712,
                now=False,
                then=t(2, ("redacted", "one", "two", "plain"), "none", 1, 1106, None),
            ),
            lambda m: m.edit(
                what="reply_text",
                arg=665,
                then=t(3, ("one", "two", "two", "mixed"), "tools", 2, 353, ORGANIZATION_DROP),
            ),
            lambda m: m.fold(arg=430, now=True, then=None),
            lambda m: m.edit(
                what="reply_text",
                arg=344,
                then=t(0, ("interleaved", "plain", "mixed", "mixed"), "release", 3, 321, None),
            ),
            lambda m: m.set_window(
                shed=True,
                size=700,
                then=t(1, ("one", "interleaved", "two", "mixed"), "system", 3, 9999, None),
            ),
            lambda m: m.fork(
                then=t(2, ("redacted", "two", "plain", "plain"), "model", 2, 1385, None)
            ),
            lambda m: m.edit(
                what="drop_thinking",
                arg=229,
                then=t(
                    1, ("interleaved", "plain", "mixed", "mixed"), "tools", 2, 6839, END_USER_DROP
                ),
            ),
        ]
    )


def test_a_thinking_block_cut_from_a_reply_whose_blocks_a_drop_released_stays_counted() -> None:
    """A second sequence: a prefix drop released both thinking blocks of a reply (each
    reported); the host cut out the first, and the second, one place lower, is still the block
    already counted."""
    t = TurnSpec
    _replay(
        [
            lambda m: m.first_turn(
                spec=t(0, ("redacted", *PLAIN[1:]), "none", 3, 1302, None),
                readability=None,
                notices_as="user",
                sqlite=True,
            ),
            lambda m: m.drop_kept_renders(then=t(0, PLAIN, "none", 2, 9497, None)),
            lambda m: m.change_system(
                system=0, then=t(0, ("mixed", *PLAIN[1:]), "none", 1, 0, None)
            ),
            lambda m: m.drop_kept_renders(then=t(0, ("two", *PLAIN[1:]), "none", 1, 0, None)),
            lambda m: m.branch_at(
                k=483,
                switch=True,
                then=t(3, PLAIN, "none", 1, 0, ("prefix_binding_mismatch", 0)),
            ),
            lambda m: m.edit(what="drop_thinking", arg=172, then=t(0, PLAIN, "none", 1, 0, None)),
        ]
    )


def test_a_compile_with_nothing_new_since_a_fold_neither_folds_again_nor_fails() -> None:
    cm = ContextManager.open(
        MemoryStore(),
        namespace=AGENT,
        strategy=Fold(lambda covered: "S" * 2000, trigger_tokens=50),
    )
    head = Head(model=MODELS[0], system=SYSTEMS[0], settings=SETTINGS[0])
    cm.add_message("user", "hello " * 50)
    cm.add_message("assistant", [TextBlock("hi " * 50)])
    folded = cm.compile(head)
    preview = cm.compile(head, dry_run=True)
    again = cm.compile(head)
    assert len(cm.messages(kind="summary")) == 1
    assert folded.request["messages"] == preview.request["messages"] == again.request["messages"]


async def test_a_head_change_after_a_host_release_is_still_told_with_its_cause() -> None:
    """With changes appended (SPEC 7b) nothing would be lost: the change strips here."""
    _, ada = _runtime(append_changes=False)
    first = (await ada.run_turn("hello")).replies[0]
    await ada.run_turn("and then")
    ada.context.release_thinking(first)  # the host lets the first reply's reasoning go
    ada.head = attrs.evolve(ada.head, system=SYSTEMS[3])
    await ada.run_turn("go on")
    texts = [m.content[0].text for m in ada.context.messages(kind=REASONING_LOSS_KIND)]  # type: ignore[union-attr]
    assert texts == [
        '[reasoning] ada: The reasoning behind your replies up to the one beginning "You said: '
        'and then" is no longer in your context, because your system text changed. Their '
        "words are still here. Re-read before relying on an earlier decision."
    ]
