"""The request as the installed ``anthropic`` SDK takes it: unnamed fields ride in ``extra_body``.

Invariant: ``sdk_request(r)`` sends the same JSON body as ``r`` (the SDK merges ``extra_body``
into the body it posts), and every top-level key of it is a keyword that both
``client.beta.messages.create`` and ``client.beta.messages.stream`` (sync and async) accept.
A request with no such field is returned as it is.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

_NOT_FIELDS = frozenset({"self", "extra_headers", "extra_query", "extra_body", "timeout", "stream"})


@functools.cache
def sdk_fields() -> frozenset[str]:
    """The request fields the installed SDK names on every ``messages`` call it offers."""
    from anthropic.resources.beta.messages import AsyncMessages, Messages

    named: frozenset[str] | None = None
    for call in (Messages.create, Messages.stream, AsyncMessages.create, AsyncMessages.stream):
        params = frozenset(inspect.signature(call).parameters) - _NOT_FIELDS
        named = params if named is None else named & params
    return named or frozenset()


def sdk_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """``request`` with the fields the SDK has no keyword for (``temperature``, ``top_p``,
    ``top_k``, anything newer than the SDK) moved into ``extra_body``, beside any already there.

    >>> sdk_request({"model": "m", "max_tokens": 1, "messages": [], "temperature": 1.0})
    {'model': 'm', 'max_tokens': 1, 'messages': [], 'extra_body': {'temperature': 1.0}}
    """
    named = sdk_fields()
    unnamed = [key for key in request if key not in named and key != "extra_body"]
    if not unnamed:
        return dict(request)
    out = {key: value for key, value in request.items() if key in named}
    extra = dict(request.get("extra_body") or {})
    extra.update((key, request[key]) for key in unnamed)
    out["extra_body"] = extra
    return out
