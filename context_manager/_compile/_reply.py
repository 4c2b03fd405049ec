"""Recording a reply: checked against the compile that produced it, stamped, stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_manager._binding._stamp import stamp_reply
from context_manager._model._content import reply_blocks
from context_manager._model._errors import InvalidType, InvalidValue
from context_manager._model._log import library_logger
from context_manager._model._messages import MessageMeta, StoredMessage
from context_manager._model._results import CompileResult
from context_manager._model._stamps import Stamp
from context_manager._model._usage import reply_extra

from ._host import CompileHost

log = library_logger("context_manager.compile")


def store_reply(
    m: CompileHost,
    message: object,
    result: CompileResult,
    *,
    appended: Sequence[object],
    extra: Mapping[str, Any] | None = None,
) -> tuple[StoredMessage, Stamp]:
    """Store an assistant reply, stamping each thinking block against what produced it;
    returns it and its stamp.

    Raises:
        ValueError: ``result`` is dry, from another manager, or from another branch.
        TypeError: the reply's content is not blocks, wire dicts or an SDK message.
    """
    if not isinstance(result, CompileResult):
        raise InvalidType(f"record_reply needs the CompileResult that produced it, got {result!r}")
    if result.dry:
        raise InvalidValue(
            f"compile {result.compile_id} was a dry run; record replies against a "
            "committing compile"
        )
    if result._token.manager_token != m.token:
        raise InvalidValue(
            f"compile {result.compile_id} came from another context manager; record the "
            "reply on the manager that compiled it"
        )
    if result.branch != m.current_branch_key():
        raise InvalidValue(
            f"compile {result.compile_id} was for branch {result.branch}, but the current "
            f"branch is {m.current_branch_key()}; switch back before recording"
        )
    blocks = reply_blocks(message)
    stamped = stamp_reply(blocks, result, appended)
    for index in stamped.unsigned:
        log.warning(
            "thinking_unsigned",
            namespace=m.namespace,
            compile_id=result.compile_id,
            block=index,
            note="stored, never sent",
        )
    stamp, signatures = stamped.stamp, list(stamped.signatures)
    if m.reasoning is not None:
        blocks = m.capture_reasoning(blocks, result)
    stored = m.store.append(
        m.namespace,
        result.branch,
        "assistant",
        blocks,
        MessageMeta(extra={**(extra or {}), **reply_extra(message)}),
        stamp=stamp,
        signatures=signatures,
    )
    return stored, stamp
