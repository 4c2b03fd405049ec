"""The library's loggers: silent unless the application asks (SPEC 17).

Invariants: the library never configures logging and never writes to stdout. While the
application has not configured structlog, every event goes to the standard-library logger of the
same name as a ``LogRecord`` whose message is the event name and whose attributes carry the
event's fields (``record.fields`` holds them all, and each one is also set by name unless it would
overwrite a ``LogRecord`` attribute). With no logging configuration at all (no handler on the
logger or above it), the standard library shows warnings and above on stderr and drops the rest;
the message then carries the fields too (``tool_failed: agent='ada', tool='read_log' (the turn
goes on)``, a ``note`` last in brackets), since nothing else would show them. Once the application
calls ``structlog.configure``, events go through its configuration instead, fields included.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
}
"""``LogRecord`` attribute names a field may not overwrite (``extra`` would raise)."""


class LibraryLogger:
    """A named logger that follows the application's logging setup (see the module docstring)."""

    __slots__ = ("_name", "_stdlib")

    def __init__(self, name: str) -> None:
        self._name = name
        self._stdlib = logging.getLogger(name)

    @property
    def name(self) -> str:
        return self._name

    def _emit(
        self, level: int, method: str, event: str, fields: dict[str, Any], *, trace: bool = False
    ) -> None:
        if structlog.is_configured():
            getattr(structlog.get_logger(self._name), method)(event, **fields)
            return
        if not self._stdlib.isEnabledFor(level):
            return
        extra = {key: value for key, value in fields.items() if key not in _RESERVED}
        extra["fields"] = dict(fields)
        message = event if self._stdlib.hasHandlers() else event_line(event, fields)
        self._stdlib.log(level, message, exc_info=trace, extra=extra)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, "error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error with the exception being handled (call it in an ``except`` block)."""
        self._emit(logging.ERROR, "exception", event, fields, trace=True)


def event_line(event: str, fields: dict[str, Any]) -> str:
    """One line for an event shown with no logging configured: its fields, its ``note`` last.

    >>> event_line("tool_failed", {"tool": "read_log", "note": "the turn goes on"})
    "tool_failed: tool='read_log' (the turn goes on)"
    """
    shown = ", ".join(f"{key}={value!r}" for key, value in fields.items() if key != "note")
    line = f"{event}: {shown}" if shown else event
    note = fields.get("note")
    return f"{line} ({note})" if note is not None else line


def library_logger(name: str) -> LibraryLogger:
    """The library logger called ``name`` (e.g. ``"context_manager.compile"``)."""
    return LibraryLogger(name)
