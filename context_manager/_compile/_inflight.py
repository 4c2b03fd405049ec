"""The open tool round's assistant message: never altered (provider rule 6, SPEC 7).

Pure over a render. The latest assistant message of an open tool loop must go out as recorded:
thinking the rules would leave out is put back in its place, and the provider's ``drop_block``
drops it (placed and told like any drop); the compiler refuses instead when ``drop_block`` is off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from context_manager._model._canonical import signature_digest
from context_manager._model._content import Block, block_to_wire, is_thinking, signature_of
from context_manager._model._messages import MessageId, StoredMessage
from context_manager._model._results import ProvenanceEntry, Source

from ._render import RenderState

INFLIGHT_CAUSES = {
    "head": "a head or model change mid-round",
    "prefix": "an earlier message changed mid-round",
    "gap": "a thinking block before it was left out",
    "unstamped": "it carries no stamp",
    "released": "its thinking, or thinking before it, was released",
    "shed": "thinking before it was shed",
}
"""What ``InFlightThinkingInvalid`` names as the cause, by why the first block fails."""


def inflight_index(state: RenderState) -> int | None:
    """Index of the open round's assistant message in ``state.messages``, or ``None``.

    Open: the render ends with that message's calls unanswered (a synthetic answer closes
    them), or with the user message that answers them.
    """
    messages = state.messages
    if not messages:
        return None
    if state.open_tool_uses and messages[-1]["role"] == "assistant":
        return len(messages) - 1
    end = len(messages)
    while end > 0 and messages[end - 1]["role"] == "system":  # notices after the results
        end -= 1
    if (
        end >= 2
        and messages[end - 1]["role"] == "user"
        and messages[end - 2]["role"] == "assistant"
        and any(block.get("type") == "tool_result" for block in messages[end - 1]["content"])
    ):
        return end - 2
    return None


@attrs.frozen
class Restored:
    """The in-flight message as recorded: its new content and provenance, and the blocks
    put back."""

    index: int
    message: dict[str, Any]
    entry: ProvenanceEntry
    put_back: tuple[tuple[MessageId, int], ...]

    @property
    def paths(self) -> tuple[str, ...]:
        """Where the blocks put back are sent (``messages.i.content.j``), in order."""
        source = self.entry.single_source
        if source is None:
            return ()
        back = {block for _, block in self.put_back}
        at = self.index
        return tuple(f"messages.{at}.content.{j}" for j, b in source.blocks.items() if b in back)


def restore_inflight(
    state: RenderState,
    read: Callable[[MessageId], StoredMessage],
    resolve: Callable[[Block], Block | None] | None,
) -> Restored | None:
    """Put back the in-flight reply's signed thinking that the render left out (a head change,
    a release by the host, a gap, a changed earlier message), or ``None`` when there is none.
    O(the reply's blocks); one store read.

    Left out, the message would be filtered, which the API refuses whatever the reason
    (provider rule 6); sent, a block that fails is dropped under ``drop_block``. An ``unstamped``
    block (history imported mid-round) is put back too: it may verify, and left out the request
    is refused for certain. A block without its signature stays out (the API refuses it).

    Only a message rendered from one stored reply is handled; blocks whose text cannot be
    resolved stay out (they cannot be sent as recorded in any case). A release stands: it is
    reported once the round has closed.
    """
    index = inflight_index(state)
    if index is None:
        return None
    entry = state.provenance[index]
    source = entry.single_source
    if source is None:
        return None
    stored = read(source.message_id)
    rendered = {b: state.messages[index]["content"][j] for j, b in source.blocks.items()}
    put_back: list[tuple[MessageId, int]] = []
    content: list[dict[str, Any]] = []
    mapping: dict[int, int] = {}
    signatures: dict[int, str] = {}
    for b, block in enumerate(stored.content):
        wire: dict[str, Any] | None = rendered.get(b)
        if wire is None and is_thinking(block) and signature_of(block):
            resolved = resolve(block) if resolve is not None else block
            if resolved is None:
                continue
            wire = block_to_wire(resolved)
            put_back.append((stored.id, b))
            block = resolved
        if wire is None:
            continue
        if is_thinking(block) and signature_of(block):
            signatures[len(content)] = signature_digest(signature_of(block))
        mapping[len(content)] = b
        content.append(wire)
    if not put_back:
        return None
    return Restored(
        index,
        {"role": "assistant", "content": content},
        ProvenanceEntry("message", (Source(stored.id, mapping, signatures),)),
        tuple(put_back),
    )
