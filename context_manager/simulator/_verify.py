"""Verifying the signed blocks of a request, oldest first, by the documented rules.

Pure functions. For each signed block (provider rules 1-4, 8, 10-13): a bad signature is a 400;
then the organization, end-user and model checks (drops, never 400s); then, on a model that runs
it (not Mythos 5.1 or a model before Fable 5.1), the prefix check (the
bound head and the non-thinking content before it) and the order check (no thinking block
precedes it in the request as sent, or the nearest one is the one it recorded: a block the API
drops still counts, so a switch back to a model that reads it reads every block made meanwhile).
A prefix or order failure is a 400 (``"error"``), removes the block and every later thinking
block (``"drop_block"``), or reaches the model and is reported (an unenforced account,
``"allow"``). Paths index the request
as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._api import (
    DROP_MODE,
    DROP_REASONS,
    END_USER_MISMATCH,
    ERROR_MODE,
    MODEL_MISMATCH,
    ORGANIZATION_MISMATCH,
    PREFIX_MISMATCH,
    REDACTED_THINKING,
    SIGNED_TYPES,
    THINKING,
    block_path,
)
from ._canon import CHAIN_START, chain_step, head_digest
from ._compaction import CoverageLookup, resume
from ._errors import InvalidRequest
from ._models import PrefixCheck, Readability, documented_prefix_check
from ._sign import Binding, block_digest, decode, is_sealed, prefix_matches
from ._system import CLEAR_NEVER, added_tool_name

ALLOW_MODE = "allow"
"""An unenforced account's behaviour: a failing block reaches the model and is reported."""

BlockPredicate = Callable[[int, int, Mapping[str, Any]], bool]
"""``predicate(i, j, block)``: does a forced drop take the block at ``messages[i].content[j]``?"""


@attrs.frozen
class BlockCheck:
    """The outcome of checking one signed block.

    Attributes:
        path: ``(i, j)`` of the block in the request as sent.
        block_type: ``"thinking"`` or ``"redacted_thinking"``.
        reason: ``None`` when the block verifies, else the failure reason
            (``"prefix_binding_mismatch"``, ``"model_binding_mismatch"``, ...).
        forced: the reason came from a forced drop (``Simulator.force_drop``), not the check.
        allowed: the block failed but reached the model (an unenforced account).
    """

    path: tuple[int, int]
    block_type: str
    reason: str | None
    forced: bool = False
    allowed: bool = False

    @property
    def ok(self) -> bool:
        """True when the block verifies (and is kept)."""
        return self.reason is None

    @property
    def path_text(self) -> str:
        """The API's path, ``messages.{i}.content.{j}``."""
        return block_path(*self.path)


@attrs.frozen
class ForcedDrop:
    """Blocks one call must fail with ``reason`` even if they verify.

    With neither ``paths`` nor ``predicate`` every signed block is taken; otherwise a block is
    taken when its ``(i, j)`` is in ``paths`` or ``predicate(i, j, block)`` is true.
    """

    reason: str
    paths: frozenset[tuple[int, int]] | None = None
    predicate: BlockPredicate | None = None

    def takes(self, i: int, j: int, block: Mapping[str, Any]) -> bool:
        """Does this forced drop take the block at ``messages[i].content[j]``?"""
        if self.paths is None and self.predicate is None:
            return True
        if self.paths is not None and (i, j) in self.paths:
            return True
        return self.predicate is not None and bool(self.predicate(i, j, block))


@attrs.frozen
class Walk:
    """A request checked.

    Attributes:
        checks: every signed block's outcome, in request order.
        messages: the messages as the model sees them (removed blocks and cleared system
            messages left out; a string content kept as sent).
        head: the bound-head digest after the last message (deferred tools added so far).
        chain: the content chain after the last message (what a reply's first block binds to).
        predecessor: the digest of the last thinking block in the request as sent (dropped or
            not), or ``None``: what a reply's first thinking block records.
        legacy: the kept turns' chains after the last message (a compaction block first and
            rule 25's conditions holding), else empty.
        added: the deferred tools a ``tool_addition`` added (or the compaction carried over).
    """

    checks: tuple[BlockCheck, ...]
    messages: list[dict[str, Any]]
    head: str = ""
    chain: bytes = CHAIN_START
    predecessor: bytes | None = None
    legacy: tuple[bytes, ...] = ()
    added: frozenset[str] = frozenset()

    @property
    def dropped(self) -> tuple[BlockCheck, ...]:
        """The checks whose block was removed, in request order."""
        return tuple(c for c in self.checks if not c.ok and not c.allowed)

    @property
    def allowed(self) -> tuple[BlockCheck, ...]:
        """The checks whose block failed but reached the model, in request order."""
        return tuple(c for c in self.checks if c.allowed)


