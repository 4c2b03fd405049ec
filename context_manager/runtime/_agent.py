"""A resident agent and its turns: compile, stream, record, place drops, run tools, boundary.

Invariants: one turn at a time per agent, across processes and hosts too: each turn runs inside the
store's hold on the agent (``Store.hold``), taken before the trigger is stored and kept across the
model calls without a database transaction, so two hosts' rounds never interleave; a reply's
``tool_use`` blocks are always followed by stored results before the next call (on a crash,
``resume_turn`` rolls the round back with error results); notices produced while a turn is live
wait for the next boundary; a ``[reasoning]`` line heard outside a turn is held for its branch
until a reply is recorded or a turn opens there, never stored between a compile and its reply.
Nothing the teller or a notice write does can fail a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Literal

import anthropic
import attrs

from context_manager._compile._caching import Caching
from context_manager._compile._strategies import Compact, Passthrough, Strategy
from context_manager._manager import ContextManager
from context_manager._model._content import TextBlock, ToolResultBlock, ToolUseBlock, to_blocks
from context_manager._model._editing import CallEdits, ContextEditing
from context_manager._model._errors import AgentNotRegistered, InvalidValue
from context_manager._model._head import Head, ThinkingBinding
from context_manager._model._log import library_logger
from context_manager._model._messages import (
    ASKER_KEY,
    DROPPED_KEY,
    REASONING_LOSS_KIND,
    STRIP_KEY,
    MessageId,
    MessageMeta,
    StoredMessage,
)
from context_manager._model._results import CompileResult
from context_manager._model._usage import USAGE_KEY, CallUsage, usage_from, usage_of
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._store._hold import Hold
from context_manager._store._protocol import branch_key
from notices import ReasoningLossTeller, TurnState

from ._calls import RetryPolicy, stream_call
from ._cleared import ClearedThinking
from ._compacting import Background, compact_if_due
from ._live import ReasoningHub, ReasoningSink, Subscription
from ._observed import ObservedTurn
from ._tail import asker_of as _asker_of
from ._tail import awaits_answer as _awaits_answer
from ._tail import dropped as _dropped
from ._tail import offered as _offered
from ._tail import unanswered as _unanswered
from ._tools import ToolCall, ToolFunction, run_tool
from ._turn import Turn, TurnResult

log = library_logger("context_manager.runtime")


INTERRUPTED_TEXT = "This tool call was interrupted before it finished; run it again if needed."
"""The result ``resume_turn`` gives a call whose answer was never stored."""

__all__ = [
    "CALL_USAGE_EVENT",
    "INTERRUPTED_TEXT",
    "MAX_CALLS_PER_TURN",
    "Agent",
    "Turn",
    "TurnResult",
]
"""``Turn`` and ``TurnResult`` live in ``_turn``; importing them from here still works."""

MAX_CALLS_PER_TURN = 200
"""A runaway tool loop stops here rather than calling the model forever."""

CALL_USAGE_EVENT = "call_usage"
"""The structured event (info) each model call logs: agent, branch, compile id, and its input,
cache read, cache write and output tokens."""


@attrs.define(eq=False)
class Agent:
    """A resident agent. ``head`` is read at every call, so a host or a tool may change it.

    Register it with ``Runtime.register`` before running turns. ``on_reasoning`` (off by
    default) hears each readable ``thinking_delta`` of its calls as an ``UntrustedText``
    increment while the call streams, on a channel of its own; one that raises is logged and
    never fails the turn. ``reasoning_stream()`` gives the same as an async iterator.
    """

    name: str
    head: Head
    tools: dict[str, ToolFunction] = attrs.field(factory=dict)
    binding: ThinkingBinding = attrs.field(factory=ThinkingBinding)
    strategy: Strategy = attrs.field(factory=Passthrough)
    reasoning: ReasoningCapture | Literal[False] | None = None
    editing: ContextEditing | None = None
    """Server-side context editing for the agent's requests (``ContextEditing``), or ``None``."""
    caching: Caching | None = attrs.field(default=None, kw_only=True)
    """Prompt-cache breakpoints and cache diagnostics (``Caching``; ``None``: the default)."""
    on_reasoning: ReasoningSink | None = attrs.field(default=None, kw_only=True)
    live: ReasoningHub = attrs.field(init=False, repr=False)
    """The agent's live reasoning hub (``ReasoningHub``): its buffer, sink and subscribers."""
    _client: anthropic.AsyncAnthropic | None = attrs.field(default=None, init=False, repr=False)
    _retry: RetryPolicy = attrs.field(factory=RetryPolicy, init=False, repr=False)
    _context: ContextManager | None = attrs.field(default=None, init=False, repr=False)
    _turn: Turn | None = attrs.field(default=None, init=False, repr=False)
    _deferred: list[tuple[str, str]] = attrs.field(factory=list, init=False, repr=False)
    _held: dict[str, list[str]] = attrs.field(factory=dict, init=False, repr=False)
    _lock: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False, repr=False)
    _hold_timeout: float | None = attrs.field(default=None, init=False, repr=False)
    _holder: str | None = attrs.field(default=None, init=False, repr=False)
    _teller: ReasoningLossTeller | None = attrs.field(default=None, init=False, repr=False)
    _cleared: ClearedThinking = attrs.field(factory=ClearedThinking, init=False, repr=False)
    _background: Background = attrs.field(factory=Background, init=False, repr=False)
    _asker: str | None = attrs.field(default=None, init=False, repr=False)
    removed: bool = attrs.field(default=False, init=False)

    @live.default
    def _make_hub(self) -> ReasoningHub:
        return ReasoningHub(self.name, lambda: self.on_reasoning)

    def reasoning_stream(self) -> Subscription:
        """The agent's live reasoning as it streams: ``reasoning`` events carry increments.

        The first event is a ``partial`` (the call's text so far) when a call is streaming;
        ``reset`` means a retry or a resumed turn, ``done`` that the reply is recorded (its
        reasoning is then read durably, ``read_reasoning``). Nothing is stored. Subscribed at
        once; ``aclose()`` it (or ``async with`` it) when done.
        """
        return self.live.subscribe()

    @property
    def context(self) -> ContextManager:
        """The agent's ``ContextManager`` (namespace = the agent's name)."""
        if self._context is None:
            raise AgentNotRegistered(self.name)
        return self._context

    def attach(
        self,
        client: anthropic.AsyncAnthropic,
        context: ContextManager,
        teller: ReasoningLossTeller,
        retry: RetryPolicy,
        *,
        hold_timeout: float | None = None,
        holder: str | None = None,
    ) -> None:
        """Give the agent what its turns use (``Runtime.register`` does this)."""
        self._client = client
        self._context = context
        self._teller = teller
        self._retry = retry
        self._hold_timeout = hold_timeout
        self._holder = holder
        self._held = {}
        self.removed = False

    def turn_state(self) -> TurnState:
        """Whether a turn is live, and where it opened (what the teller judges "this turn" by)."""
        turn = self._turn
        if turn is None:
            return TurnState(live=False, branch_key=None, head_sequence=0)
        return TurnState(live=True, branch_key=turn.branch_key, head_sequence=turn.head_sequence)

    # notices
    def notify(self, text: str, kind: str = "notice") -> MessageId | None:
        """Store a system notice now, or at the next boundary while a turn is live.

        Outside a turn the notice is stored under the agent's hold, taken without waiting: while
        another host (or runtime) holds the agent it would land inside that host's round, so it
        waits for this agent's next boundary instead. Returns the stored id, or ``None`` when
        it waits.
        """
        if self._turn is None:
            with contextlib.ExitStack() as held:
                try:
                    held.enter_context(self.context.hold(timeout=0, holder=self._holder))
                except Exception as err:  # held elsewhere, or the store is down: keep it
                    log.info("notice_deferred", agent=self.name, kind=kind, why=str(err))
                else:
                    return self._store_notice(text, kind)
        self._deferred.append((text, kind))
        return None

    @property
    def teller(self) -> ReasoningLossTeller:
        """The ``ReasoningLossTeller`` holding this agent's told state."""
        if self._teller is None:
            raise AgentNotRegistered(self.name)
        return self._teller

    def _tell_drops(self, message: object, result: CompileResult) -> None:
        """Place the call's drops, release per policy, and tell them (never raises)."""
        try:
            placed = self.context.place_drops(message, result)
        except Exception as err:
            log.error("drop_placement_failed", agent=self.name, error=repr(err))
            return
        if self.removed:
            return
        try:
            teller = self.teller
            self._deliver(teller.for_drops(self.name, result.branch, placed, self.turn_state()))
        except Exception as err:
            log.error("teller_failed", agent=self.name, error=repr(err), line="[reasoning]")

    def _store_notice(self, text: str, kind: str) -> MessageId | None:
        try:
            return self.context.add_message(
                "system",
                [TextBlock(text)],
                metadata=MessageMeta(system_notice=True, kind=kind, target=self.name),
            )
        except Exception as err:  # a notice that cannot be stored never fails a turn
            if kind == REASONING_LOSS_KIND:
                self.teller.line_not_stored(self.name, self.context.current_branch_key(), err)
            else:
                log.error("notice_store_failed", agent=self.name, kind=kind, error=repr(err))
            return None

    def _flush(self) -> list[MessageId]:
        pending, self._deferred = self._deferred, []
        stored = [self._store_notice(text, kind) for text, kind in pending]
        return [m for m in stored if m is not None]

    def _deliver(self, line: str | None, key: str | None = None) -> None:
        """Store a ``[reasoning]`` line: mid-turn at the next boundary (``notify``).

        A line heard outside a turn (a compile through the direct API; ``key`` is its branch)
        is held instead: stored at once it would stand between that compile's request and the
        reply the host then records against it, and the next compile would strip that reply
        with cause ``messages``, untold. It is stored on its own branch after the next reply
        recorded there, or when the next turn opens there, whichever comes first.
        """
        if not line:
            return
        if self._turn is not None or key is None:
            self.notify(line, REASONING_LOSS_KIND)
        else:
            self._held.setdefault(key, []).append(line)

    def _reply_recorded(self, _: MessageId, result: CompileResult) -> None:
        """The runtime's ``on_reply_recorded`` hook: a reply on ``result.branch`` (current) is
        stored, so the lines held for that branch may follow it (mid-turn: at the boundary)."""
        if self.removed or result.branch not in self._held:
            return
        if self._turn is not None:
            held = self._held.pop(result.branch)
            self._deferred.extend((line, REASONING_LOSS_KIND) for line in held)
            return
        self._store_held()

    def _store_held(self) -> list[MessageId]:
        """Store the lines held for the current branch now, unless a tool round is open there
        (a line never stands between a call and its results): then they wait for the next
        reply or turn. Returns the stored ids."""
        key = self.context.current_branch_key()
        if key not in self._held or self._round_open():
            return []
        held = self._held.pop(key)
        stored = [self._store_notice(line, REASONING_LOSS_KIND) for line in held]
        return [m for m in stored if m is not None]

    def _forget_held(self, key: str) -> None:
        """The branch ``key`` is deleted: its held lines go with it."""
        self._held.pop(key, None)

    @contextlib.asynccontextmanager
    async def forked(self, name: str) -> AsyncIterator[Agent]:
        """Run on a fork of the current branch; on exit, switch back and forget its told state.

        The fork and its messages stay stored (``switch_branch(name)`` returns to them).
        """
        context = self.context
        back = context.current_branch().name
        ref = context.fork(name)
        try:
            yield self
        finally:
            context.switch_branch(back)
            self.teller.forget(self.name, branch_key(ref))
            context.forget_cache(branch_key(ref))  # its render state and record go with it

    # turns
    def _hold(self) -> Hold:
        """The store's hold on this agent for one turn (see ``Store.hold``)."""
        return self.context.hold(timeout=self._hold_timeout, holder=self._holder)

    async def run_turn(self, trigger: object, *, asker: str | None = None) -> TurnResult:
        """Run one turn: store ``trigger`` as the user's message and loop until no tool is called.

        ``asker`` names who asked (a principal of the console); the trigger, its tool results
        and its replies record it in ``metadata.extra["asker"]``, and only the asker and the
        owner may read the turn's reasoning there.

        The whole turn runs inside the store's hold on the agent: a host running the same agent
        meanwhile (another process or machine) waits for it, then goes on from what this turn
        stored.

        Raises:
            ValueError: the trigger is blank (no block other than whitespace text); nothing is
                stored and no call is made.
            AgentBusy: another host held the agent past the runtime's ``hold_timeout``; it is
                named, and nothing was stored.
            anthropic.APIStatusError: the provider refused a call (after retries where retryable).
        """
        blocks = to_blocks(trigger)
        if all(isinstance(b, TextBlock) and not b.text.strip() for b in blocks):
            raise InvalidValue(
                f"blank trigger {trigger!r}: a turn needs a user message with some text or "
                "content; nothing was stored"
            )
        async with self._lock, self._hold():
            self._open(asker)
            try:
                held = self._store_held()
                self._close_cut_round(_unanswered(self._recent_tail()))
                self.context.add_message("user", blocks, metadata=self._asked())
                return await self._traced(held)
            finally:
                self._close()

    async def resume_turn(self) -> TurnResult | None:
        """Finish a turn a crash interrupted: roll back an unanswered round, then go on.

        Any turn whose last stored message is not the model's answer is finished: system
        messages (notices, head changes) stored after a tool result or a user message do not
        end it. Returns ``None`` when there is nothing to resume (no open round, and the newest
        message other than a system one is the model's).
        """
        async with self._lock, self._hold():
            tail = self._recent_tail()
            open_calls = _unanswered(tail)
            if not open_calls and not _awaits_answer(tail):
                return None
            self._open(_asker_of(tail))
            self.live.reset()
            try:
                self._close_cut_round(open_calls)
                if open_calls:
                    log.warning("turn_resumed", agent=self.name, rolled_back=len(open_calls))
                return await self._traced(self._store_held())
            finally:
                self._close()

    def has_unfinished_turn(self) -> bool:
        """Whether a crash or Ctrl-C left a turn unfinished (``resume_turn`` would finish it):
        the model has not answered the newest user message, or a round's calls are open. Reads
        the store only (O(64) messages)."""
        tail = self._recent_tail()
        return bool(_unanswered(tail)) or _awaits_answer(tail)

    def _close_cut_round(self, open_calls: Sequence[ToolUseBlock]) -> None:
        """Answer the calls of a round a crash cut with error results, so the next message
        stored is not taken for the calls' answer (the API refuses a round left open)."""
        if open_calls:
            self.context.add_message(
                "user",
                [
                    ToolResultBlock(tool_use_id=c.id, content=INTERRUPTED_TEXT, is_error=True)
                    for c in open_calls
                ],
                metadata=self._asked(),
            )

    def _recent_tail(self) -> list[StoredMessage]:
        return self.context.messages(limit=None, since=self._recent_floor())

    def _recent_floor(self) -> int:
        _, head = self.context.branch_head()
        return max(0, head - 64)

    def _open(self, asker: str | None) -> None:
        key, head = self.context.branch_head()
        self._turn = Turn(branch_key=key, head_sequence=head)
        self._asker = asker

    def _asked(self) -> MessageMeta | None:
        """The metadata of the turn's messages: who asked, when someone did."""
        return MessageMeta(extra={ASKER_KEY: self._asker}) if self._asker else None

    async def _call(self, result: CompileResult) -> tuple[object, MessageId]:
        """Stream one call (its thinking to the live hub) and record the reply."""
        client = self._client
        if client is None:
            raise AgentNotRegistered(self.name)
        self.live.begin(result.compile_id, self._asker)
        reply: MessageId | None = None
        try:
            message = await stream_call(
                client,
                result.request,
                compile_id=result.compile_id,
                agent=self.name,
                retry=self._retry,
                live=self.live,
            )
            reply = self.context.record_reply(
                message, result, extra=self._reply_extra(message, result)
            )
        finally:
            self.live.end(reply)
        return message, reply

    def _reply_extra(self, message: object, result: CompileResult) -> Mapping[str, object]:
        """What a reply records beside its usage: the turn's asker, the strip of the compile
        that produced it, and the call's drops (the console shows them)."""
        extra: dict[str, object] = {ASKER_KEY: self._asker} if self._asker else {}
        strip = result.thinking_strip
        if strip is not None:
            extra[STRIP_KEY] = {
                "cause": strip.cause,
                "changed": list(strip.changed),
                "replies": list(strip.replies),
                "blocks": strip.blocks,
            }
        dropped = _dropped(message, result)
        if dropped:
            extra[DROPPED_KEY] = dropped
        return extra

    def _close(self) -> None:
        self._turn = None
        self._asker = None
        if self._deferred and self._round_open():
            # A turn that failed between a tool call and its results: a notice stored now would
            # stand between them. It waits for the next boundary (resume_turn or the next turn).
            log.info("notices_held", agent=self.name, waiting=len(self._deferred))
            return
        self._flush()

    def _round_open(self) -> bool:
        try:
            return bool(_unanswered(self.context.messages(since=self._recent_floor())))
        except Exception:  # the store is failing: hold the notices rather than lose them
            return True

    async def _traced(self, stored: list[MessageId]) -> TurnResult:
        """``_loop`` inside the turn's ``invoke_agent`` span (telemetry off: just ``_loop``)."""
        cm = self.context
        with cm.telemetry.turn(self.name, cm.namespace, cm.current_branch_key()):
            return await self._loop(stored)

    async def _run_tool(self, use: ToolUseBlock, offered: frozenset[str] | None) -> ToolResultBlock:
        """One tool run inside its ``execute_tool`` span."""
        telemetry = self.context.telemetry
        with telemetry.tool(use) as span:
            result = await run_tool(self.tools, use, offered)
            telemetry.tool_done(span, result)
            return result

    async def _loop(self, stored: list[MessageId]) -> TurnResult:
        """Call the model until it stops calling tools; ``stored`` are the notices the turn
        already stored as it opened (lines held from outside a turn)."""
        cm = self.context
        replies: list[MessageId] = []
        calls: list[ToolCall] = []
        notices: list[MessageId] = list(stored)
        usage: list[CallUsage] = []
        edits: list[CallEdits] = []
        changes: list[MessageId] = []
        stop_reason: str | None = None
        compacted: MessageId | None = None
        observed = ObservedTurn(cm)
        for _ in range(MAX_CALLS_PER_TURN):
            compacted = self._background.swap(cm, self.name) or compacted
            result = await cm.compile_async(self.head)
            changes.extend(result.appended)
            with cm.telemetry.call(result) as call:  # the call's chat span, drops included
                message, reply = await self._call(result)
                observed.call(result)
                call.answered(message, self.name)
                replies.append(reply)
                usage.append(self._log_usage(message, result))
                edits.append(CallEdits.of(message))
                self._deliver(self._cleared.line(self.name, result.branch, edits[-1]))
                self._tell_drops(message, result)
            stop_reason = getattr(message, "stop_reason", None)
            uses = [b for b in to_blocks(message) if isinstance(b, ToolUseBlock)]
            if not uses:
                break
            offered = _offered(self.head)
            results = [await self._run_tool(use, offered) for use in uses]
            calls.extend(
                ToolCall(u.id, u.name, dict(u.input), bool(r.is_error))
                for u, r in zip(uses, results, strict=True)
            )
            cm.add_message("user", results, metadata=self._asked())
            notices.extend(self._flush())
        else:
            log.warning("turn_call_limit", agent=self.name, calls=MAX_CALLS_PER_TURN)
        self._turn = None
        notices.extend(self._flush())
        observed.finish(self.name)
        compacted = await self._compact_at_end() or compacted
        return TurnResult(
            tuple(replies),
            tuple(calls),
            tuple(notices),
            stop_reason,
            tuple(usage),
            tuple(changes),
            tuple(edits),
            predicted_strips=observed.predicted,
            prediction_mismatches=observed.mismatches,
            compaction=compacted,
            compaction_usage=self._compaction_usage(compacted),
        )

    async def _compact_at_end(self) -> MessageId | None:
        """At a turn's end (no tool round open): compact now (foreground ``Compact``), or
        send the compaction request in the background (``Compact(background=True)``)."""
        client = self._client
        if client is None:
            return None
        strategy = self.context.strategy
        if isinstance(strategy, Compact) and strategy.background:
            self._background.start(self.context, client, self.name, self._retry)
            return None
        return await compact_if_due(self.context, client, self.name, self._retry)

    def _compaction_usage(self, block: MessageId | None) -> CallUsage | None:
        """The cost a stored compaction block records (its ``usage.iterations`` included)."""
        if block is None:
            return None
        raw = self.context.get_message(block).metadata.extra.get(USAGE_KEY)
        return usage_from(raw) if isinstance(raw, Mapping) else CallUsage()

    @property
    def background_compaction(self) -> str:
        """The agent's background compaction (``Compact(background=True)``): ``"idle"``,
        ``"running"`` (its request is sent and the turns go on) or ``"arrived"`` (its block
        is swapped in before the next call)."""
        return self._background.state

    async def settle_compaction(self) -> MessageId | None:
        """Wait for a background compaction that is running and swap its block in now, at a
        boundary (the next turn would otherwise swap it before its first call); its id, or
        ``None``. For a clean shutdown and for tests."""
        async with self._lock, self._hold():
            return await self._background.settle(self.context, self.name)

    def cancel_compaction(self, why: str = "cancelled") -> None:
        """Stop a background compaction that is running: nothing of it is stored, and the
        next turn past the trigger asks again (``Runtime.remove`` does this)."""
        if self._context is not None:
            self._background.cancel(self._context, why)

    def _log_usage(self, message: object, result: CompileResult) -> CallUsage:
        """The call's usage, logged as one ``call_usage`` event (info) for operators."""
        usage = usage_of(message) or CallUsage()
        log.info(
            CALL_USAGE_EVENT,
            agent=self.name,
            branch=result.branch,
            compile_id=result.compile_id,
            input_tokens=usage.input_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            output_tokens=usage.output_tokens,
        )
        return usage
