"""What a request may ask for: a model the API serves, a prompt within its context window.

Pure data and functions. The documented ids (``DOCUMENTED_MODELS``, dated ids and ``-latest``
aliases of them included) and the simulator's own test ids (``claude-sim-<n>``) are served;
anything else is the API's 404 ``not_found_error`` (``model: <id>``), unless the caller names it
(``Simulator(extra_models=...)``, for a model newer than this table). A prompt over the context
window is the API's 400 (``prompt is too long: N tokens > M maximum``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ._errors import InvalidRequest, SimulatedApiError

DOCUMENTED_MODELS = frozenset(
    {
        "claude-fable-5-2",
        "claude-fable-5-1",
        "claude-fable-5",
        "claude-mythos-5-2",
        "claude-mythos-5-1",
        "claude-mythos-5",
        "claude-mythos-preview",
        "claude-opus-5-5",
        "claude-opus-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-opus-4-5",
        "claude-opus-4-1",
        "claude-opus-4",
        "claude-sonnet-5-5",
        "claude-sonnet-5",
        "claude-sonnet-4-6",
        "claude-sonnet-4-5",
        "claude-sonnet-4",
        "claude-haiku-5-5",
        "claude-haiku-4-5",
        "claude-3-7-sonnet",
        "claude-3-5-sonnet",
        "claude-3-5-haiku",
        "claude-3-opus",
        "claude-3-sonnet",
        "claude-3-haiku",
    }
)
"""Model ids the simulator serves (each with its dated ids and its ``-latest`` alias)."""

_ALIAS_TAIL = re.compile(r"-\d{8}$|-latest$")
_SIMULATOR_MODEL = re.compile(r"claude-sim-\d+")
"""The simulator's own test ids: no real model, none of the documented tables' rows."""

DEFAULT_CONTEXT_WINDOW = 200_000
"""Input tokens a request may carry (the documented standard window)."""


class UnknownModel(SimulatedApiError, LookupError):
    """The API's answer to a model id it does not serve: 404 ``not_found_error``."""

    def __init__(self, model: str) -> None:
        super().__init__(404, "not_found_error", f"model: {model}")


def served(model: str, extra: Iterable[str] = ()) -> bool:
    """Whether a request may name ``model``.

    >>> served("claude-opus-5-5-20260901"), served("claude-3-5-haiku-latest")
    (True, True)
    >>> served("claude-opus-55"), served("gpt-4o"), served("claude-next", ["claude-next"])
    (False, False, True)
    """
    bare = _ALIAS_TAIL.sub("", model)
    known = frozenset(extra)
    return (
        model in known
        or bare in known
        or bare in DOCUMENTED_MODELS
        or _SIMULATOR_MODEL.fullmatch(bare) is not None
    )


def check_model(model: object, extra: Iterable[str]) -> None:
    """Refuse a model id the API does not serve (``UnknownModel``); a non-string is left to
    the request validation."""
    if isinstance(model, str) and not served(model, extra):
        raise UnknownModel(model)


def check_window(tokens: int, window: int) -> None:
    """Refuse a prompt of more than ``window`` input tokens, in the API's words."""
    if tokens > window:
        raise InvalidRequest(f"prompt is too long: {tokens} tokens > {window} maximum")
