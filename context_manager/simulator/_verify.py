"""Verifying the signed blocks of a request, in request order, against what the model sees.

Pure functions. A block's prefix is every earlier block that survives (blocks that failed before it
are removed first), so removing one block makes every later block made while it was present fail
too, and never one made after it was already gone. Paths index the request as sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._api import DROP_REASONS, REDACTED_THINKING, SIGNED_TYPES, THINKING, block_path
from ._canon import CHAIN_START, chain_step, head_digest, model_family
from ._errors import InvalidRequest
from ._sign import Binding, binding_failure, decode, is_sealed

BlockPredicate = Callable[[int, int, Mapping[str, Any]], bool]
"""``predicate(i, j, block)``: does a forced drop take the block at ``messages[i].content[j]``?"""


@attrs.frozen
class BlockCheck:
    """The outcome of checking one signed block.

    Attributes:
        path: ``(i, j)`` of the block in the request as sent.
        block_type: ``"thinking"`` or ``"redacted_thinking"``.
        reason: ``None`` when the block verifies, else the drop reason
            (``"prefix_binding_mismatch"``, ``"model_binding_mismatch"``, ...).
        forced: the reason came from a forced drop (``Simulator.force_drop``), not the check.
    """

    path: tuple[int, int]
    block_type: str
    reason: str | None
    forced: bool = False

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
    """Blocks one call must drop with ``reason`` even if they verify.

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
    """A request checked: every signed block's outcome, the messages the model sees, and the chain
    value after the last block seen (what a reply's first block is bound to)."""

    checks: tuple[BlockCheck, ...]
    messages: list[dict[str, Any]]
    chain: bytes = CHAIN_START

    @property
    def dropped(self) -> tuple[BlockCheck, ...]:
        """The checks that failed, in request order."""
        return tuple(check for check in self.checks if not check.ok)


@attrs.frozen
class Verifier:
    """The key and model families blocks are signed and checked with."""

    key: bytes
    families: Mapping[str, str] = attrs.field(factory=dict)

    def head_of(self, body: Mapping[str, Any]) -> tuple[str, str]:
        """The model family and bound-head digest of the request ``body`` (computed once)."""
        family = model_family(str(body.get("model", "")), self.families)
        return family, head_digest(body.get("system"), body.get("tools"))


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


def _refuse_invalid(i: int, j: int, block_type: str) -> InvalidRequest:
    field = signature_field(block_type)
    return InvalidRequest(
        f"{block_path(i, j)}: Invalid `{field}` in `{block_type}` block: it is empty, malformed "
        f"or was not made by this API; send `{block_type}` blocks back exactly as received"
    )


def refuse_failed(check: BlockCheck) -> InvalidRequest:
    """The error-mode 400 for a block that failed its binding check."""
    return InvalidRequest(
        f"{check.path_text}: this `{check.block_type}` block does not verify against this request "
        f"({check.reason}): the model or the conversation before it differs from the one it was "
        "made in. Send it with the exact prefix it was made after, remove it and every later "
        'thinking block, or set thinking.block_binding.prefix_mismatch_behavior to "drop_block"'
    )


def _check_block(
    verifier: Verifier,
    binding: Binding,
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
    natural = binding_failure(verifier.key, payload, binding)
    forced_reasons = [f.reason for f in forced if f.takes(*at, block)]
    reasons = [r for r in (natural, *forced_reasons) if r is not None]
    if not reasons:
        return BlockCheck(at, block_type, None)
    reason = min(reasons, key=DROP_REASONS.index)
    return BlockCheck(at, block_type, reason, forced=reason != natural)


def walk(
    verifier: Verifier,
    body: Mapping[str, Any],
    *,
    forced: Sequence[ForcedDrop] = (),
    stop_on_failure: bool = False,
    stop_at: tuple[int, int] | None = None,
) -> Walk:
    """Check every signed block of ``body`` in order, removing each one that fails.

    Args:
        verifier: key and model families.
        body: a request body that passed validation (``messages`` is a list of message dicts).
        forced: forced drops applied on top of the checks.
        stop_on_failure: raise the error-mode 400 at the first failing block.
        stop_at: stop right after checking the block at this ``(i, j)``.

    Returns:
        The checks in request order and the messages as the model sees them (content lists with
        failed blocks removed; a string content is kept as sent).

    Raises:
        InvalidRequest: a signed block's signature is empty, malformed or not this simulator's
            (whatever the mode), or, with ``stop_on_failure``, a block fails its check.

    Cost: O(size of the request).
    """
    family, head = verifier.head_of(body)
    chain = CHAIN_START
    checks: list[BlockCheck] = []
    seen: list[dict[str, Any]] = []
    messages = body.get("messages", [])
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        role = str(message.get("role", ""))
        kept: list[Any] = []
        for j, block in enumerate(content_blocks(message.get("content"))):
            if isinstance(block, Mapping) and block.get("type") in SIGNED_TYPES:
                binding = Binding(family, head, chain, role)
                check = _check_block(verifier, binding, (i, j), block, forced)
                checks.append(check)
                if stop_on_failure and not check.ok:
                    raise refuse_failed(check)
                if stop_at == (i, j):
                    return Walk(tuple(checks), seen, chain)
                if not check.ok:
                    continue
            kept.append(block)
            chain = chain_step(chain, role, block)
        content = message.get("content")
        seen.append({**message, "content": content if isinstance(content, str) else kept})
    return Walk(tuple(checks), seen, chain)
