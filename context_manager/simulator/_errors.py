"""The simulator's errors: each one is an API error answer (status, error type, message).

Invariant: every refusal the simulator makes is one of these, so the HTTP layer always answers in
the API's error shape ``{"type": "error", "error": {"type": ..., "message": ...}}``, never a crash.
"""

from __future__ import annotations

from typing import Any

# The public package, never a private module: the simulator shares no code with the library it
# checks, only the base class every project error derives from (no import cycle: the package
# itself never imports the simulator).
from context_manager import ContextManagerError


class SimulatedApiError(ContextManagerError):
    """An error answer of the simulated Messages API.

    Attributes:
        status: the HTTP status code.
        error_type: the API's ``error.type`` (``invalid_request_error``, ``overloaded_error``, ...).
        message: the API's ``error.message``.
    """

    def __init__(
        self, status: int, error_type: str, message: str, *, error_code: str | None = None
    ) -> None:
        self.status = status
        self.error_type = error_type
        self.message = message
        self.error_code = error_code
        super().__init__(f"{status} {error_type}: {message}")

    def body(self) -> dict[str, Any]:
        """The API's error body for this error (``error.details.error_code`` when it has one)."""
        error: dict[str, Any] = {"type": self.error_type, "message": self.message}
        if self.error_code is not None:
            error["details"] = {"error_code": self.error_code}
        return {"type": "error", "error": error}


class InvalidRequest(SimulatedApiError, ValueError):
    """The request is one the real API refuses with a 400 ``invalid_request_error``.

    The message names the offending place (``messages.1.content.0: ...``) as the API does;
    ``error_code`` (``compaction_block_misplaced``, ...) is ``error.details.error_code``.
    """

    def __init__(self, message: str, *, error_code: str | None = None) -> None:
        super().__init__(400, "invalid_request_error", message, error_code=error_code)


class NotFound(SimulatedApiError, LookupError):
    """The path is not an endpoint the simulator serves (``POST /v1/messages`` and
    ``POST /v1/messages/count_tokens``)."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(
            404,
            "not_found_error",
            f"{method} {path} is not served; use POST /v1/messages or /v1/messages/count_tokens",
        )


class ScriptFailed(SimulatedApiError, RuntimeError):
    """The user's script raised or returned something that is not reply content (a 500)."""

    def __init__(self, why: str) -> None:
        super().__init__(500, "api_error", f"simulator script failed: {why}")
