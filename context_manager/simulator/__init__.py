"""A local Messages API that signs, verifies and drops thinking blocks as the real one does.

Run it in-process (``Simulator().client()``, an ``httpx2`` transport, no sockets) or on loopback
(``python -m context_manager.simulator --port N``). The public API is re-exported here by name.
"""

from __future__ import annotations

from ._api import (
    BINDING_BETA,
    DROP_REASONS,
    END_USER_MISMATCH,
    MODEL_MISMATCH,
    ORGANIZATION_MISMATCH,
    PREFIX_MISMATCH,
    SYSTEM_CLEAR_AT_BETA,
    TOOL_CHANGES_BETA,
)
from ._errors import InvalidRequest, NotFound, ScriptFailed, SimulatedApiError
from ._reply import Script, default_script
from ._server import SimulatorServer
from ._simulator import BASE_URL, DEFAULT_KEY, Call, Simulator
from ._transport import SimulatorTransport
from ._verify import BlockCheck

__all__ = [
    "BASE_URL",
    "BINDING_BETA",
    "DEFAULT_KEY",
    "DROP_REASONS",
    "END_USER_MISMATCH",
    "MODEL_MISMATCH",
    "ORGANIZATION_MISMATCH",
    "PREFIX_MISMATCH",
    "SYSTEM_CLEAR_AT_BETA",
    "TOOL_CHANGES_BETA",
    "BlockCheck",
    "Call",
    "InvalidRequest",
    "NotFound",
    "Script",
    "ScriptFailed",
    "SimulatedApiError",
    "Simulator",
    "SimulatorServer",
    "SimulatorTransport",
    "default_script",
]
