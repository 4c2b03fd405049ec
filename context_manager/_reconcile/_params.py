"""A framework's Messages API parameters split into this library's head and its messages.

Pure functions. ``messages`` is what the framework built; ``model``, ``system`` and ``tools``
make the ``Head``; every other body field is a setting and goes out as the framework set it
(``thinking`` with its own ``block_binding`` included: a framework's ``drop_block`` is respected);
``betas`` are passed through, joined with the ones the compiled request needs (provider rule 21).
``stream`` and the SDK's transport options are not part of the request body the compiler builds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_manager._model._errors import ContextManagerError
from context_manager._model._head import Head

HEAD_FIELDS = frozenset({"model", "system", "tools"})
NOT_SETTINGS = frozenset({"messages", "betas", "stream"}) | HEAD_FIELDS
"""Body fields that are not settings."""


class FrameworkParamsInvalid(ContextManagerError, ValueError):
    """A framework's parameters this library cannot reconcile; the message says why."""


@attrs.frozen
class FrameworkCall:
    """One framework call: the head it implies, its messages and its betas."""

    head: Head
    messages: tuple[dict[str, Any], ...]
    betas: tuple[str, ...]


def split_params(params: Mapping[str, Any]) -> FrameworkCall:
    """``params`` (Messages API body fields, ``betas`` as a list) as a ``FrameworkCall``.

    Raises:
        FrameworkParamsInvalid: no ``model``, ``messages`` is not a list of role/content
            mappings, ``system`` or ``tools`` of another shape, or a server-held ``thread``
            (the server would keep the history, so the library could not choose what is sent).
    """
    if params.get("thread") is not None:
        raise FrameworkParamsInvalid(
            "server-held threads (thread=...) are not supported: the request must carry the "
            "whole history; send it without thread"
        )
    model = params.get("model")
    if not isinstance(model, str) or not model:
        raise FrameworkParamsInvalid(f"params need a model name, got {model!r}")
    messages = params.get("messages")
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise FrameworkParamsInvalid(f"params need a messages list, got {type(messages).__name__}")
    checked = tuple(_message(index, item) for index, item in enumerate(messages))
    if not checked:  # followed as a host fold, an empty list would fold the whole transcript
        raise FrameworkParamsInvalid("params need at least one message, got an empty list")
    settings = {k: v for k, v in params.items() if k not in NOT_SETTINGS and v is not None}
    system = params.get("system") or None
    head = Head(
        model=model,
        system=system if isinstance(system, str) or system is None else _listed(system, "system"),
        tools=_listed(params.get("tools") or (), "tools"),
        settings=settings,
    )
    return FrameworkCall(head=head, messages=checked, betas=_betas(params.get("betas")))


def _listed(value: object, name: str) -> list[Any]:
    """``value`` (a ``system`` or ``tools`` list) as a list; anything else is refused here, with
    the field's name (the head's own check then judges the items)."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise FrameworkParamsInvalid(f"{name} must be a list, got {value!r:.80}")


def _message(index: int, item: object) -> dict[str, Any]:
    if not isinstance(item, Mapping) or item.get("role") not in ("user", "assistant", "system"):
        raise FrameworkParamsInvalid(
            f"messages[{index}] is not a user, assistant or system message: {item!r:.80}"
        )
    if "content" not in item:
        if item["role"] == "system" and "output_config" in item:  # per-message effort alone
            return {**item, "content": []}
        raise FrameworkParamsInvalid(f"messages[{index}] has no content")
    return dict(item)


def _betas(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(b.strip() for b in value.split(",") if b.strip())
    if isinstance(value, Sequence):
        return tuple(str(b) for b in value)
    raise FrameworkParamsInvalid(f"betas must be a list of names, got {value!r:.80}")


def with_betas(request: dict[str, Any], betas: Sequence[str]) -> dict[str, Any]:
    """``request`` with ``betas`` joined to its own, sorted (unchanged when none are added)."""
    mine = list(request.get("betas") or ())
    joined = sorted(set(mine) | set(betas))
    if joined == sorted(mine):
        return request
    return {**request, "betas": joined}
