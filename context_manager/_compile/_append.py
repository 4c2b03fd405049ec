"""Append-only head changes (SPEC 7b): the anchored head, what a branch has sent, the change.

Pure: from the branch's anchored head, its newest ``head-change`` message and the current head,
``plan_change`` gives the head the request goes out with and the one system message to append.
The wording of a system-text change is fixed (documented in the README), so a reopened store
renders byte-identical requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from context_manager._model._canonical import canonical_json
from context_manager._model._content import Block, TextBlock, UnknownBlock
from context_manager._model._head import Head, bound_system
from context_manager._model._messages import HEAD_CHANGE_KIND, MessageMeta
from context_manager._store._protocol import AnchoredHead

REPLACED_TEXT = (
    "The instructions given at the start of this conversation are replaced by the following "
    "instructions, which apply from here on:"
)
"""Opens the text block of a system-text change; the new text follows after a blank line."""

WITHDRAWN_TEXT = (
    "The instructions given at the start of this conversation are withdrawn: none apply from "
    "here on."
)
"""The text block of a change to an empty system text."""


@attrs.frozen
class Sent:
    """What a branch has sent so far: the system text in force and the tools on offer.

    ``known``: every definition a ``tool_reference`` may name (the request's ``tools`` and the
    inline definitions given so far); ``active``: the names on offer, in order; ``deferred``: the
    definitions in the request's ``tools`` with ``defer_loading: true`` (the anchor's own and
    those added since), the only ones a ``tool_reference`` may add (provider rule 17).
    """

    system: Any
    active: tuple[str, ...]
    known: dict[str, dict[str, Any]]
    deferred: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "active": list(self.active),
            "known": self.known,
            "deferred": list(self.deferred),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sent:
        return cls(
            data.get("system"),
            tuple(data.get("active", ())),
            dict(data.get("known", {})),
            tuple(dict(t) for t in data.get("deferred", ())),
        )

    @classmethod
    def anchored(cls, anchor: AnchoredHead) -> Sent:
        return cls.of_head(anchor.head)

    @classmethod
    def of_head(cls, head: Mapping[str, Any]) -> Sent:
        """What is sent under ``head`` (``{"system", "tools"}``) before any change: each
        non-deferred tool on offer."""
        tools = [dict(t) for t in head.get("tools", ())]
        return cls(
            head.get("system"),
            tuple(str(t["name"]) for t in tools if not t.get("defer_loading")),
            {str(t["name"]): _loaded(t) for t in tools},
            tuple(t for t in tools if t.get("defer_loading")),
        )


@attrs.frozen
class Change:
    """The system message to append: its blocks, its metadata, and what is sent after it."""

    content: tuple[Block, ...]
    metadata: MessageMeta
    sent: Sent


def head_json(head: Head) -> dict[str, Any]:
    """``{"system", "tools"}`` of ``head`` as JSON (what an anchor keeps)."""
    system = (
        head.system if head.system is None or isinstance(head.system, str) else list(head.system)
    )
    return {"system": system, "tools": [dict(t) for t in head.tools]}


def request_head(anchor: AnchoredHead, sent: Sent, head: Head) -> Head:
    """The head the request goes out with: the anchored ``system`` and ``tools`` (plus the added
    tools as deferred, and the head's own deferred tools not declared yet), the current model
    and settings. Deferred tools bind nothing (provider rule 3), so the digests stay the
    anchored head's."""
    tools = list(anchor.head.get("tools", ()))
    names = {t.get("name") for t in tools}
    tools += [t for t in sent.deferred if t.get("name") not in names]  # the anchor's are in
    names = {t.get("name") for t in tools}
    tools += [t for t in head.tools if t.get("defer_loading") and t.get("name") not in names]
    return Head(
        model=head.model, system=anchor.head.get("system"), tools=tools, settings=head.settings
    )


def _loaded(tool: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in tool.items() if k not in ("defer_loading", "cache_control")}


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return canonical_json(_loaded(a)) == canonical_json(_loaded(b))


def _system_text(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    return "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))


def plan_change(sent: Sent, head: Head, *, inline_tools: bool) -> Change | bool | None:
    """The change from ``sent`` to ``head``: ``None`` when there is none, ``False`` when it
    cannot be appended (a redefined tool without inline definitions), else the ``Change``.

    Order of blocks: the system text, the removals (in the order they were on offer), the
    additions (in the head's order). A tool the head declares deferred is not offered.
    """
    blocks: list[Block] = []
    system = sent.system
    if bound_system(sent.system) != bound_system(head.system):
        text = _system_text(head.system)
        blocks.append(TextBlock(f"{REPLACED_TEXT}\n\n{text}" if text.strip() else WITHDRAWN_TEXT))
        system = head_json(head)["system"]
    wanted = [dict(t) for t in head.tools if not t.get("defer_loading")]
    by_name = {str(t["name"]): t for t in wanted}
    known = dict(sent.known)
    active = list(sent.active)
    deferred = list(sent.deferred)
    for name in sent.active:
        if name not in by_name or not _same(known[name], by_name[name]):
            blocks.append(_change("tool_removal", {"type": "tool_reference", "name": name}))
            active.remove(name)
    loadable = {str(t["name"]): t for t in deferred}
    for tool in wanted:
        name = str(tool["name"])
        if name in active:
            continue
        if name in loadable and _same(loadable[name], tool):
            # a reference adds only a tool declared deferred (provider rule 17): one that was in
            # ``tools`` loaded, or given inline, comes back inline
            ref: dict[str, Any] = {"type": "tool_reference", "name": name}
        elif name in known:
            if not inline_tools:
                return False
            ref = {"type": "tool_definition", "definition": _loaded(tool)}
        else:
            deferred.append({**_loaded(tool), "defer_loading": True})
            ref = {"type": "tool_reference", "name": name}
        known[name] = _loaded(tool)
        active.append(name)
        blocks.append(_change("tool_addition", ref))
    if not blocks:
        return None
    after = Sent(system, tuple(active), known, tuple(deferred))
    meta = MessageMeta(kind=HEAD_CHANGE_KIND, extra={"sent": after.to_json()})
    return Change(tuple(blocks), meta, after)


def _change(kind: str, tool: dict[str, Any]) -> UnknownBlock:
    return UnknownBlock({"type": kind, "tool": tool})
