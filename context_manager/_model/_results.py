"""What a compile returns: the request, where each message came from, and what it stripped.

All records here are frozen. ``Provenance`` maps compiled message ``i`` to its stored sources
and, per source, compiled content index ``j`` to the stored block index; drop placement
(``_drops``) reads it. A ``CompileResult`` holds what a user reads; what ``record_reply`` needs
to stamp the reply is its private ``ReplyToken`` (``_token``), which users never read.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ._diagnostics import CacheCheck
from ._messages import MessageId

StripCause = Literal["head", "first", "messages"]
ProvenanceKind = Literal["message", "summary", "notice", "synthetic"]


@attrs.frozen
class ThinkingStrip:
    """What one committing (or dry) compile newly leaves out.

    Attributes:
        cause: ``"head"``, ``"first"`` or ``"messages"``, read at the first stripped block.
        changed: for ``"head"``, the differing components in the order system, tools, model,
            settings; empty otherwise.
        replies: stored reply ids, oldest first.
        blocks: how many thinking blocks.
        branch: the branch key.
        compile_id: the compile that reported it.
    """

    cause: StripCause
    changed: tuple[str, ...]
    replies: tuple[MessageId, ...]
    blocks: int
    branch: str
    compile_id: str


@attrs.frozen
class Source:
    """One stored message behind a compiled message.

    ``blocks`` maps compiled content index ``j`` to the stored block index; ``signatures`` maps
    the ``j`` of each thinking block to its signature digest (``signature_digest``). Read them,
    never change them: a render shares one dict between every source that maps each block to
    itself, and one empty ``signatures`` (``shared_blocks``).
    """

    message_id: MessageId
    blocks: dict[int, int]
    signatures: dict[int, str] = attrs.field(factory=dict)


_IDENTITY: tuple[dict[int, int], ...] = tuple({j: j for j in range(n)} for n in range(17))
"""The shared ``Source.blocks`` of a message sent whole, by its block count (up to 16)."""

NO_SIGNATURES: dict[int, str] = {}
"""The shared ``Source.signatures`` of a message that sends no thinking."""


def whole_blocks(size: int) -> dict[int, int]:
    """The ``Source.blocks`` of a message whose ``size`` blocks are all sent, in order."""
    return _IDENTITY[size] if size < len(_IDENTITY) else {j: j for j in range(size)}


def shared_blocks(blocks: dict[int, int]) -> dict[int, int]:
    """``blocks``, or the one shared dict equal to it when it maps each compiled index to the
    same stored index (most messages: nothing left out), so that a render of thousands of
    messages holds a few such dicts, not one per message (and restores them as few)."""
    size = len(blocks)
    if size < len(_IDENTITY):
        identity = _IDENTITY[size]
        if blocks == identity:
            return identity
    return blocks


@attrs.frozen
class ProvenanceEntry:
    """Where compiled message ``i`` came from."""

    kind: ProvenanceKind
    sources: tuple[Source, ...] = ()

    @property
    def single_source(self) -> Source | None:
        """The one stored message behind it, or ``None`` (a merge, a summary, a synthetic)."""
        return self.sources[0] if self.kind == "message" and len(self.sources) == 1 else None


@attrs.frozen
class ReplyToken:
    """What ``record_reply`` needs from the compile behind a request (not for users).

    Attributes:
        manager_token: the compiling manager's token (a reply is recorded on that manager only).
        head_digests: the digests of the head the request was built on (the reply's stamp).
        end_chain: the prefix chain at the request's end (the reply's seals continue it).
        end_predecessor: signature digest of the newest thinking block the request sends (a
            reply's first thinking block records it as its predecessor).
        start_sequence: the stored sequence the rendered window starts at. A reply's stamp
            records it, so a branch made later, with no window start of its own, can start
            where the reply was made.
    """

    manager_token: str
    head_digests: dict[str, str]
    end_chain: bytes
    end_predecessor: str | None = None
    start_sequence: int = 0


@attrs.frozen
class CompileResult:
    """One compile's output.

    ``request`` is accepted as is by ``client.beta.messages.create(**request)``. Every attribute
    but ``_token`` (what ``record_reply`` needs, passed as ``token=``) is for the caller.
    """

    request: dict[str, Any]
    provenance: tuple[ProvenanceEntry, ...]
    thinking_strip: ThinkingStrip | None
    compile_id: str
    dry: bool
    tokens: int
    branch: str
    namespace: str
    _token: ReplyToken = attrs.field(repr=False, alias="token")
    last_sequence: int = 0
    """The newest stored sequence the request covers."""
    restored: tuple[MessageId, ...] = ()
    """Stored reply ids whose thinking, left out by the last committing compile, is sent again."""
    appended: tuple[MessageId, ...] = ()
    """The ``head-change`` system message this compile stored for a ``system`` / ``tools``
    change (SPEC 7b); empty when nothing was appended (always on a dry compile)."""
    unreadable: tuple[str, ...] = ()
    """Paths (``messages.i.content.j``) of thinking blocks the request sends that the requested
    model cannot read: the provider drops them (``model_binding_mismatch``, never a 400), and
    they stay in the request so that the blocks made meanwhile stay valid and a switch back to a
    model that reads them reads them all (provider rule 8). The strip reports them as a ``head``
    loss (``model``); ``place_drops`` expects their drops and does not count them."""
    put_back: tuple[str, ...] = ()
    """Paths of the open tool round's thinking blocks sent as recorded although the rules
    leave them out (provider rule 6: that message is never altered, SPEC 7): under
    ``drop_block`` the provider drops them (placed and told like any drop), under
    ``prefix_mismatch_behavior: "error"`` it refuses the request. Empty when nothing was put
    back."""
    predicted_mismatches: tuple[str, ...] = ()
    """Observe mode (``ThinkingBinding(enforcement="observe")``): paths of thinking blocks the
    request sends that enforcement would leave out, oldest first. The compiler predicts the
    provider lists exactly these as ``thinking_mismatch_allowed``; ``record_reply`` compares
    (``binding_prediction_mismatch``). Always empty under enforcement."""
    shed: tuple[MessageId, ...] = ()
    """Stored reply ids whose thinking this compile shed (released, oldest first) to fit its
    budget or window (SPEC 7, shedding); empty when it shed nothing."""
    folded: int = 0
    """How many stored messages this compile's fold replaced with a summary (0: no fold)."""
    compacted: bool = False
    """The request is the first sent after a compaction: telemetry sets
    ``gen_ai.conversation.compacted`` on its call (whatever builds compaction sets this)."""
    cache_check: CacheCheck | None = attrs.field(default=None, repr=False)
    """``Caching(diagnostics=True)``: what the compiler knew changed since the request of the
    branch's previous reply, which ``request["diagnostics"]`` names (``None``: diagnostics off)."""

    @property
    def start_sequence(self) -> int:
        """The stored sequence the rendered window starts at (a reply's stamp records it)."""
        return self._token.start_sequence
