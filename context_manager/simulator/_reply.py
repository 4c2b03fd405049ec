"""Turning a script's answer into a signed reply message: blocks, signatures, usage, stop reason.

Pure functions. A reply's signed blocks are bound, in order, to the request as the model saw it
(dropped blocks removed) then the reply's earlier blocks exactly as returned, so a client that
sends the reply back unchanged gets every block verified. Nothing returned carries a ``None``
inside its content (a client echoing it back would be refused).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs

from ._api import REDACTED_THINKING, SIGNED_TYPES, THINKING
from ._canon import canonical_json, chain_step
from ._errors import ScriptFailed
from ._sign import Binding, block_digest, sign
from ._wire import to_wire

Script: TypeAlias = Callable[[dict[str, Any]], Iterable[Any]]
"""``script(request) -> reply blocks``: wire dicts, block objects, SDK blocks or strings (a string
is a text block). ``request`` is the body as the model sees it: blocks the API removed and cleared
system messages left out, ``tools`` the tools offered at the end of the conversation (after every
``tool_addition`` / ``tool_removal``)."""

CHARS_PER_TOKEN = 4
"""The usage estimate's ratio: about four characters of canonical JSON per token."""

SNIPPET_CHARS = 60
"""How much of the user's words the default script quotes."""

ASKING_VERBS = frozenset({"use", "call"})
"""The default script calls a tool named right after one of these words in the user's text."""
WORD_EDGES = "`'\".,;:!?()[]{}"
"""Characters ignored around a word when the default script looks for a tool's name."""

REPLY_ROLE = "assistant"
THINKING_ON = frozenset({"enabled", "adaptive"})
"""``thinking.type`` values under which a reply may carry thinking blocks."""

_UNSIGNED = ""


def last_user_text(request: Mapping[str, Any]) -> str | None:
    """The text of the newest user message's text blocks, or ``None`` when it has none."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        return " ".join(texts) if texts else None
    return None


def asked_tool(said: str, offered: Iterable[str]) -> str | None:
    """The tool ``said`` asks for: a name in ``offered`` right after "use" or "call" ("the"
    between is skipped, quotes and punctuation around the name ignored), else ``None``.

    >>> asked_tool("Please use `read_log`, then tell me.", ["read_log", "grep"])
    'read_log'
    >>> asked_tool("call the grep tool", ["read_log", "grep"]), asked_tool("use it", ["grep"])
    ('grep', None)
    """
    names = set(offered)
    words = [word.strip(WORD_EDGES) for word in said.split()]
    for k, word in enumerate(words):
        if word.lower() not in ASKING_VERBS:
            continue
        rest = words[k + 1 : k + 3]
        if rest and rest[0].lower() == "the":
            rest = rest[1:]
        if rest and rest[0] in names:
            return rest[0]
    return None


def _answers_tools(request: Mapping[str, Any]) -> bool:
    """True when the newest user message carries tool results (a round to answer, not start)."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return isinstance(content, list) and any(
                isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
            )
    return False


