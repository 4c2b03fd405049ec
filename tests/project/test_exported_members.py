"""The public surface: each package's ``__all__`` is exactly its public names, sorted.

The four public namespaces are ``context_manager``, ``notices``, ``context_manager.runtime`` and
``context_manager.simulator``. Their names are a contract (SPEC 14): ``CONTRACT`` records the
names each one exported when the layers moved into folders, and a name may be added, never removed.
"""

from __future__ import annotations

import inspect
import re
from types import ModuleType

import pytest

import context_manager
import context_manager.adapters
import context_manager.runtime
import context_manager.simulator
import notices

PACKAGES = [
    context_manager,
    notices,
    context_manager.runtime,
    context_manager.simulator,
    context_manager.adapters,
]

CONTRACT: dict[str, frozenset[str]] = {
    "context_manager": frozenset(
        [
            "AuditResult",
            "Block",
            "BranchExists",
            "BranchInUse",
            "BranchNotFound",
            "BranchRecord",
            "BranchRef",
            "CompileResult",
            "ContextManager",
            "ContextManagerError",
            "Fold",
            "Head",
            "ImageBlock",
            "MemoryReasoningStore",
            "MemoryStore",
            "MessageId",
            "MessageMeta",
            "MessageNotFound",
            "NotADatabase",
            "OverBudget",
            "Passthrough",
            "PlacedDrops",
            "ProvenanceEntry",
            "REASONING_LOSS_KIND",
            "ReasoningCapture",
            "ReasoningPart",
            "ReasoningStore",
            "RedactedThinkingBlock",
            "ReplyDrop",
            "RoundDrop",
            "SQLiteReasoningStore",
            "SQLiteStore",
            "SchemaTooNew",
            "Source",
            "Store",
            "StoredMessage",
            "TextBlock",
            "ThinkingBinding",
            "ThinkingBlock",
            "ThinkingDrop",
            "ThinkingStrip",
            "ToolResultBlock",
            "ToolUseBlock",
            "UnknownBlock",
            "UnplacedDrop",
            "UntrustedText",
            "Window",
            "block_from_wire",
            "block_to_wire",
            "blocks_from_wire",
            "blocks_to_wire",
            "branch_key",
            "converter",
            "estimate_tokens",
            "parse_input_transformations",
            "place_thinking_drops",
            "read_reasoning",
            "warn_if_reasoning_unconfigured",
        ]
    ),
    "notices": frozenset(
        [
            "ALERT_EVENT",
            "DEFAULT_CAP",
            "IncidentStep",
            "LineForm",
            "MARKER",
            "QUOTE_LIMIT",
            "ReadMessage",
            "ReasoningLossTeller",
            "ThinkingLossIncidents",
            "TurnState",
            "cause_clause",
            "name_reply",
            "notice_metadata",
            "quoted_start",
            "reasoning_loss_line",
        ]
    ),
    "context_manager.runtime": frozenset(
        [
            "Agent",
            "RetryPolicy",
            "Runtime",
            "ToolCall",
            "ToolFunction",
            "Turn",
            "TurnResult",
            "check_agent_name",
        ]
    ),
    "context_manager.simulator": frozenset(
        [
            "BASE_URL",
            "BINDING_BETA",
            "BlockCheck",
            "Call",
            "DEFAULT_KEY",
            "DROP_REASONS",
            "END_USER_MISMATCH",
            "InvalidRequest",
            "MODEL_MISMATCH",
            "NotFound",
            "ORGANIZATION_MISMATCH",
            "PREFIX_MISMATCH",
            "SYSTEM_CLEAR_AT_BETA",
            "Script",
            "ScriptFailed",
            "SimulatedApiError",
            "Simulator",
            "SimulatorServer",
            "SimulatorTransport",
            "TOOL_CHANGES_BETA",
            "default_script",
        ]
    ),
    "context_manager.adapters": frozenset(["ManagedAnthropic", "ManagedAsyncAnthropic"]),
}
"""What each namespace exported before the second round: users depend on every one of these
(``context_manager.adapters``: the third round's contract names, issue 31)."""

_FUTURE_FEATURE = type(annotations)
"""``from __future__ import annotations`` leaves a feature flag named ``annotations`` behind."""


def public_names(package: ModuleType) -> set[str]:
    """What a user can import from ``package``: not private, not a module, not a __future__ flag."""
    return {
        name
        for name, value in vars(package).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and not isinstance(value, _FUTURE_FEATURE)
    }


def isort_key(name: str) -> tuple[int, list[int | str]]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, Classes, functions; natural sort."""
    if len(name) > 1 and name.upper() == name and name.lower() != name:
        group = 0
    elif name[:1].isupper():
        group = 1
    else:
        group = 2
    return group, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_lists_exactly_the_public_names(package: ModuleType) -> None:
    """Every public name is in ``__all__`` and every ``__all__`` entry is defined, once."""
    exported = list(package.__all__)
    assert public_names(package) == set(exported)
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_all_is_sorted(package: ModuleType) -> None:
    """``__all__`` is sorted: constants, then classes, then functions, each alphabetically."""
    exported = list(package.__all__)
    assert sorted(exported, key=isort_key) == exported


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_no_name_a_user_depends_on_was_removed(package: ModuleType) -> None:
    """Every name of the contract is still exported and still importable."""
    missing = CONTRACT[package.__name__] - set(package.__all__)
    assert missing == set()
    for name in CONTRACT[package.__name__]:
        assert getattr(package, name) is not None


STORE_PARTS = (
    "MessageStore",
    "BindingStore",
    "BindingSerials",
    "ReadsTogether",
    "SnapshotStore",
    "HoldStore",
    "Store",
)


@pytest.mark.parametrize("part", STORE_PARTS)
def test_each_part_of_the_store_protocol_is_public_with_every_method_documented(
    part: str,
) -> None:
    """A store of one's own implements these (docs/stores.md): each is exported, and each of
    its methods says what it must do."""
    assert part in context_manager.__all__
    protocol = getattr(context_manager, part)
    methods = [
        name
        for name in dir(protocol)
        if not name.startswith("_") and inspect.isfunction(getattr(protocol, name))
    ]
    assert methods
    assert [m for m in methods if not inspect.getdoc(getattr(protocol, m))] == []
