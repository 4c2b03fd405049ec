"""Drop-ins for frameworks: a managed ``anthropic`` client and (``gateway``) a local Messages API.

``ManagedAnthropic`` / ``ManagedAsyncAnthropic`` wrap a real client for one agent; every call
they make goes through ``ContextManager.reconcile``. Framework packages are imported lazily, in
the modules that need them, behind their extras.
"""

from __future__ import annotations

from ._agents import AgentRef, AgentSpec, AgentUnknown, ManagedAgents, Prepared
from ._client import (
    AsyncManagedMessages,
    ManagedAnthropic,
    ManagedAsyncAnthropic,
    SyncManagedMessages,
)
from ._gateway import (
    AGENT_HEADER,
    BRANCH_HEADER,
    DEFAULT_PORT,
    LOOPBACK,
    Gateway,
    NoAgent,
    gateway_app,
)
from ._streams import (
    ManagedAsyncStream,
    ManagedAsyncStreamManager,
    ManagedStream,
    ManagedStreamManager,
)

__all__ = [
    "AGENT_HEADER",
    "BRANCH_HEADER",
    "DEFAULT_PORT",
    "LOOPBACK",
    "AgentRef",
    "AgentSpec",
    "AgentUnknown",
    "AsyncManagedMessages",
    "Gateway",
    "ManagedAgents",
    "ManagedAnthropic",
    "ManagedAsyncAnthropic",
    "ManagedAsyncStream",
    "ManagedAsyncStreamManager",
    "ManagedStream",
    "ManagedStreamManager",
    "NoAgent",
    "Prepared",
    "SyncManagedMessages",
    "gateway_app",
]
