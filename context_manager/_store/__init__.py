"""The store layer: the ``Store`` protocol; the memory, SQLite and PostgreSQL stores; lineage.

Imports only ``_model``. A store never loses what it stored.
"""

from __future__ import annotations

from ._hold import (
    HOLD_TIMEOUT_SECONDS,
    Hold,
    holder_identity,
)
from ._lineage import (
    lineage_of,
)
from ._memory import (
    MemoryStore,
)
from ._postgres import (
    INSTALL_HINT,
    PostgresStore,
)
from ._postgres_schema import (
    APPLICATION,
    HOLD_CLASS,
    LOCK_CLASS,
    MIGRATION_LOCK,
    MIGRATIONS,
    SCHEMA_VERSION,
    open_versioned,
    probe,
)
from ._protocol import (
    AnchoredHead,
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
    SQLiteStore,
)
from ._sqlite_file import (
    BUSY_TIMEOUT_SECONDS,
    connect,
    transaction,
)

__all__ = [
    "APPLICATION",
    "APPLICATION_ID",
    "BUSY_TIMEOUT_SECONDS",
    "HOLD_CLASS",
    "HOLD_TIMEOUT_SECONDS",
    "INSTALL_HINT",
    "LOCK_CLASS",
    "MIGRATIONS",
    "MIGRATION_LOCK",
    "SCHEMA_VERSION",
    "AnchoredHead",
    "BindingRecordData",
    "BranchRecord",
    "BranchRef",
    "Hold",
    "Lineage",
    "MemoryStore",
    "PostgresStore",
    "Release",
    "SQLiteStore",
    "Store",
    "branch_key",
    "check_limit",
    "connect",
    "holder_identity",
    "lineage_of",
    "open_versioned",
    "probe",
    "select_window",
    "transaction",
]
