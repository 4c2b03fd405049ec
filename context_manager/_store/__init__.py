"""The store layer: the ``Store`` protocol, the memory and SQLite stores, branch lineage.

Imports only ``_model``. A store never loses what it stored.
"""

from __future__ import annotations

from ._lineage import (
    lineage_of,
)
from ._memory import (
    MemoryStore,
)
from ._protocol import (
    BindingRecordData,
    BranchRecord,
    BranchRef,
    Lineage,
    Release,
    Store,
    branch_key,
)
from ._read import (
    check_limit,
    select_window,
)
from ._sqlite import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    SQLiteStore,
)
from ._sqlite_file import (
    BUSY_TIMEOUT_SECONDS,
    connect,
    open_versioned,
    transaction,
)

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT_SECONDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "BindingRecordData",
    "BranchRecord",
    "BranchRef",
    "Lineage",
    "MemoryStore",
    "Release",
    "SQLiteStore",
    "Store",
    "branch_key",
    "check_limit",
    "connect",
    "lineage_of",
    "open_versioned",
    "select_window",
    "transaction",
]