@attrs.frozen
class Verifier:
    """What blocks are signed and checked with: the key, the readability table, and the
    organization and end user requests are made under."""

    key: bytes
    readable: Readability
    organization: str = ""
    end_user: str = ""
    runs_prefix_check: PrefixCheck = documented_prefix_check
    """Whether the requested model runs the prefix and order checks (provider rule 10)."""
    compactions: CoverageLookup | None = None
    """What each compaction block covered, by nonce (``_compaction.CompactionLedger.lookup``)."""

    def binding(self, model: str, head: str, chain: bytes, predecessor: bytes | None) -> Binding:
        """What a reply's first block made now by ``model`` is bound to."""
        return Binding(model, self.organization, self.end_user, head, chain, predecessor)


def content_blocks(content: Any) -> list[Any]:
    """Message content as sent, as a list (a non-empty string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return list(content)
    return []


def own_text(block: Mapping[str, Any]) -> str:
    """The text a block's seal covers: a thinking block's ``thinking``, else ``""``."""
    text = block.get("thinking", "") if block.get("type") == THINKING else ""
    return text if isinstance(text, str) else "\x00not text"


def signature_field(block_type: str) -> str:
    """Where a signed block keeps its signature: ``signature``, or ``data`` when redacted."""
    return "data" if block_type == REDACTED_THINKING else "signature"


def signature_of(block: Mapping[str, Any]) -> str:
    """The signature (or redacted ``data``) of a signed block, ``""`` when absent."""
    value = block.get(signature_field(str(block.get("type"))))
    return value if isinstance(value, str) else ""


def digest_of(block: Mapping[str, Any]) -> bytes:
    """The digest a later block records when ``block`` is its predecessor."""
    return block_digest(str(block.get("type")), signature_of(block))


def _refuse_invalid(i: int, j: int, block_type: str) -> InvalidRequest:
    field = signature_field(block_type)
    return InvalidRequest(
        f"{block_path(i, j)}: Invalid `{field}` in `{block_type}` block: it is empty, malformed "
        f"or was not made by this API; send `{block_type}` blocks back exactly as received"
    )


def refuse_failed(check: BlockCheck) -> InvalidRequest:
    """The error-mode 400 for a block that failed its prefix or order check, worded as [PT]
    documents its beginning (code that matches the leading clause recognises it), then a
    sentence naming what may have changed."""
    return InvalidRequest(
        f"{check.path_text}: Invalid `signature` in `{check.block_type}` block. The block is "
        "bound to a different conversation. Remove the block, or set "
        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block". The system prompt, '
        "tools or messages before it differ from the ones it was created with, or a thinking "
        f"block before it was removed ({check.reason})."
    )


def best_reason(reasons: Sequence[str]) -> str | None:
    """The reason the API reports when several apply (provider rule 11)."""
    return min(reasons, key=DROP_REASONS.index) if reasons else None


@attrs.define
class _State:
    """The walk's running values: bound head, content chain, last thinking block sent."""

    system: Any
    tools: Any
    added: set[str] = attrs.field(factory=set)
    head: str = ""
    chain: bytes = CHAIN_START
    last_sent: bytes | None = None
    cascading: bool = False
    legacy: list[bytes] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.head = head_digest(self.system, self.tools, self.added)

    def step(self, role: str, block: Any) -> None:
        """Join ``block`` (sent under ``role``) to the live chain and every legacy chain."""
        self.chain = chain_step(self.chain, role, block)
        self.legacy = [chain_step(chain, role, block) for chain in self.legacy]

    def matches(self, key: bytes, payload: Any) -> bool:
        """True when ``payload`` was made after this head and the live or a legacy chain."""
        return any(prefix_matches(key, payload, self.head, c) for c in (self.chain, *self.legacy))

    def add_tool(self, name: str) -> None:
        if name not in self.added:
            self.added.add(name)
            self.head = head_digest(self.system, self.tools, self.added)


def _check_block(
    verifier: Verifier,
    state: _State,
    model: str,
    at: tuple[int, int],
    block: Mapping[str, Any],
    forced: Sequence[ForcedDrop],
) -> BlockCheck:
    block_type = str(block.get("type"))
    payload = decode(block.get(signature_field(block_type)))
    if payload is None or not is_sealed(
        verifier.key, payload, block_type=block_type, own_text=own_text(block)
    ):
        raise _refuse_invalid(*at, block_type)
    natural: list[str] = []
    if payload.organization != verifier.organization:
        natural.append(ORGANIZATION_MISMATCH)
    if payload.end_user != verifier.end_user:
        natural.append(END_USER_MISMATCH)
    if not verifier.readable(model, payload.model):
        natural.append(MODEL_MISMATCH)
    in_order = state.last_sent is None or state.last_sent == payload.predecessor
    if verifier.runs_prefix_check(model) and (
        state.cascading or not (in_order and state.matches(verifier.key, payload))
    ):
        natural.append(PREFIX_MISMATCH)
    forced_reasons = [f.reason for f in forced if f.takes(*at, block)]
    reason = best_reason([*natural, *forced_reasons])
    return BlockCheck(at, block_type, reason, forced=reason not in (None, *natural))


