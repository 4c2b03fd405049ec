"""Request intake: parsing a body, SDK keyword arguments to a wire body, fresh ids.

Pure functions (``new_id`` draws randomness). A wire body is what the SDK would send: plain JSON
values, ``betas`` moved out to the header.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import InvalidRequest
from ._wire import to_wire

ID_BYTES = 12
"""Random bytes in generated message, tool-use and request ids."""


def new_id(prefix: str) -> str:
    """A fresh id like the API's (``msg_...``, ``toolu_...``, ``req_...``)."""
    return f"{prefix}_sim{secrets.token_hex(ID_BYTES)}"


def split_betas(request: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """A request given as SDK keyword arguments: the wire body and its ``betas`` (a header).

    Content items that are SDK models or block objects become wire dicts (``_wire.to_wire``), and
    ``extra_body`` is merged into the body, as the SDK would send them.
    """
    body = {k: v for k, v in request.items() if k not in ("betas", "extra_body")}
    extra = request.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    messages = body.get("messages")
    if isinstance(messages, list | tuple):
        body["messages"] = [_wire_message(m) for m in messages]
    return body, frozenset(str(b) for b in request.get("betas", ()))


def _wire_message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if isinstance(content, str) or not isinstance(content, Iterable):
        return dict(message)
    items = [item if isinstance(item, Mapping) else to_wire(item) for item in content]
    return {**message, "content": items}


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body.

    Raises:
        InvalidRequest: the body is not JSON, or not a JSON object.
    """
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, ValueError) as err:
        raise InvalidRequest(f"There was an error parsing the body: {err}") from err
    if not isinstance(parsed, dict):
        raise InvalidRequest("the request body must be a JSON object")
    if _ESCAPED_SURROGATE.search(body):  # JSON escapes may spell half a character
        _check_surrogates(parsed)
    return parsed


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: a lone one is no character (the only way a surrogate gets
into a parsed body; raw UTF-8 cannot hold one)."""


def _check_surrogates(parsed: dict[str, Any]) -> None:
    """Refuse a body holding a lone surrogate, as the API does (recorded 400s: "The request body
    is not valid JSON: no low surrogate in string")."""
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        high = "\ud800" <= err.object[err.start] <= "\udbff"
        kind = "no low surrogate" if high else "invalid high surrogate"
        raise InvalidRequest(f"The request body is not valid JSON: {kind} in string") from err
