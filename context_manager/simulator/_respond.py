"""Answering one validated request: verify its signed blocks, apply the binding mode, run the
script, sign the reply.

Pure given its inputs (the knobs are taken from the simulator beforehand). Error mode refuses at the
first prefix failure; drop mode removes it and every later thinking block; an unenforced account
lets failing blocks through. Every removal and every allowed failure is reported in
``input_transformations``, which is present whenever the binding beta is on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._api import BINDING_BETA, THINKING_DROPPED, THINKING_MISMATCH_ALLOWED
from ._count import count_input
from ._editing import apply_edits, parse_edits
from ._reply import (
    Script,
    display_omitted,
    is_signed,
    message_dict,
    run_script,
    sign_reply,
    thinking_on,
)
from ._system import offered_tools
from ._threshold import threshold_reply
from ._verify import ForcedDrop, Verifier, Walk, behavior, walk


@attrs.frozen
class CallKnobs:
    """Fault knobs one call consumes: forced drops and raw entries to append to the report."""

    forced: tuple[ForcedDrop, ...] = ()
    extra_transformations: tuple[Any, ...] = ()


@attrs.frozen
class Answer:
    """A reply message, the walk that produced its view of the request, the names of tools
    the reply called that were not offered (removed by a ``tool_removal``, or never added), and
    the messages as the model saw them (the walk's, after any context editing)."""

    message: dict[str, Any]
    walk: Walk
    unoffered_calls: tuple[str, ...] = ()
    view: list[dict[str, Any]] = attrs.field(factory=list)


def transformations(walked: Walk) -> list[dict[str, Any]]:
    """One entry per removed block (``thinking_dropped``) and per failing block that reached the
    model (``thinking_mismatch_allowed``), in request order."""
    return [
        {
            "type": THINKING_MISMATCH_ALLOWED if check.allowed else THINKING_DROPPED,
            "path": check.path_text,
            "reason": check.reason,
        }
        for check in walked.checks
        if not check.ok
    ]


def answer(
    body: dict[str, Any],
    betas: frozenset[str],
    *,
    verifier: Verifier,
    enforced: bool,
    script: Script,
    knobs: CallKnobs,
    new_id: Callable[[str], str],
) -> Answer:
    """The reply to a validated request.

    Args:
        body: the request body (already validated).
        betas: the request's beta names.
        verifier: the simulator's key, readability table, organization and end user.
        enforced: the account enforces the prefix check without ``block_binding``.
        script: produces the reply blocks from the request as the model sees it.
        knobs: forced drops and extra report entries for this call.
        new_id: ``new_id(prefix)`` returns a fresh id (``msg_...``, ``toolu_...``).

    Raises:
        InvalidRequest: a signature is invalid, or error mode meets a failing block.
        ScriptFailed: the script raised or answered something that is not content.
    """
    edits = parse_edits(body, betas)
    walked = walk(verifier, body, mode=behavior(body, enforced=enforced), forced=knobs.forced)
    edited = apply_edits(edits, walked.messages, lambda messages: count_input(body, messages))
    tools = offered_tools(body)
    if edited.compact is not None:
        message, view = threshold_reply(
            body,
            edited.messages,
            edited.compact,
            verifier=verifier,
            script=script,
            tools=tools.offered(),
            new_id=new_id,
        )
    else:
        view = edited.messages
        message = _model_reply(body, walked, view, verifier, script, tools.offered(), new_id)
    if BINDING_BETA in betas or knobs.extra_transformations:
        report = transformations(walked) + list(knobs.extra_transformations)
        message["input_transformations"] = report
    if edits:
        message["context_management"] = {"applied_edits": edited.applied}
    unoffered = tuple(
        str(block.get("name"))
        for block in message["content"]
        if block.get("type") == "tool_use" and block.get("name") not in tools.active
    )
    return Answer(message, walked, unoffered, view)


def _model_reply(
    body: dict[str, Any],
    walked: Walk,
    view: list[dict[str, Any]],
    verifier: Verifier,
    script: Script,
    tools: list[dict[str, Any]],
    new_id: Callable[[str], str],
) -> dict[str, Any]:
    """The model's reply to ``view``, signed against the request as sent (``walked``)."""
    blocks = run_script(script, {**body, "messages": view, "tools": tools}, new_id)
    if not thinking_on(body):
        blocks = [block for block in blocks if not is_signed(block)]
    start = verifier.binding(str(body["model"]), walked.head, walked.chain, walked.predecessor)
    content = sign_reply(blocks, start, key=verifier.key, omit_text=display_omitted(body))
    return message_dict(
        message_id=new_id("msg"),
        model=str(body["model"]),
        content=content,
        usage_in=count_input(body, view),
        transformations=None,
    )
