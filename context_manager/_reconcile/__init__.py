"""Reconcile: a framework's per-call message list turned into this library's request (SPEC 18).

The layer sits between the compiler and the facade: it uses the facade's own methods (passed in
as a ``ReconcileHost``), so the facade's ``reconcile`` is a thin call into it.
"""

from __future__ import annotations

from ._apply import (
    FRAMEWORK_MESSAGES,
    HOST_FOLD,
    KeyCache,
    ReconcileHost,
    Reconciliation,
    library_owned,
    reconcile,
)
from ._params import FrameworkCall, FrameworkParamsInvalid, split_params, with_betas

__all__ = [
    "FRAMEWORK_MESSAGES",
    "HOST_FOLD",
    "FrameworkCall",
    "FrameworkParamsInvalid",
    "KeyCache",
    "ReconcileHost",
    "Reconciliation",
    "library_owned",
    "reconcile",
    "split_params",
    "with_betas",
]
