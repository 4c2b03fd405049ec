"""Compaction blocks: their wire shape, their signature, what each one covered, and where a
request that carries one resumes the binding (provider rules 24-27).

Pure functions plus one stateful class (``CompactionLedger``, its own lock). A block is
``{"type": "compaction", "content": <summary>, "signature": <sig>}`` (``cache_control`` may be
added); the signature is ``MAGIC | nonce | id MAC | seal``: the id MAC (HMAC over the nonce)
tells a block of this simulator from anything else (``compaction_signature_invalid``), the seal
(HMAC over the nonce and the summary) tells an edited summary (``compaction_content_mismatch``).

An unsigned block (``{"type": "compaction", "content": ...}``: the API returns threshold
compaction's blocks so, and pydantic-ai sent one back with a 200) is taken as a threshold block:
its summary is not checked and nothing before it is carried forward.

Binding after the block: the content chain restarts from the block itself (``anchored_chain``),
so thinking produced after it is bound to it and to nothing else. The kept turns' thinking was
made on the full history; it stays valid through a *legacy* chain: the chain values the walk had
at the end of the compaction request, remembered by nonce in the ledger, continued over the kept
turns. A legacy chain is used only while rule 25's conditions hold (``resume``): the compaction ran
on a model that runs the prefix check, the first kept message has another role than the last
summarized one and is not a system message, and the top-level ``system`` and non-deferred
``tools`` equal the compaction request's. Invariant (``_check``): at most ``capacity`` records.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._canon import CHAIN_START, chain_step, head_digest
from ._errors import InvalidRequest

COMPACTION_BETA = "compact-2026-09-04"
"""On-demand compaction: the ``compaction`` parameter and every request carrying a block."""

COMPACTION = "compaction"
"""The block type and the ``stop_reason`` of a successful compaction request."""

BLOCK_FIELDS = frozenset({"type", "content", "signature"})
"""Fields a compaction block is returned with and must be sent back with, exactly."""

THRESHOLD_BETAS = frozenset({"compact-2026-01-12"})
"""Threshold compaction's beta: its blocks may be carried with it instead of the on-demand one."""

OPTIONAL_FIELDS = frozenset({"cache_control"})
"""Fields a client may add to a block (a prompt-cache breakpoint after the summary)."""

MAGIC = b"cmsimc"
"""Marks an on-demand compaction block's signature."""
THRESHOLD_MAGIC = b"cmsimt"
"""Marks a threshold compaction block's (``compact_20260112``): it may follow what it summarizes."""
NONCE_BYTES = 16
ID_BYTES = 16
SEAL_BYTES = 32
DEFAULT_CAPACITY = 10_000
"""Compactions remembered; an older block still works as a summary, but its kept turns'
thinking no longer verifies (the simulator has forgotten what it covered)."""


@attrs.frozen
class Coverage:
    """What one compaction request covered, as the binding needs it.

    Attributes:
        chains: the content chains at the end of the compaction request (the live one first,
            then any legacy chains still valid there).
        added: deferred tools a ``tool_addition`` had added by the end of the range.
        head_base: digest of the request's ``system`` and non-deferred ``tools``.
        last_role: the role of the last message summarized.
        preserving: the compaction ran on a model that runs the prefix check.
        messages: how many messages it summarized.
    """

    chains: tuple[bytes, ...]
    added: frozenset[str]
    head_base: str
    last_role: str
    preserving: bool
    messages: int


CoverageLookup = Callable[[bytes], "Coverage | None"]
"""``lookup(nonce)``: what the compaction with this nonce covered, or ``None``."""


@attrs.frozen
class Resume:
    """Where the binding of a request that carries a compaction block starts.

    Attributes:
        chain: the chain for blocks produced after the compaction (anchored on the block).
        legacy: chains under which the kept turns' thinking still verifies.
        added: the deferred tools added within the summarized range.
    """

    chain: bytes
    legacy: tuple[bytes, ...] = ()
    added: frozenset[str] = frozenset()
    start: int = 0
    """The message holding the block: the API ignores every message before it."""


def is_compaction(block: Any) -> bool:
    """True for a ``compaction`` block."""
    return isinstance(block, Mapping) and block.get("type") == COMPACTION


def _mac(key: bytes, label: bytes, message: bytes, size: int) -> bytes:
    return hmac.new(key, label + b"\x00" + message, hashlib.sha256).digest()[:size]


