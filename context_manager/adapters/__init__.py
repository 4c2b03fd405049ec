"""Drop-ins for frameworks: a managed ``anthropic`` client and (``gateway``) a local Messages API.

``ManagedAnthropic`` / ``ManagedAsyncAnthropic`` wrap a real client for one agent; every call
they make goes through ``ContextManager.reconcile``. Framework packages are imported lazily, in
the modules that need them, behind their extras.
"""

from __future__ import annotations

from ._agents import AgentRef, AgentSpec, ManagedAgents, Prepared
from ._client import (
    AsyncManagedMessages,
    ManagedAnthropic,
    ManagedAsyncAnthropic,
    SyncManagedMessages,
)
from ._streams import (
    ManagedAsyncStream,
    ManagedAsyncStreamManager,
    ManagedStream,
    ManagedStreamManager,
)

__all__ = [
    "AgentRef",
    "AgentSpec",
    "AsyncManagedMessages",
    "ManagedAgents",
    "ManagedAnthropic",
    "ManagedAsyncAnthropic",
    "ManagedAsyncStream",
    "ManagedAsyncStreamManager",
    "ManagedStream",
    "ManagedStreamManager",
    "Prepared",
    "SyncManagedMessages",
]
