"""``ContextManager``: one agent's transcript on branches, compiled into requests.

Stateful, one per namespace per process. It owns the current branch, the per-branch compile
caches and the strip observers; everything durable lives in the ``Store``. Not safe for
concurrent use from several threads at once on the same namespace: one writer per namespace.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from context_manager._model._log import library_logger

from ._binding._drops import (
    MODEL_REASON,
    PlacedDrops,
    parse_input_transformations,
    place_thinking_drops,
)
from ._compile._caching import Caching
from ._compile._compactor import Compacting, Compactor
from ._compile._compiler import Compiler
from ._compile._fold import SUMMARY_KIND
from ._compile._observers import CompileObservers
from ._compile._resident import kept_hot
from ._compile._strategies import Passthrough, Strategy, estimate_tokens
from ._model._checks import (
    check_branch_name,
    check_not_empty,
    check_optional_sequence,
)
from ._model._content import Block
from ._model._editing import ContextEditing
from ._model._errors import (
    BranchExists,
    BranchInUse,
    BranchNotFound,
    InvalidValue,
)
from ._model._head import Head, ThinkingBinding
from ._model._inputs import check_compile_args, check_reply, coerced_content
from ._model._messages import MessageId, MessageMeta, Role, StoredMessage, check_role, coerce_meta
from ._model._process import PROCESS
from ._model._request import sdk_request
from ._model._results import CompileResult
from ._reasoning._capture import ReasoningCapture, resolve_without_sidecar
from ._reconcile import KeyCache, Reconciliation
from ._reconcile import reconcile as reconcile_params
from ._store._hold import HOLD_TIMEOUT_SECONDS, Hold, LocalHolds, holder_identity
from ._store._lineage import lineage_of
from ._store._opening import opening_branch
from ._store._protocol import BranchRecord, BranchRef, HoldStore, Lineage, Store, supports
from ._telemetry import OFF, Telemetry, telemetry_for

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

log = library_logger("context_manager")

Estimator: TypeAlias = Callable[[Any], int]
"""Token estimate of one wire message (a dict)."""

TracerProviderOption: TypeAlias = "TracerProvider | Telemetry | bool | None"
"""The ``tracer_provider=`` switch: a ``TracerProvider``, ``True`` (the application's global
one), a shared ``Telemetry``, or ``None`` / ``False`` (off: nothing is imported)."""


class ContextManager(CompileObservers, Compacting):
    """An agent's context: store it, branch it, compile it.

    Use ``ContextManager.open(store, namespace=...)``.
    """

    def __init__(
        self,
        store: Store,
        namespace: str,
        *,
        binding: ThinkingBinding,
        strategy: Strategy,
        estimator: Estimator | None = None,
        reasoning: ReasoningCapture | None = None,
        caching: Caching | None = None,
        telemetry: Telemetry | None = None,
        editing: ContextEditing | None = None,
    ) -> None:
        self.store: Store = store
        self.namespace: str = namespace
        self.binding: ThinkingBinding = binding
        self.strategy: Strategy = strategy
        self.estimator: Estimator = estimator or estimate_tokens
        self.caching: Caching = caching if caching is not None else Caching()
        """Where the compiler places prompt-cache breakpoints (``Caching``)."""
        self.editing: ContextEditing | None = editing
        """Server-side context editing added to every request (``ContextEditing``), or ``None``."""
        self.reasoning: ReasoningCapture | None = reasoning
        """The reasoning sidecar configuration (``ReasoningCapture``) or ``None``."""
        self.token: str = uuid.uuid4().hex
        self.telemetry: Telemetry = telemetry if telemetry is not None else OFF
        """The OpenTelemetry spans, events and metrics of this context (off by default)."""
        CompileObservers.__init__(self)
        self._async_locks: dict[str, tuple[asyncio.Lock, asyncio.AbstractEventLoop]] = {}
        self._branch = opening_branch(store, namespace)
        self._compiler = Compiler(self)
        self._compactor = Compactor(self, functools.partial(kept_hot, id(self._compiler)))
        self._compiler.on_release = self._compactor.release
        self._reconcile_keys: KeyCache = {}
        self.last_reconciliation: Reconciliation | None = None
        """What the last ``reconcile`` stored, edited, folded or rewound (``None`` before one)."""

    @classmethod
    def open(
        cls,
        store: Store,
        *,
        namespace: str = "default",
        binding: ThinkingBinding | None = None,
        strategy: Strategy | None = None,
        estimator: Estimator | None = None,
        reasoning: ReasoningCapture | None = None,
        caching: Caching | None = None,
        tracer_provider: TracerProviderOption = None,
        meter_provider: MeterProvider | None = None,
        editing: ContextEditing | None = None,
    ) -> ContextManager:
        """Open (or start) ``namespace`` in ``store``, on its current branch (``main`` when new).

        ``caching`` places prompt-cache breakpoints (default ``Caching()``: on, 5-minute TTL;
        ``Caching(enabled=False)`` sends only the host's own markers). ``editing`` adds
        server-side context editing (``context_management`` and its beta) to every request but
        a compaction request or one carrying a compaction block (default ``None``: off).
        ``tracer_provider``
        turns on OpenTelemetry (``docs/tracing.md``): a ``TracerProvider``, or ``True`` for the
        application's global one; ``meter_provider`` (default: the global one) gets the
        metrics. Off (the default), nothing imports ``opentelemetry``.

        Raises:
            TelemetryUnavailable: ``tracer_provider`` is given and ``opentelemetry-api`` is not
                installed (``pip install thinking-context-manager[otel]``).
        """
        if not isinstance(namespace, str) or not namespace:
            raise InvalidValue(
                f"namespace must be a non-empty string, got {namespace!r}; give the agent's name"
            )
        return cls(
            store,
            namespace,
            binding=binding or ThinkingBinding(),
            strategy=strategy or Passthrough(),
            estimator=estimator,
            reasoning=reasoning,
            caching=caching,
            telemetry=telemetry_for(tracer_provider, meter_provider),
            editing=editing,
        )

    # branches
    def _record(self, name: str) -> BranchRecord:
        for record in self.store.branches(self.namespace):
            if record.ref.name == name:
                return record
        raise BranchNotFound(name, [b.ref.name for b in self.store.branches(self.namespace)])

    def lineage(self, key: str | None = None) -> Lineage:
        """The segments the branch ``key`` (default: current) reads."""
        record = self._branch if key is None else self.store.branch_by_key(self.namespace, key)
        return lineage_of(record, lambda k: self.store.branch_by_key(self.namespace, k))

    def hold(self, *, timeout: float | None = None, holder: str | None = None) -> Hold:
        """Hold this agent for a whole turn or round, across processes and hosts.

        ``async with cm.hold():`` (or ``with``) around a host's own round keeps every other
        holder (the bundled runtime holds each turn) out until it ends, without a database
        transaction: writes inside commit as usual. See ``Store.hold``.

        Raises:
            AgentBusy: another holder kept the agent past ``timeout``; it is named.
        """
        if supports(self.store, HoldStore):
            return self.store.hold(self.namespace, timeout=timeout, holder=holder)
        # A store written against the protocol before holds: held in this process only.
        local = PROCESS.local_holds  # logged once per store
        if id(self.store) not in local:
            log.warning(
                "store_without_hold",
                store=type(self.store).__name__,
                effect="turns are held in this process only, not across processes or hosts",
            )
        holds: LocalHolds = local.setdefault(id(self.store), (self.store, LocalHolds()))[1]
        wait = HOLD_TIMEOUT_SECONDS if timeout is None else timeout
        return holds.hold(self.store, self.namespace, wait, holder_identity(holder))

    def current_branch(self) -> BranchRef:
        """The branch compiles and writes go to."""
        return self._branch.ref

    def current_branch_key(self) -> str:
        return self._branch.key

    def list_branches(self) -> list[BranchRef]:
        """Live branches, oldest first."""
        return [b.ref for b in self.store.branches(self.namespace)]

    def branch_head(self) -> tuple[str, int]:
        """``(branch key, head sequence)`` of the current branch (0 when empty)."""
        return self._branch.key, self.store.last_sequence(self.namespace, self.lineage())

    def fork(self, name: str) -> BranchRef:
        """Branch at the current head and switch to it.

        Raises:
            BranchExists: a live branch has that name.
            InvalidBranchName: ``name`` is not a non-empty string (the same on every store).
        """
        check_branch_name(name)
        _, head = self.branch_head()
        record = self.store.create_branch(
            self.namespace, name, parent=self._branch.key, fork_sequence=head
        )
        self._switch(record)
        log.info("branch_forked", namespace=self.namespace, branch=name, at=head)
        return record.ref

    def branch_at(self, message_id: MessageId, name: str) -> BranchRef:
        """Branch at ``message_id`` (visible on the current branch) without switching.

        Raises:
            MessageNotFound: no such message.
            InvalidValue: the message is not visible on the current branch.
            InvalidBranchName: ``name`` is not a non-empty string.
        """
        check_branch_name(name)
        message = self.get_message(message_id)
        visible = self.store.read(
            self.namespace, self.lineage(), after=message.sequence - 1, upto=message.sequence
        )
        if not visible:
            raise InvalidValue(
                f"message {message_id!r} is not on branch {self._branch.ref.name!r}; "
                "switch to a branch that has it"
            )
        if any(b.ref.name == name for b in self.store.branches(self.namespace)):
            raise BranchExists(name)
        record = self.store.create_branch(
            self.namespace, name, parent=self._branch.key, fork_sequence=message.sequence
        )
        return record.ref

    def switch_branch(self, name: str) -> BranchRef:
        """Make ``name`` current; switching to the current branch is a no-op."""
        check_branch_name(name)
        if name == self._branch.ref.name:
            return self._branch.ref
        self._switch(self._record(name))
        return self._branch.ref

    def _switch(self, record: BranchRecord) -> None:
        self.store.set_current_branch(self.namespace, record.ref.name)
        self._branch = record

    def delete_branch(self, name: str) -> BranchRef:
        """Hide ``name`` (its messages stay stored). Raises ``BranchInUse`` for the current one."""
        check_branch_name(name)
        if name == self._branch.ref.name:
            raise BranchInUse(name)
        record = self.store.delete_branch(self.namespace, name)
        self._compiler.forget(record.key)
        self._async_locks.pop(record.key, None)
        for observer in list(self._deletion_observers):
            try:
                observer(record.key)
            except Exception as err:  # an observer never fails the deletion
                log.warning("branch_observer_failed", namespace=self.namespace, error=repr(err))
        log.info("branch_deleted", namespace=self.namespace, branch=name, key=record.key)
        return record.ref

    # messages
    def add_message(
        self,
        role: Role,
        content: object,
        metadata: MessageMeta | dict[str, Any] | None = None,
    ) -> MessageId:
        """Store a message on the current branch; returns its id.

        Raises:
            InvalidValue: unknown role (also a ``ValueError``).
            InvalidType: content is not blocks or wire dicts, or the metadata is not a dict
                (also a ``TypeError``; the message names the item).
            InvalidContent: a malformed block (``{"type": "text", "text": 5}``) or a user or
                system message with nothing to send (``""``); nothing is written.
        """
        checked = check_role(role)
        where = f"{checked} message"
        blocks = coerced_content(content, where)
        meta = coerce_meta(metadata)
        # an assistant message is a record of what the model said, an empty answer included
        # (sent with a placeholder), and a summary marks what a fold covers (a host fold with no
        # text to keep stores an empty one); any other message with nothing in it is a mistake
        check_not_empty(
            blocks,
            where,
            allowed=checked == "assistant"
            or meta.kind == SUMMARY_KIND
            or (checked == "system" and "output_config" in meta.extra),
        )
        message_id = self.store.append(self.namespace, self._branch.key, checked, blocks, meta).id
        self.telemetry.stored(self._branch.key, message_id, meta, blocks)
        return message_id

    def get_message(self, message_id: MessageId) -> StoredMessage:
        """The stored message. Raises ``MessageNotFound``."""
        return self.store.get(self.namespace, message_id)

    def messages(
        self,
        branch: str | None = None,
        kind: str | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[StoredMessage]:
        """Messages visible on ``branch`` (name; default current), oldest first.

        ``kind`` filters on ``metadata.kind``; ``since`` keeps sequences above it; ``limit``
        keeps the first that many. Cost: O(log n + returned).

        Raises:
            BranchNotFound: no live branch ``branch``.
            InvalidType: ``since`` or ``limit`` is not an int (``since="a"``).
        """
        since = check_optional_sequence(since, "since")
        limit = check_optional_sequence(limit, "limit")
        key = self._record(branch).key if branch is not None else self._branch.key
        return self.store.read(
            self.namespace, self.lineage(key), after=since, kind=kind, limit=limit
        )

    def edit_message(self, message_id: MessageId, content: object) -> StoredMessage:
        """Replace a message's content (the earlier revision is kept in the store).

        Every later compile that renders it sees the change; thinking bound after it strips
        with cause ``messages``.

        Raises:
            MessageNotFound: no such message.
            InvalidContent: a malformed block; nothing is written.
        """
        blocks = coerced_content(content, f"message {message_id}")
        edited = self.store.edit(self.namespace, message_id, blocks)
        self._compactor.edited()  # a background compaction running now is abandoned
        return edited

    def forget_cache(self, key: str | None = None) -> None:
        """Drop what is held in memory for branch ``key`` (its render state, binding record,
        the stamps only it read, its compile lock), or for every branch when ``key`` is
        ``None``; the next compile re-reads them from the store. Call when a fork's or a run's
        work ends (the runtime does, for ``Agent.forked`` and ``Runtime.ephemeral``)."""
        if key is None:
            self._reconcile_keys.clear()
            self._compiler.forget_all()
            self._async_locks.clear()
            return
        self._compiler.forget(key)
        self._async_locks.pop(key, None)

    def _notify(self, result: CompileResult) -> CompileResult:
        self._compactor.note(result)  # the request a compaction repeats (rule 25)
        return super()._notify(result)

    # compile and replies (see _compile)
    def compile(
        self, head: Head, *, budget: int | None = None, dry_run: bool = False
    ) -> CompileResult:
        """Build the next request. See ``Compiler.compile``; observers hear its strip.

        ``result.request`` is a plain dict for ``client.beta.messages.create(**request)`` and
        ``client.beta.messages.stream(**request)``: a setting the installed SDK has no keyword
        for (``temperature``, ``top_p``, ``top_k``, anything newer) rides in ``extra_body``.

        Raises:
            InvalidType: ``head`` is not a ``Head``, or ``budget`` is not an int.
            InvalidValue: ``budget`` is 0 or less.
        """
        check_compile_args(head, budget)
        with self.telemetry.compiling(dry_run) as span:
            compiled = self._compiler.compile(head, budget=budget, dry_run=dry_run)
            result = self._notify(_for_the_sdk(compiled))
            self.telemetry.compiled(span, result, self.get_message)
            return result

    async def compile_async(
        self, head: Head, *, budget: int | None = None, dry_run: bool = False
    ) -> CompileResult:
        """``compile`` for hosts whose summarizer is async."""
        check_compile_args(head, budget)
        key = self._branch.key
        lock, loop = self._async_locks.get(key, (None, None))
        running = asyncio.get_running_loop()
        if lock is None or loop is not running:  # a lock serves the loop it was made on
            lock = asyncio.Lock()
            self._async_locks[key] = (lock, running)
        async with lock:  # one compile at a time per branch: one fold, one strip
            with self.telemetry.compiling(dry_run) as span:
                compiled = await self._compiler.compile_async(head, budget=budget, dry_run=dry_run)
                result = self._notify(_for_the_sdk(compiled))
                self.telemetry.compiled(span, result, self.get_message)
                return result

    def reconcile(
        self,
        params: Mapping[str, Any],
        *,
        dry_run: bool = False,
        follow_window: bool | None = None,
        boundary: Callable[[Reconciliation], None] | None = None,
    ) -> CompileResult:
        """Turn a framework's Messages API parameters for one call into this library's request.

        ``params`` are the body fields the framework built (``model``, ``system``, ``tools``,
        ``messages``, ``thinking``, ``betas``, settings). What is new at the end of ``messages``
        is stored; the framework's copy of a recorded reply is matched to it (its recorded bytes
        go out); a changed ``system`` or ``tools`` is appended as a change (SPEC 7b); an edit of
        an earlier message is stored as an edit; fewer messages than before start a new branch
        at the last one still sent. A framework that drops old messages or writes its own
        summary is followed as a host fold (its kept turns' thinking strips, reported) when
        ``follow_window`` is true, the default with ``Passthrough``; with a ``Window`` or a
        ``Fold`` the library manages the window and ignores the framework's truncation.
        Library-owned messages (``metadata.kind`` set) never count as the framework's.
        ``boundary(reconciliation)`` runs after the messages are stored, before the compile.
        The framework's betas are joined to the request's. ``last_reconciliation`` says what
        was done.

        Raises:
            FrameworkParamsInvalid: ``params`` has no model, no messages list, or a
                server-held ``thread`` (a ``ValueError``).
        """
        follow = isinstance(self.strategy, Passthrough) if follow_window is None else follow_window

        def compile(head: Head, dry: bool) -> CompileResult:
            return _for_the_sdk(self._compiler.compile(head, budget=None, dry_run=dry))

        with self.telemetry.compiling(dry_run) as span:  # the compile span covers the reading
            done, result = reconcile_params(
                self,
                params,
                compile=compile,
                follow_window=follow,
                dry_run=dry_run,
                boundary=boundary,
                keys=self._reconcile_keys,
            )
            if not dry_run:
                self.last_reconciliation = done
            result = self._notify(result)
            self.telemetry.compiled(span, result, self.get_message)
            return result

    def record_reply(
        self,
        message: object,
        result: CompileResult,
        *,
        appended: Sequence[object] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> MessageId:
        """Store an assistant reply and stamp its thinking. See ``Compiler.record_reply``.

        ``extra`` joins the reply's ``metadata.extra`` (beside its usage; the runtime records
        the turn's asker there). Then calls the ``on_reply_recorded`` observers.

        Raises:
            InvalidType: ``message`` is a bare string (a reply is the SDK message, the response
                body or its content blocks), or ``result`` is not a ``CompileResult``.
            InvalidContent: a malformed block; nothing is written.
        """
        check_reply(message, result)
        message_id = self._compiler.record_reply(message, result, appended=appended, extra=extra)
        for observer in list(self._reply_observers):
            try:
                observer(message_id, result)
            except Exception as err:  # an observer never fails the recording
                log.warning(
                    "reply_observer_failed",
                    namespace=self.namespace,
                    message_id=message_id,
                    error=repr(err),
                )
        return message_id

    @property
    def prediction_mismatches(self) -> int:
        """``ThinkingBinding(enforcement="observe")``: how many of the compiler's predictions
        the provider's ``thinking_mismatch_allowed`` reports contradicted, over every reply this
        manager recorded (each is a ``binding_prediction_mismatch`` warning); 0 otherwise."""
        return self._compiler.prediction_mismatches

    def release_thinking(self, message_id: MessageId, from_block: int = 0) -> None:
        """Release a reply's thinking on the current branch from ``from_block`` on.

        It shows in the next committing compile's strip and is never sent again on this branch.
        """
        self.get_message(message_id)
        self.store.add_release(
            self.namespace,
            self._branch.key,
            message_id,
            from_block,
            at_sequence=self.branch_head()[1],
        )
        self._compiler.wrote_binding()
        self._compiler.invalidate(self._branch.key)
        self.telemetry.released(self._branch.key, message_id, from_block)

    def place_drops(
        self, response: object, result: CompileResult, *, rounds: Sequence[object] = ()
    ) -> PlacedDrops:
        """Place a response's dropped thinking and release what will never verify again.

        Args:
            response: the SDK message, a dict, or the ``input_transformations`` list.
            result: the ``CompileResult`` whose request was sent.
            rounds: the messages sent after the compiled ones (a multi-round stream).

        Returns:
            ``PlacedDrops`` (``context_manager._drops``). Prefix drops are released on
            ``result.branch`` from their block on; model, organization and end-user drops are
            kept (sent again they drop again at no cost, and later blocks keep their order).
            A model drop of a block the compile sent knowing the model cannot read it
            (``result.unreadable``, already reported in a strip) is expected: not placed.
        """
        drops = parse_input_transformations(response)
        if result.unreadable:
            expected = frozenset(result.unreadable)
            kept = tuple(d for d in drops if d.reason != MODEL_REASON or d.path not in expected)
            if len(kept) < len(drops):
                log.debug("thinking_dropped_as_expected", count=len(drops) - len(kept))
            drops = kept
        placed = place_thinking_drops(
            drops,
            result.provenance,
            rounds,
            find_signature=lambda digest: self.store.find_signature(self.namespace, digest),
        )
        releases = placed.releases()
        for message_id, block in releases:
            self.store.add_release(
                self.namespace, result.branch, message_id, block, at_sequence=result.last_sequence
            )
            self._compiler.wrote_binding()
        if releases:  # only a release changes what the branch renders
            self._compiler.invalidate(result.branch)
        self.telemetry.drops_placed(placed, releases, result.branch)
        return placed

    # reasoning sidecar hooks (see ReasoningCapture)
    def capture_reasoning(
        self, blocks: tuple[Block, ...], result: CompileResult
    ) -> tuple[Block, ...]:
        """The reply's blocks as stored: readable thinking moved to the sidecar (fail-closed)."""
        if self.reasoning is None:
            return blocks
        return self.reasoning.capture(self.namespace, blocks, result)

    def resolve_reasoning(self, block: Block) -> Block | None:
        """A stored thinking block as it was sent, or ``None`` when its text cannot be had."""
        if self.reasoning is None:
            return resolve_without_sidecar(block)
        return self.reasoning.resolve(self.namespace, block)


def _for_the_sdk(result: CompileResult) -> CompileResult:
    """``result`` whose request the installed SDK takes as keywords (``sdk_request``)."""
    request = sdk_request(result.request)
    if request.keys() == result.request.keys():
        return result
    return attrs.evolve(result, request=request)
