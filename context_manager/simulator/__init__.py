"""A local Messages API that signs, verifies and drops thinking blocks as the real one does.

Run it in-process (``Simulator().client()``, an ``httpx2`` transport, no sockets) or on loopback
(``python -m context_manager.simulator --port N``). The public API is re-exported here by name.
"""

from __future__ import annotations

from ._api import (
    BINDING_BETA,
    DROP_REASONS,
    END_USER_MISMATCH,
    INLINE_TOOLS_BETA,
    MODEL_MISMATCH,
    ORGANIZATION_MISMATCH,
    OUTPUT_CONFIG_BETA,
    PREFIX_MISMATCH,
    SYSTEM_CLEAR_AT_BETA,
    THINKING_DROPPED,
    THINKING_MISMATCH_ALLOWED,
    TOOL_CHANGES_BETA,
)
from ._call import Call
from ._compaction import COMPACTION_BETA
from ._editing import CLEARED_RESULT, EDITING_BETA, THRESHOLD_BETA
from ._errors import InvalidRequest, NotFound, ScriptFailed, SimulatedApiError
from ._models import (
    SYSTEM_MESSAGE_MODELS,
    PrefixCheck,
    Readability,
    documented_prefix_check,
    documented_readability,
)
from ._reply import Script, default_script
from ._server import SimulatorServer
from ._simulator import BASE_URL, DEFAULT_KEY, DEFAULT_ORGANIZATION, Simulator
from ._summarize import COMPACTION_MODELS
from ._transport import SimulatorTransport
from ._verify import BlockCheck
from ._wire import SignedBlock

__all__ = [
    "BASE_URL",
    "BINDING_BETA",
    "CLEARED_RESULT",
    "COMPACTION_BETA",
    "COMPACTION_MODELS",
    "DEFAULT_KEY",
    "DEFAULT_ORGANIZATION",
    "DROP_REASONS",
    "EDITING_BETA",
    "END_USER_MISMATCH",
    "INLINE_TOOLS_BETA",
    "MODEL_MISMATCH",
    "ORGANIZATION_MISMATCH",
    "OUTPUT_CONFIG_BETA",
    "PREFIX_MISMATCH",
    "SYSTEM_CLEAR_AT_BETA",
    "SYSTEM_MESSAGE_MODELS",
    "THINKING_DROPPED",
    "THINKING_MISMATCH_ALLOWED",
    "THRESHOLD_BETA",
    "TOOL_CHANGES_BETA",
    "BlockCheck",
    "Call",
    "InvalidRequest",
    "NotFound",
    "PrefixCheck",
    "Readability",
    "Script",
    "ScriptFailed",
    "SignedBlock",
    "SimulatedApiError",
    "Simulator",
    "SimulatorServer",
    "SimulatorTransport",
    "default_script",
    "documented_prefix_check",
    "documented_readability",
]