def sign_summary(
    key: bytes, content: str, nonce: bytes | None = None, *, threshold: bool = False
) -> tuple[str, bytes]:
    """A new block signature over ``content`` and the nonce it names the coverage by
    (``threshold``: a threshold compaction's block)."""
    nonce = secrets.token_bytes(NONCE_BYTES) if nonce is None else nonce
    magic = THRESHOLD_MAGIC if threshold else MAGIC
    ident = _mac(key, b"compaction-id" + magic, nonce, ID_BYTES)
    seal = _mac(key, b"compaction-seal", nonce + content.encode(), SEAL_BYTES)
    return base64.b64encode(magic + nonce + ident + seal).decode("ascii"), nonce


def check_block(key: bytes, block: Mapping[str, Any], at: tuple[int, int]) -> bytes:
    """The nonce of a block sent back byte-exact, or the API's 400.

    Raises:
        InvalidRequest: ``compaction_signature_invalid`` (not a signature this simulator made)
            or ``compaction_content_mismatch`` (the summary was changed).
    """
    path = f"messages.{at[0]}.content.{at[1]}"
    raw = _decode(block.get("signature"))
    magic = raw[: len(MAGIC)]
    nonce = raw[len(MAGIC) : len(MAGIC) + NONCE_BYTES] if raw else b""
    ident = raw[len(MAGIC) + NONCE_BYTES : len(MAGIC) + NONCE_BYTES + ID_BYTES] if raw else b""
    expected_id = _mac(key, b"compaction-id" + magic, nonce, ID_BYTES)
    if not raw or not hmac.compare_digest(ident, expected_id):
        raise InvalidRequest(
            f"{path}.signature: compaction_signature_invalid: the compaction block's signature "
            "is not one this API issued; send the block back exactly as it was returned",
            error_code="compaction_signature_invalid",
        )
    content = block.get("content")
    seal = raw[-SEAL_BYTES:]
    expected = _mac(key, b"compaction-seal", nonce + str(content).encode(), SEAL_BYTES)
    if not isinstance(content, str) or not hmac.compare_digest(seal, expected):
        raise InvalidRequest(
            f"{path}.content: compaction_content_mismatch: the compaction block's content does "
            "not match its signature; send the block back exactly as it was returned",
            error_code="compaction_content_mismatch",
        )
    return nonce


