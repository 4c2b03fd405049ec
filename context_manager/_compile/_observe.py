"""Observe mode (``ThinkingBinding(enforcement="observe")``): which left-out blocks are sent.

On an account the prefix check is not enforced on, a request without ``block_binding`` lets a
failing block reach the model and lists it as ``thinking_mismatch_allowed`` (provider rules 10,
14). Observe mode sends such blocks and keeps the verdict as a prediction. Invariants: only a
block judged to fail its prefix, its order or a changed head is sent this way; the model check
still applies (a block the model cannot read is never sent for observation); a block that is not
as it was made (its own digest unknown, or not the stamp's) is never sent, since every model
refuses it (provider rule 12). After the reply, ``observe_reply`` compares the predictions
with the provider's report. Pure apart from ``log_observed``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from context_manager._binding._chain import own_digest
from context_manager._binding._drops import DROPPED_TYPE, allowed_paths
from context_manager._binding._validity import made_as, producer_readable
from context_manager._model._log import library_logger
from context_manager._model._messages import StoredMessage
from context_manager._model._results import CompileResult
from context_manager._model._stamps import Stamp

from ._render import RenderContext

log = library_logger("context_manager.compile")

OBSERVED_VERDICTS = frozenset({"head", "prefix", "gap"})
"""Verdicts the provider's prefix check decides (a permanent release or a missing stamp are the
library's own facts: never sent)."""


def predicted_only(
    ctx: RenderContext, message: StoredMessage, verdict: str, canonical: bytes
) -> bool:
    """Whether a block judged ``verdict`` is sent anyway and recorded as a prediction."""
    if not ctx.observe or verdict not in OBSERVED_VERDICTS:
        return False
    stamp = ctx.stamps.get(message.id)
    if not isinstance(stamp, Stamp) or not made_as(stamp, own_digest(canonical)):
        return False
    return producer_readable(stamp, ctx.model, ctx.digests.get("model", ""), ctx.reads)


@attrs.frozen
class Observed:
    """One reply's predictions against the provider's report.

    ``unreported``: predicted to fail, but reached the model with no mismatch entry (a block
    the provider dropped for its organization, end user or model is reported as that drop);
    ``unpredicted``: a ``thinking_mismatch_allowed`` entry the compiler predicted valid."""

    predicted: tuple[str, ...]
    allowed: tuple[str, ...]
    unreported: tuple[str, ...]
    unpredicted: tuple[str, ...]

    @property
    def mismatches(self) -> int:
        return len(self.unreported) + len(self.unpredicted)


def observe_reply(result: CompileResult, response: object) -> Observed | None:
    """Compare ``result``'s predictions with ``response``'s ``thinking_mismatch_allowed``
    entries; ``None`` when the response carries no report to compare with (content blocks
    only, or a response without ``input_transformations``)."""
    if not _has_report(response):
        return None
    allowed = allowed_paths(response)
    dropped = allowed_paths(response, DROPPED_TYPE)  # removed first (rule 11): no prefix entry
    predicted = result.predicted_mismatches
    return Observed(
        predicted,
        allowed,
        tuple(p for p in predicted if p not in allowed and p not in dropped),
        tuple(p for p in allowed if p not in predicted),
    )


def log_observed(namespace: str, result: CompileResult, observed: Observed) -> None:
    """One ``binding_prediction_mismatch`` warning per kind of disagreement (with its paths),
    then the reply's summary (``binding_observed``, for operators)."""
    where = {"namespace": namespace, "branch": result.branch, "compile_id": result.compile_id}
    for kind, paths in (("unreported", observed.unreported), ("unpredicted", observed.unpredicted)):
        if paths:
            log.warning("binding_prediction_mismatch", kind=kind, paths=list(paths), **where)
    counts = {"predicted": len(observed.predicted), "allowed": len(observed.allowed)}
    log.info("binding_observed", mismatches=observed.mismatches, **counts, **where)


def _has_report(response: object) -> bool:
    if isinstance(response, Mapping):
        return response.get("input_transformations") is not None
    if isinstance(response, list | tuple | str | bytes):
        return False
    return getattr(response, "input_transformations", None) is not None
