"""Threshold compaction (``compact_20260112``, provider rule 28): a request whose input reaches the
edit's trigger is compacted before the model answers.

Pure functions (the nonce is random). The reply opens with a ``compaction`` block summarizing the
whole request (``_summarize.summary_text``) and signed as a threshold block; with
``pause_after_compaction`` it is the whole reply (``stop_reason: "compaction"``), otherwise the
model answers after it, seeing the summary (as an assistant message) and the messages after the
request's last assistant turn. The block FOLLOWS what it summarizes: the client appends the reply
as usual and later requests are read from the newest such block on (``_compaction.resume``), so
no thinking from before it is carried forward and the reply's own thinking is bound to the block.
Usage: ``iterations`` holds the ``compaction`` entry and the ``message`` entry; top-level usage is
the message's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._canon import head_digest
from ._compaction import COMPACTION, anchored_chain, sign_summary
from ._count import count_input
from ._editing import ThresholdCompact
from ._reply import (
    Script,
    display_omitted,
    estimate_tokens,
    is_signed,
    message_dict,
    run_script,
    sign_reply,
    thinking_on,
)
from ._summarize import iteration, summary_text
from ._verify import Verifier


def _pending(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the last assistant message (what the model answers)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return list(messages[i + 1 :])
    return list(messages)


def threshold_reply(
    body: dict[str, Any],
    view: list[dict[str, Any]],
    edit: ThresholdCompact,
    *,
    verifier: Verifier,
    script: Script,
    tools: list[dict[str, Any]],
    new_id: Callable[[str], str],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The reply to a request that reached ``edit``'s trigger, and the model's view of it.

    Raises:
        ScriptFailed: the script raised or answered something that is not content.
    """
    summary = summary_text({**body, "messages": view}, edit.instructions)
    signature, _ = sign_summary(verifier.key, summary, threshold=True)
    block = {"type": COMPACTION, "content": summary, "signature": signature}
    seen: list[dict[str, Any]] = [{"role": "assistant", "content": [block]}, *_pending(view)]
    content: list[dict[str, Any]] = [block]
    if not edit.pause:
        blocks = run_script(script, {**body, "messages": seen, "tools": tools}, new_id)
        if not thinking_on(body):
            blocks = [b for b in blocks if not is_signed(b)]
        head = head_digest(body.get("system"), body.get("tools"))
        start = verifier.binding(str(body["model"]), head, anchored_chain(signature), None)
        content += sign_reply(blocks, start, key=verifier.key, omit_text=display_omitted(body))
    message = message_dict(
        message_id=new_id("msg"),
        model=str(body["model"]),
        content=content,
        usage_in=count_input(body, seen),
        transformations=None,
    )
    if edit.pause:
        message["stop_reason"] = COMPACTION
    usage = message["usage"]
    compacting = iteration(count_input(body, view), estimate_tokens([{"summary": summary}]))
    answering = {"type": "message", **{k: usage[k] for k in list(usage)}}
    usage["iterations"] = [compacting, answering]
    return message, seen
