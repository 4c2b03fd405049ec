"""The keyword arguments of an SDK ``messages`` call, split into a request body and transport.

Pure functions. A framework calls ``create`` / ``stream`` / ``count_tokens`` with body fields,
``betas`` (on ``beta.messages``) or an ``anthropic-beta`` header (on ``messages``), and the SDK's
transport options (``extra_headers``, ``extra_query``, ``extra_body``, ``timeout``). Reconcile
needs the body with every field the framework set, ``extra_body``'s included; the real call needs
the compiled request back in the method's own shape: fields the method names as keywords, the rest
in ``extra_body``, betas as the method takes them. Nothing here reads or logs a credential.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

TRANSPORT = ("extra_headers", "extra_query", "extra_body", "timeout")
BETA_HEADER = "anthropic-beta"


@attrs.frozen
class SplitCall:
    """A call's body fields (``betas`` among them), whether it streams, and its transport."""

    body: dict[str, Any]
    stream: bool
    transport: dict[str, Any]


def _given(value: object) -> bool:
    """False for the SDK's "not given" markers (``NOT_GIVEN``, ``omit``) and ``None``."""
    return value is not None and type(value).__name__ not in ("NotGiven", "Omit")


def split_call(kwargs: Mapping[str, Any]) -> SplitCall:
    """``kwargs`` of a ``messages`` method as body, stream flag and transport options."""
    given = {k: v for k, v in kwargs.items() if _given(v)}
    transport = {k: given.pop(k) for k in TRANSPORT if k in given}
    body = {**given, **dict(transport.pop("extra_body", None) or {})}
    headers = dict(transport.get("extra_headers") or {})
    header = next((v for k, v in headers.items() if k.lower() == BETA_HEADER), None)
    if _given(header):
        named = [b.strip() for b in str(header).split(",") if b.strip()]
        body["betas"] = sorted({*list(body.get("betas") or ()), *named})
        transport["extra_headers"] = {k: v for k, v in headers.items() if k.lower() != BETA_HEADER}
    stream = body.pop("stream", False) is True
    return SplitCall(body=body, stream=stream, transport=transport)


def keywords_of(method: Callable[..., Any]) -> frozenset[str]:
    """The keyword names ``method`` takes (its signature)."""
    return frozenset(inspect.signature(method).parameters)


def call_kwargs(
    method: Callable[..., Any],
    request: Mapping[str, Any],
    transport: Mapping[str, Any],
    *,
    keep_unknown: bool = True,
) -> dict[str, Any]:
    """The compiled ``request`` as keywords of ``method``, with the call's ``transport``.

    Fields the method does not name go in ``extra_body`` (``keep_unknown``) or are left out
    (``count_tokens``, which refuses a request's settings such as ``max_tokens``); ``betas`` go in
    the ``anthropic-beta`` header when the method takes no ``betas`` keyword.
    """
    names = keywords_of(method)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = dict(request.get("extra_body") or {}) if keep_unknown else {}
    for key, value in request.items():
        if key in ("betas", "extra_body"):
            continue
        if key == "extra_body":  # the fields the SDK names no keyword for (``sdk_request``)
            if keep_unknown:
                extra.update(value)
            continue
        if key in names:
            kwargs[key] = value
        elif keep_unknown:
            extra[key] = value
    headers = dict(transport.get("extra_headers") or {})
    betas = list(request.get("betas") or ())
    if betas and "betas" in names:
        kwargs["betas"] = betas
    elif betas:
        headers[BETA_HEADER] = ",".join(betas)
    for key in ("extra_query", "timeout"):
        if key in transport:
            kwargs[key] = transport[key]
    if headers:
        kwargs["extra_headers"] = headers
    if extra:
        kwargs["extra_body"] = extra
    return kwargs
