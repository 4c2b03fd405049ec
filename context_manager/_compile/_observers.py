"""The facade's observers: who hears a committing compile's strip, its restored replies, a
deleted branch and a recorded reply.

An observer that raises is logged and never fails the compile, the call or the turn; the other
observers still run. A dry compile tells no one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from context_manager._model._log import library_logger
from context_manager._model._messages import MessageId
from context_manager._model._results import CompileResult, ThinkingStrip

log = library_logger("context_manager")

StripObserver: TypeAlias = Callable[[ThinkingStrip, str], None]
"""``observer(strip, branch_key)``: called once per committing compile that strips."""

ReplyObserver: TypeAlias = Callable[[MessageId, CompileResult], None]
"""``observer(message_id, result)``: called after ``record_reply`` stores a reply."""


class CompileObservers:
    """The observer lists and their registration (a base class: ``ContextManager`` is one)."""

    namespace: str

    def __init__(self) -> None:
        self._observers: list[StripObserver] = []
        self._deletion_observers: list[Callable[[str], None]] = []
        self._reply_observers: list[ReplyObserver] = []
        self._restore_observers: list[Callable[[tuple[MessageId, ...], str], None]] = []

    def on_thinking_strip(self, callback: StripObserver) -> StripObserver:
        """Call ``callback(strip, branch_key)`` once per committing compile that strips.

        An observer that raises is logged and never fails the compile. Returns ``callback``.
        """
        self._observers.append(callback)
        return callback

    def on_thinking_restored(
        self, callback: Callable[[tuple[MessageId, ...], str], None]
    ) -> Callable[[tuple[MessageId, ...], str], None]:
        """Call ``callback(replies, branch_key)`` once per committing compile that sends again
        thinking the previous one left out (``CompileResult.restored``). Returns ``callback``."""
        self._restore_observers.append(callback)
        return callback

    def on_branch_deleted(self, callback: Callable[[str], None]) -> Callable[[str], None]:
        """Call ``callback(branch_key)`` after a branch is deleted (e.g. to forget told state)."""
        self._deletion_observers.append(callback)
        return callback

    def on_reply_recorded(self, callback: ReplyObserver) -> ReplyObserver:
        """Call ``callback(message_id, result)`` after each ``record_reply`` stores a reply.

        ``result`` is the compile the reply was recorded against (its branch is current). The
        runtime stores a ``[reasoning]`` line heard from a direct-API compile outside a turn
        only now, after the reply, so the line never stands between that compile's request and
        its reply. An observer that raises is logged and never fails the recording. Returns
        ``callback``.
        """
        self._reply_observers.append(callback)
        return callback

    def remove_strip_observer(self, callback: StripObserver) -> None:
        """Stop calling ``callback``; unknown callbacks are ignored."""
        if callback in self._observers:
            self._observers.remove(callback)

    def _notify(self, result: CompileResult) -> CompileResult:
        if result.restored and not result.dry:
            for restore_observer in list(self._restore_observers):
                try:
                    restore_observer(result.restored, result.branch)
                except Exception as err:  # an observer never fails a compile
                    log.warning(
                        "restore_observer_failed", namespace=self.namespace, error=repr(err)
                    )
        strip = result.thinking_strip
        if strip is None or result.dry:
            return result
        key = result.branch
        for observer in list(self._observers):
            try:
                observer(strip, key)
            except Exception as err:  # an observer never fails a compile
                log.warning(
                    "strip_observer_failed",
                    namespace=self.namespace,
                    branch=key,
                    compile_id=strip.compile_id,
                    error=repr(err),
                )
        return result
