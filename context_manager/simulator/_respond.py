"""Answering one validated request: verify its signed blocks, apply the binding mode, run the
script, sign the reply.

Pure given its inputs (the knobs are taken from the simulator beforehand). Error mode refuses at the
first failing block; drop mode removes every failing block and reports each in
``input_transformations``, which is present whenever the binding beta is on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._api import BINDING_BETA, ERROR_MODE, THINKING_DROPPED
from ._reply import (
    Script,
    display_omitted,
    input_tokens,
    is_signed,
    message_dict,
    run_script,
    sign_reply,
    thinking_on,
)
from ._verify import ForcedDrop, Verifier, Walk, walk


@attrs.frozen
class CallKnobs:
    """Fault knobs one call consumes: forced drops and raw entries to append to the report."""

    forced: tuple[ForcedDrop, ...] = ()
    extra_transformations: tuple[Any, ...] = ()


@attrs.frozen
class Answer:
    """A reply message and the walk that produced its view of the request."""

    message: dict[str, Any]
    walk: Walk


def mismatch_behavior(body: Mapping[str, Any]) -> str:
    """``thinking.block_binding.prefix_mismatch_behavior``, ``"error"`` when absent."""
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, Mapping) else None
    if isinstance(binding, Mapping):
        return str(binding.get("prefix_mismatch_behavior", ERROR_MODE))
    return ERROR_MODE


def transformations(walked: Walk) -> list[dict[str, Any]]:
    """One ``thinking_dropped`` entry per removed block, in request order."""
    return [
        {"type": THINKING_DROPPED, "path": check.path_text, "reason": check.reason}
        for check in walked.dropped
    ]


def answer(
    body: dict[str, Any],
    betas: frozenset[str],
    *,
    verifier: Verifier,
    script: Script,
    knobs: CallKnobs,
    new_id: Callable[[str], str],
) -> Answer:
    """The reply to a validated request.

    Args:
        body: the request body (already validated).
        betas: the request's beta names.
        verifier: the simulator's key and model families.
        script: produces the reply blocks from the request as the model sees it.
        knobs: forced drops and extra report entries for this call.
        new_id: ``new_id(prefix)`` returns a fresh id (``msg_...``, ``toolu_...``).

    Raises:
        InvalidRequest: a signature is invalid, or error mode meets a failing block.
        ScriptFailed: the script raised or answered something that is not content.
    """
    walked = walk(
        verifier, body, forced=knobs.forced, stop_on_failure=mismatch_behavior(body) == ERROR_MODE
    )
    seen = {**body, "messages": walked.messages}
    blocks = run_script(script, seen, new_id)
    if not thinking_on(body):
        blocks = [block for block in blocks if not is_signed(block)]
    family, head = verifier.head_of(body)
    content = sign_reply(
        blocks,
        key=verifier.key,
        family=family,
        head=head,
        chain=walked.chain,
        omit_text=display_omitted(body),
    )
    report: list[Any] | None = None
    if BINDING_BETA in betas or knobs.extra_transformations:
        report = transformations(walked) + list(knobs.extra_transformations)
    message = message_dict(
        message_id=new_id("msg"),
        model=str(body["model"]),
        content=content,
        usage_in=input_tokens(seen),
        transformations=report,
    )
    return Answer(message, walked)
