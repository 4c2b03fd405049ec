"""Input tokens as the simulator counts them: one stated estimator, position by position.

Pure functions, owned by the simulator (it shares no code with the library it checks). The
estimator: the request is read as the API reads it, tools, then ``system``, then each message's
content blocks; each of those items costs ``ceil(len(canonical JSON) / 4)`` tokens, at least one
(``cache_control`` never counts), and each message adds ``MESSAGE_FRAME_TOKENS`` for its role,
counted with its first block. A request's count is the sum over its positions, so a prefix's
count is a running sum: what the prompt cache reads and writes (``_cache``), what ``usage``
reports (read + written + uncached is the whole) and what ``count_tokens`` answers all agree.
Each position also carries the digest of the prefix ending there (the cache's key): the model,
the organization, every earlier item and, for message positions, the settings the API says
invalidate a message cache (``thinking`` type and budget, ``tool_choice``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from anthropic.types.beta.message_count_tokens_params import MessageCountTokensParams

from ._cache import CACHE_CONTROL
from ._canon import canonical_json, normalize_block, normalize_content, normalize_system
from ._editing import apply_edits, parse_edits
from ._errors import InvalidRequest
from ._validate import validate_request
from ._verify import Verifier, behavior, walk

CHARS_PER_TOKEN = 4
"""About four characters of canonical JSON per token."""

MESSAGE_FRAME_TOKENS = 3
"""Role framing per message."""


COUNT_PATH = "/v1/messages/count_tokens"
"""The token-counting endpoint (``?beta=true`` accepted and ignored, as for messages)."""


@attrs.frozen
class Item:
    """One position of a request, in the order the API reads it.

    Attributes:
        where: ``"tools.k"``, ``"system.j"`` or ``"messages.i.content.j"``.
        tokens: what this item costs (with its message's framing when it opens the message).
        total: the running count up to and including this item.
        key: the digest of the prefix ending here (the prompt cache's key).
        marker: the item's ``cache_control`` value, or ``None``.
    """

    where: str
    tokens: int
    total: int
    key: str
    marker: Mapping[str, Any] | None


def item_tokens(value: Any) -> int:
    """What one item costs: ``ceil(len(canonical JSON) / 4)``, at least 1.

    >>> item_tokens({"type": "text", "text": "hello there", "cache_control": {"type": "ephemeral"}})
    9
    """
    return max(1, math.ceil(len(canonical_json(value)) / CHARS_PER_TOKEN))


def _step(key: str, value: Any) -> str:
    return hashlib.sha256(f"{key}\n{canonical_json(value)}".encode()).hexdigest()


def _marker(value: Any) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        return None
    found = value.get(CACHE_CONTROL)
    if isinstance(found, Mapping):
        return found
    if value.get("type") == "tool_result":
        for inner in value.get("content", []) if isinstance(value.get("content"), list) else []:
            nested = inner.get(CACHE_CONTROL) if isinstance(inner, Mapping) else None
            if isinstance(nested, Mapping):
                return nested
    return None


def message_settings(body: Mapping[str, Any]) -> dict[str, Any]:
    """The settings whose change invalidates cached messages (not tools or system)."""
    thinking = body.get("thinking")
    settings: dict[str, Any] = {}
    if isinstance(thinking, Mapping):
        settings["thinking"] = {k: thinking[k] for k in ("type", "budget_tokens") if k in thinking}
    if "tool_choice" in body:
        settings["tool_choice"] = body["tool_choice"]
    return settings


def items(
    body: Mapping[str, Any], messages: Sequence[Any] | None = None, *, organization: str = ""
) -> list[Item]:
    """Every position of ``body`` (``messages`` instead of ``body["messages"]`` when given: the
    request as the model sees it, dropped blocks left out), in reading order.

    A top-level ``cache_control`` (automatic caching) marks the last item.
    """
    key = _step("", {"model": body.get("model"), "organization": organization})
    total = 0
    out: list[Item] = []

    def add(where: str, value: Any, extra: int = 0) -> None:
        nonlocal key, total
        tokens = item_tokens(value) + extra
        total += tokens
        key = _step(key, value)
        out.append(Item(where, tokens, total, key, _marker(value)))

    tools = body.get("tools")
    for k, tool in enumerate(tools if isinstance(tools, list) else []):
        add(f"tools.{k}", tool)
    for j, block in enumerate(normalize_system(body.get("system"))):
        add(f"system.{j}", block)
    key = _step(key, message_settings(body))
    sent = body.get("messages", []) if messages is None else messages
    for i, message in enumerate(sent if isinstance(sent, list | tuple) else []):
        if not isinstance(message, Mapping):
            continue
        key = _step(key, {"role": message.get("role")})
        for j, block in enumerate(normalize_content(message.get("content"))):
            extra = MESSAGE_FRAME_TOKENS if j == 0 else 0
            add(f"messages.{i}.content.{j}", normalize_block(block), extra)
    automatic = body.get(CACHE_CONTROL)
    if isinstance(automatic, Mapping) and out:
        out[-1] = attrs.evolve(out[-1], marker=automatic)
    return out


def count_input(
    body: Mapping[str, Any], messages: Sequence[Any] | None = None, *, organization: str = ""
) -> int:
    """The input tokens of ``body`` (see ``items`` for ``messages``)."""
    counted = items(body, messages, organization=organization)
    return counted[-1].total if counted else 0


COUNT_FIELDS = frozenset(MessageCountTokensParams.__annotations__) - {"betas"}
"""Top-level fields ``count_tokens`` accepts: the SDK's count params (``betas`` is a header)."""

COUNT_PROBE_MAX_TOKENS = 1 << 30
"""``max_tokens`` given to the shared validation, which a count request does not carry."""


def answer_count(
    body: dict[str, Any],
    betas: frozenset[str],
    *,
    verifier: Verifier,
    enforced: bool,
    system_message_models: frozenset[str],
    check_issued: Callable[[dict[str, Any]], None] = lambda body: None,
) -> dict[str, Any]:
    """The ``count_tokens`` answer: the request validated and its thinking checked as a call's.

    The binding check runs as for ``POST /v1/messages`` (the provider's Preserved thinking
    page): in error mode a
    failing block is the same 400; blocks a drop-mode call would remove are not counted. Fault
    knobs are never consumed (they belong to calls). ``check_issued(body)`` runs after
    validation (the simulator's open-tool-loop check, provider rule 6). ``compaction`` is accepted
    and ignored (the count is for ``messages`` as sent); with ``context_management`` the count
    is of the edited request and ``context_management.original_input_tokens`` of the one sent.

    Raises:
        InvalidRequest: a field ``count_tokens`` does not take, or anything a call would refuse.
    """
    for name in sorted(body):
        if name not in COUNT_FIELDS:
            raise InvalidRequest(f"{name}: Extra inputs are not permitted")
    validate_request({**body, "max_tokens": COUNT_PROBE_MAX_TOKENS}, betas, system_message_models)
    check_issued(body)
    edits = parse_edits(body, betas)
    walked = walk(verifier, body, mode=behavior(body, enforced=enforced))
    if not edits:
        return {"input_tokens": count_input(body, walked.messages)}
    edited = apply_edits(edits, walked.messages, lambda messages: count_input(body, messages))
    return {
        "input_tokens": count_input(body, edited.messages),
        "context_management": {"original_input_tokens": edited.original_tokens},
    }