def _system_step(state: _State, message: Mapping[str, Any], blocks: Sequence[Any]) -> None:
    for block in blocks:
        name = added_tool_name(block)
        if name is not None:
            state.add_tool(name)
    clear_at = message.get("clear_at", CLEAR_NEVER)
    if clear_at != CLEAR_NEVER:
        state.step("system", {"clear_at": clear_at})


def _cleared(messages: Sequence[Any]) -> set[int]:
    """Indices of ``clear_at: "next_user_message"`` system messages a later user message hides."""
    hidden: set[int] = set()
    pending: list[int] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "user":
            hidden.update(pending)
            pending = []
        elif role == "system" and message.get("clear_at") == "next_user_message":
            pending.append(i)
    return hidden


def walk(
    verifier: Verifier,
    body: Mapping[str, Any],
    *,
    mode: str = DROP_MODE,
    forced: Sequence[ForcedDrop] = (),
    stop_at: tuple[int, int] | None = None,
) -> Walk:
    """Check every signed block of ``body`` oldest first.

    Args:
        verifier: key, readability and the requesting organization / end user.
        body: a request body that passed validation (``messages`` is a list of message dicts).
        mode: ``"error"``, ``"drop_block"`` or ``"allow"`` (an unenforced account).
        forced: forced failures applied on top of the checks.
        stop_at: stop right after checking the block at this ``(i, j)``.

    Returns:
        The checks and the request as the model sees it.

    Raises:
        InvalidRequest: a signed block's signature is empty, malformed, forged or not this
            simulator's (in every mode), or, in ``"error"`` mode, a block fails its prefix or
            order check.

    Cost: O(size of the request).
    """
    model = str(body.get("model", ""))
    state = _State(body.get("system"), body.get("tools"))
    resumed = resume(verifier.key, verifier.compactions, body)
    first = 0
    if resumed is not None:
        start = resumed[0]
        state = _State(body.get("system"), body.get("tools"), set(start.added))
        state.chain, state.legacy = start.chain, list(start.legacy)
        first = start.start
    checks: list[BlockCheck] = []
    seen: list[dict[str, Any]] = []
    messages = body.get("messages", [])
    messages = messages if isinstance(messages, list) else []
    hidden = _cleared(messages)
    for i, message in enumerate(messages):
        if i < first:
            continue  # before the newest threshold compaction block: the API ignores it
        role = str(message.get("role", ""))
        kept: list[Any] = []
        blocks = content_blocks(message.get("content"))
        for j, block in enumerate(blocks):
            if resumed is not None and (i, j) == (first, 0):
                kept.append(block)  # the summary: the chain restarts from it (``resume``)
                continue
            if not (isinstance(block, Mapping) and block.get("type") in SIGNED_TYPES):
                kept.append(block)
                state.step(role, block)
                continue
            check = _check_block(verifier, state, model, (i, j), block, forced)
            if check.reason == PREFIX_MISMATCH:
                if mode == ERROR_MODE:
                    raise refuse_failed(check)
                if mode == ALLOW_MODE:
                    check = attrs.evolve(check, allowed=True)
                else:
                    state.cascading = True
            checks.append(check)
            if stop_at == (i, j):
                return _walked(checks, seen, state)
            if check.ok or check.allowed:
                kept.append(block)
            state.last_sent = digest_of(block)
        if role == "system":
            _system_step(state, message, blocks)
        if i in hidden:
            continue
        content = message.get("content")
        seen.append({**message, "content": content if isinstance(content, str) else kept})
    return _walked(checks, seen, state)


def _walked(checks: list[BlockCheck], seen: list[dict[str, Any]], state: _State) -> Walk:
    return Walk(
        tuple(checks),
        seen,
        state.head,
        state.chain,
        state.last_sent,
        tuple(state.legacy),
        frozenset(state.added),
    )


def behavior(body: Mapping[str, Any], *, enforced: bool) -> str:
    """The mode a request is checked in (provider rules 10, 13).

    ``thinking.block_binding.prefix_mismatch_behavior`` when the request sets it; otherwise
    ``"error"`` on an enforced account and ``"allow"`` on an unenforced one. [PT]: older accounts
    are enforced "only on requests that set `thinking.block_binding.prefix_mismatch_behavior`",
    and [SDK]: an empty ``block_binding`` "means every default", so ``{}`` opts in to nothing.
    """
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, Mapping) else None
    if isinstance(binding, Mapping) and binding.get("prefix_mismatch_behavior") is not None:
        return str(binding["prefix_mismatch_behavior"])
    return ERROR_MODE if enforced else ALLOW_MODE
