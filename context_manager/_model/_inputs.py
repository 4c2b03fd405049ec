"""Checks of what a host passes the facade, made before anything is read or stored.

Pure: each raises the library's error for bad input (``InvalidContent``, ``InvalidType``,
``InvalidValue``), naming the value and what to pass instead, or returns the checked value.
"""

from __future__ import annotations

from ._checks import check_blocks, check_positive_int
from ._content import Block, reply_blocks, to_blocks
from ._errors import InvalidContent, InvalidType
from ._head import Head
from ._results import CompileResult


def coerced_content(content: object, where: str) -> tuple[Block, ...]:
    """``to_blocks(content)`` with every block checked (``check_blocks``).

    Raises:
        InvalidContent: content that is not blocks, or a malformed block; naming ``where``.
    """
    try:
        blocks = to_blocks(content)
    except InvalidContent:
        raise
    except TypeError as err:
        raise InvalidContent(where, None, str(err)) from err
    check_blocks(blocks, where)
    return blocks


def check_compile_args(head: object, budget: object) -> None:
    """``compile``'s arguments, checked before anything is read."""
    if not isinstance(head, Head):
        raise InvalidType(f"compile needs a Head, got {head!r:.120}")
    if budget is not None:
        check_positive_int(budget, "budget", unit="token count")


def check_reply(message: object, result: object) -> None:
    """``record_reply``'s arguments, checked before anything is stored."""
    if isinstance(message, str | bytes):
        raise InvalidContent(
            "reply",
            None,
            f"{message!r:.80} is a bare string; pass the SDK message, the response body or its "
            "content blocks (a host's own text is add_message's)",
        )
    if not isinstance(result, CompileResult):
        raise InvalidType(
            f"record_reply needs the CompileResult that produced it, got {result!r:.120}"
        )
    try:
        blocks = reply_blocks(message)
    except InvalidContent:
        raise
    except TypeError as err:
        raise InvalidContent("reply", None, str(err)) from err
    check_blocks(blocks, "reply")
