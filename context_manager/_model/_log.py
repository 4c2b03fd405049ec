"""The library's loggers: silent unless the application asks (SPEC 17).

Invariants: the library never configures logging and never writes to stdout. While the
application has not configured structlog, every event goes to the standard-library logger of the
same name as a ``LogRecord`` whose message is the event name and whose attributes carry the
event's fields (``record.fields`` holds them all, and each one is also set by name unless it would
overwrite a ``LogRecord`` attribute). With no logging configuration at all, the standard library
shows warnings and above on stderr and drops the rest. Once the application calls
``structlog.configure``, events go through its configuration instead, fields included.
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

    def _emit(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        if structlog.is_configured():
            getattr(structlog.get_logger(self._name), method)(event, **fields)
            return
        if not self._stdlib.isEnabledFor(level):
            return
        extra = {key: value for key, value in fields.items() if key not in _RESERVED}
        extra["fields"] = dict(fields)
        self._stdlib.log(level, event, extra=extra)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, "error", event, fields)


def library_logger(name: str) -> LibraryLogger:
    """The library logger called ``name`` (e.g. ``"context_manager.compile"``)."""
    return LibraryLogger(name)