def _decode(signature: object) -> bytes:
    if not isinstance(signature, str) or not signature:
        return b""
    try:
        raw = base64.b64decode(signature.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return b""
    size = len(MAGIC) + NONCE_BYTES + ID_BYTES + SEAL_BYTES
    fits = len(raw) == size and raw[: len(MAGIC)] in (MAGIC, THRESHOLD_MAGIC)
    return raw if fits else b""


def is_unsigned(block: Any) -> bool:
    """True for a compaction block sent with no ``signature`` at all (see the module docstring)."""
    return is_compaction(block) and "signature" not in block


def is_threshold(block: Any) -> bool:
    """True for a compaction block a threshold compaction produced (by its signature's mark;
    the signature itself is checked where the block is used), or an unsigned one."""
    if is_unsigned(block):
        return True
    return is_compaction(block) and _decode(block.get("signature"))[: len(MAGIC)] == (
        THRESHOLD_MAGIC
    )


def anchored_chain(signature: str) -> bytes:
    """The chain after a compaction block: it depends on the block alone."""
    return chain_step(CHAIN_START, COMPACTION, {"type": COMPACTION, "signature": signature})


def _unsigned_chain(block: Mapping[str, Any]) -> bytes:
    """The chain after an unsigned block: it depends on its summary alone."""
    return chain_step(
        CHAIN_START, COMPACTION, {"type": COMPACTION, "content": block.get("content")}
    )


def _first_kept_role(messages: Sequence[Any]) -> str | None:
    """The role of the first kept content after the block: the rest of the first message, else
    the next message; ``None`` when nothing follows the block."""
    first = messages[0]
    content = first.get("content")
    if isinstance(content, list) and len(content) > 1:
        return str(first.get("role"))
    if len(messages) > 1 and isinstance(messages[1], Mapping):
        return str(messages[1].get("role"))
    return None


def resume(
    key: bytes, lookup: CoverageLookup | None, body: Mapping[str, Any]
) -> tuple[Resume, bytes] | None:
    """Where the binding of ``body`` starts when it carries a compaction block first.

    Returns:
        ``None`` when ``messages[0].content[0]`` is not a compaction block; else the resume
        point and the block's nonce.

    Raises:
        InvalidRequest: the block's signature or content is not as returned.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[0], Mapping):
        return None
    newest = _newest_threshold(messages)
    if newest is not None:
        block = messages[newest]["content"][0]
        if is_unsigned(block):
            return Resume(_unsigned_chain(block), start=newest), b""
        nonce = check_block(key, block, (newest, 0))
        return Resume(anchored_chain(str(block["signature"])), start=newest), nonce
    content = messages[0].get("content")
    if not isinstance(content, list) or not content or not is_compaction(content[0]):
        return None
    block = content[0]
    nonce = check_block(key, block, (0, 0))
    chain = anchored_chain(str(block["signature"]))
    covered = lookup(nonce) if lookup is not None else None
    if covered is None:
        return Resume(chain), nonce
    kept_role = _first_kept_role(messages)
    holds = (
        covered.preserving
        and kept_role not in (None, "system", covered.last_role)
        and covered.head_base == head_digest(body.get("system"), body.get("tools"))
    )
    return Resume(chain, covered.chains if holds else (), covered.added), nonce


def _newest_threshold(messages: Sequence[Any]) -> int | None:
    """The index of the newest message opening with a threshold compaction block, or ``None``."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and content and is_threshold(content[0]):
            return i
    return None


def check_blocks(body: Mapping[str, Any], betas: frozenset[str]) -> None:
    """Refuse compaction blocks as the API does (placement, count, fields, beta).

    Raises:
        InvalidRequest: the beta is missing, there are two blocks, the block is not first
            (``compaction_block_misplaced``), or its fields are not exactly as returned.
    """
    messages = body.get("messages")
    found = [
        (i, j, block)
        for i, message in enumerate(messages if isinstance(messages, list) else [])
        if isinstance(message, Mapping) and isinstance(message.get("content"), list)
        for j, block in enumerate(message["content"])
        if is_compaction(block)
    ]
    if not found:
        return
    if COMPACTION_BETA not in betas and not betas & THRESHOLD_BETAS:
        i, j, _ = found[0]
        raise InvalidRequest(
            f"messages.{i}.content.{j}.type: 'compaction' is not an expected block type; "
            f"requests that carry a compaction block need the `{COMPACTION_BETA}` beta"
        )
    found = _on_demand(messages if isinstance(messages, list) else [], found)
    if not found:
        return
    i, j, _ = found[0]
    if COMPACTION_BETA not in betas:
        raise InvalidRequest(
            f"messages.{i}.content.{j}.type: 'compaction' is not an expected block type; "
            f"requests that carry a compaction block need the `{COMPACTION_BETA}` beta"
        )
    if len(found) > 1:
        i2, j2, _ = found[1]
        raise InvalidRequest(
            f"messages.{i2}.content.{j2}: a request may carry one compaction block (the newest "
            f"one); found {len(found)}"
        )
    if (i, j) != (0, 0):
        raise InvalidRequest(
            f"messages.{i}.content.{j}: compaction_block_misplaced: the compaction block must "
            "come first in `messages` (its own assistant message or the first block of the "
            "first message), in place of the messages it summarizes",
            error_code="compaction_block_misplaced",
        )


def _on_demand(
    messages: Sequence[Mapping[str, Any]], found: list[tuple[int, int, Any]]
) -> list[tuple[int, int, Any]]:
    """The on-demand blocks of ``found``, after checking every block's fields and each
    threshold block's place (it opens the assistant message it was returned in)."""
    for i, j, block in found:
        _check_fields(block, (i, j))
        if is_threshold(block) and (j != 0 or messages[i].get("role") != "assistant"):
            raise InvalidRequest(
                f"messages.{i}.content.{j}: a threshold compaction block opens the assistant "
                "message it was returned in; send that message back unchanged"
            )
    return [(i, j, block) for i, j, block in found if not is_threshold(block)]


def _check_fields(block: Mapping[str, Any], at: tuple[int, int]) -> None:
    path = f"messages.{at[0]}.content.{at[1]}"
    extra = sorted(set(block) - BLOCK_FIELDS - OPTIONAL_FIELDS)
    if extra:
        raise InvalidRequest(
            f"{path}.{extra[0]}: Extra inputs are not permitted (send the compaction block back "
            "exactly as it was returned)"
        )
    for name in ("content", "signature"):
        if name == "signature" and is_unsigned(block):
            continue
        if not isinstance(block.get(name), str) or not block[name]:
            raise InvalidRequest(f"{path}.{name}: Field required (a string)")


class CompactionLedger:
    """What each compaction covered, by nonce (bounded, oldest forgotten first; thread-safe)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._records: dict[bytes, Coverage] = {}

    def remember(self, nonce: bytes, coverage: Coverage) -> None:
        """Record what the compaction with ``nonce`` covered."""
        with self._lock:
            self._records[nonce] = coverage
            while len(self._records) > self.capacity:
                del self._records[next(iter(self._records))]

    def lookup(self, nonce: bytes) -> Coverage | None:
        """What the compaction with ``nonce`` covered, or ``None`` when unknown or forgotten."""
        with self._lock:
            return self._records.get(nonce)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def _check(self) -> None:
        assert len(self) <= self.capacity