def default_script(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Think one line, answer one line, both quoting the newest user words.

    When those words ask for a tool the request offers by name ("use read_log", "call the
    grep tool"), think one line and call it with ``{}`` as input instead; the reply to its
    results is "Done.". Any other behaviour needs ``Simulator(script=...)``.
    """
    said = last_user_text(request)
    if said is None:
        return [
            {"type": THINKING, "thinking": "The tool results are in.", "signature": _UNSIGNED},
            {"type": "text", "text": "Done."},
        ]
    offered = [t["name"] for t in request.get("tools", []) if isinstance(t.get("name"), str)]
    tool = None if _answers_tools(request) else asked_tool(said, offered)
    if tool is not None:
        return [
            {"type": THINKING, "thinking": f"The user asks for {tool}.", "signature": _UNSIGNED},
            {"type": "tool_use", "name": tool, "input": {}},
        ]
    snippet = " ".join(said.split())[:SNIPPET_CHARS]
    return [
        {"type": THINKING, "thinking": f"The user wrote: {snippet}", "signature": _UNSIGNED},
        {"type": "text", "text": f"You said: {snippet}"},
    ]


def to_reply_block(item: Any, new_id: Callable[[str], str]) -> dict[str, Any]:
    """One script item as a wire dict, ready for signing.

    A thinking block needs only its text (``signature`` is filled in later); a ``tool_use`` block
    with no (or an empty) ``id`` gets one from ``new_id("toolu")``.

    Raises:
        ScriptFailed: ``item`` is not reply content.
    """
    try:
        raw = to_wire(item)
    except TypeError as err:
        raise ScriptFailed(str(err)) from err
    kind = raw.get("type")
    if kind == THINKING:
        raw.setdefault("signature", _UNSIGNED)
        raw.setdefault("thinking", "")
    elif kind == REDACTED_THINKING:
        raw.setdefault("data", _UNSIGNED)
    elif kind == "tool_use":
        raw.setdefault("input", {})
        if not raw.get("id"):
            raw["id"] = new_id("toolu")
        if not isinstance(raw.get("name"), str) or not isinstance(raw.get("input"), dict):
            raise ScriptFailed(f"tool_use block {raw!r} needs a string name and an object input")
    return raw


def run_script(script: Script, request: dict[str, Any], new_id: Callable[[str], str]) -> list[Any]:
    """Call ``script`` and convert its answer to wire dicts.

    Raises:
        ScriptFailed: the script raised or answered something that is not reply content.
    """
    try:
        items = list(script(request))
    except Exception as err:
        raise ScriptFailed(f"{type(err).__name__}: {err}") from err
    return [to_reply_block(item, new_id) for item in items]


def thinking_on(request: Mapping[str, Any]) -> bool:
    """True when the request enables thinking (only then may a reply carry thinking blocks)."""
    thinking = request.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("type") in THINKING_ON


def display_omitted(request: Mapping[str, Any]) -> bool:
    """True when the request asks for thinking text to be omitted (only the signature returns)."""
    thinking = request.get("thinking")
    return isinstance(thinking, Mapping) and thinking.get("display") == "omitted"


def sign_reply(
    blocks: Iterable[dict[str, Any]], start: Binding, *, key: bytes, omit_text: bool
) -> list[dict[str, Any]]:
    """Sign every thinking / redacted block of a reply, each bound to what precedes it.

    Args:
        blocks: the reply's wire blocks in order.
        start: the binding of a block opening the reply: the producing model, organization and
            end user, the request's bound head, its content chain and the last thinking block
            the model saw (the request as sent, minus removed blocks).
        key: the simulator's key.
        omit_text: return thinking text as ``""`` (``display: "omitted"``).

    Returns:
        The blocks as returned, signatures filled in. Each later block's chain covers the reply's
        non-thinking blocks before it, and its predecessor is the reply's previous thinking block.
    """
    out: list[dict[str, Any]] = []
    binding = start
    for block in blocks:
        kind = block.get("type")
        if kind in SIGNED_TYPES:
            text = "" if omit_text or kind == REDACTED_THINKING else str(block.get("thinking", ""))
            signature = sign(key, binding, block_type=str(kind), own_text=text)
            if kind == THINKING:
                block = {**block, "thinking": text, "signature": signature}
            else:
                block = {**block, "data": signature}
            predecessor = block_digest(str(kind), signature)
            binding = attrs.evolve(binding, predecessor=predecessor)
        else:
            binding = attrs.evolve(binding, chain=chain_step(binding.chain, REPLY_ROLE, block))
        out.append(block)
    return out


def estimate_tokens(value: Any) -> int:
    """About one token per four characters of ``value``'s canonical JSON (at least 1)."""
    return max(1, math.ceil(len(canonical_json(value)) / CHARS_PER_TOKEN))


def output_tokens(content: Iterable[Mapping[str, Any]]) -> int:
    """Output tokens of the reply content; signatures are not counted (they are not output)."""
    unsigned = [
        {
            k: v
            for k, v in block.items()
            if not (k == "signature" or (k == "data" and block.get("type") == REDACTED_THINKING))
        }
        for block in content
    ]
    return estimate_tokens(unsigned)


def stop_reason(content: Iterable[Mapping[str, Any]]) -> str:
    """``"tool_use"`` when the reply calls a tool, else ``"end_turn"``."""
    return "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"


def message_dict(
    *,
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    usage_in: int,
    transformations: list[Any] | None,
) -> dict[str, Any]:
    """The Messages API reply object (``input_transformations`` only when not ``None``)."""
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": REPLY_ROLE,
        "model": model,
        "content": content,
        "stop_reason": stop_reason(content),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage_in,
            "output_tokens": output_tokens(content),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    if transformations is not None:
        message["input_transformations"] = transformations
    return message


def is_signed(block: Mapping[str, Any]) -> bool:
    """True for ``thinking`` and ``redacted_thinking`` wire blocks."""
    return block.get("type") in SIGNED_TYPES
