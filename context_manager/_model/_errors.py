"""Every error this library raises, in one place.

Hierarchy: ``ContextManagerError`` is the base; each error also inherits the builtin it
semantically is, so ``except KeyError`` keeps working for lookups. Messages name the offending
value and say what to do instead::

    ContextManagerError (Exception)
    ├── MessageNotFound (KeyError)
    ├── BranchNotFound (KeyError)
    ├── AgentNotFound (KeyError)           the runtime has no agent of that name
    ├── BranchExists (ValueError)
    ├── BranchInUse (ValueError)
    ├── NotADatabase (ValueError)
    ├── InvalidValue (ValueError)          an argument the library cannot use
    │   └── InvalidBranchName (+TypeError)
    ├── InvalidType (TypeError)            an argument of the wrong type
    │   ├── InvalidContent (+ValueError)   a malformed block or an empty message; nothing written
    │   └── InvalidHead (+ValueError)      a Head component of the wrong shape
    ├── StorePathError (OSError)           a database path that is missing or is a folder
    ├── DamagedDatabase (NotADatabase)     a SQLite file cut short or corrupted
    ├── StoreBusy (TimeoutError)           another connection held SQLite's write lock too long
    ├── StoreRefused (ConnectionError)     the server answered and refused (no retry helps)
    ├── OverBudget (ValueError)
    ├── SchemaTooNew (RuntimeError)
    ├── AgentNotRegistered (RuntimeError)  an agent used before ``Runtime.register``
    ├── TelemetryUnavailable (ImportError) ``tracer_provider=`` without ``opentelemetry-api``
    └── CommandLineError (ValueError)      the command line refuses its input (exit 2)

The simulator's errors (``context_manager.simulator``) have a base of their own: it is the
independent check of this library and shares no code with it.
"""

from __future__ import annotations

from collections.abc import Iterable


class ContextManagerError(Exception):
    """Base class of every error raised by ``context_manager`` and ``notices``."""


class MessageNotFound(ContextManagerError, KeyError):
    """No message with this id in this namespace."""

    def __init__(self, message_id: str, namespace: str) -> None:
        self.message_id = message_id
        self.namespace = namespace
        super().__init__(f"no message {message_id!r} in namespace {namespace!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class BranchNotFound(ContextManagerError, KeyError):
    """No live branch with this name; ``known`` lists the live branch names."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listing = ", ".join(repr(k) for k in self.known) or "none"
        super().__init__(f"no branch {name!r}; known branches: {listing}")

    def __str__(self) -> str:
        return str(self.args[0])


class BranchExists(ContextManagerError, ValueError):
    """A live branch with this name already exists."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"branch {name!r} already exists; pick another name or delete it first")


class BranchInUse(ContextManagerError, ValueError):
    """The current branch cannot be deleted."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"branch {name!r} is the current branch; switch to another branch before deleting it"
        )


class SchemaTooNew(ContextManagerError, RuntimeError):
    """The database was written by a newer version of this library."""

    def __init__(self, path: str, found: int, known: int) -> None:
        self.path = path
        self.found = found
        self.known = known
        super().__init__(
            f"{path}: schema version {found} is newer than this library knows ({known}); "
            "upgrade context-manager to open it"
        )


class NotADatabase(ContextManagerError, ValueError):
    """The file exists but is not a context-manager database."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"{path}: not a context-manager database ({why})")


class OverBudget(ContextManagerError, ValueError):
    """The budget is smaller than what must be sent (the newest user message)."""

    def __init__(self, budget: int, required: int) -> None:
        self.budget = budget
        self.required = required
        super().__init__(
            f"budget of {budget} tokens is smaller than the {required} tokens that must be sent "
            "(the newest user message); raise the budget"
        )


class InFlightThinkingInvalid(ContextManagerError, ValueError):
    """The open tool round's assistant message carries thinking the rules say now fails.

    That message may not be altered (provider rule 6: a 400), and with
    ``ThinkingBinding(drop_block=False)`` the provider would refuse it too.
    """

    def __init__(
        self,
        message_id: str,
        blocks: tuple[int, ...],
        cause: str = "a head or model change mid-round",
    ) -> None:
        self.message_id = message_id
        self.blocks = blocks
        self.cause = cause
        super().__init__(
            f"the open tool round's reply {message_id} carries thinking blocks {list(blocks)} "
            f"that no longer verify ({cause}), and it may not be altered; "
            "close the round under the head it started with, or use "
            "ThinkingBinding(drop_block=True) so the provider drops them"
        )


class AgentNotFound(ContextManagerError, KeyError):
    """No registered agent of this name; ``known`` lists the registered ones."""

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = sorted(known)
        listing = ", ".join(repr(k) for k in self.known) or "none"
        super().__init__(f"no agent {name!r}; registered: {listing}")

    def __str__(self) -> str:
        return str(self.args[0])


class AgentNotRegistered(ContextManagerError, RuntimeError):
    """The agent was used before ``Runtime.register`` (or after it was removed)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"agent {name!r} is not registered; call runtime.register()")


class CommandLineError(ContextManagerError, ValueError):
    """The command line cannot use its input (a path, a name); the message says why."""


class InvalidValue(ContextManagerError, ValueError):
    """An argument the library cannot use; the message names it and says what to give."""


class InvalidType(ContextManagerError, TypeError):
    """An argument of the wrong type; the message names it and says what to give."""


class InvalidBranchName(InvalidValue, TypeError):
    """A branch name that is not a non-empty string (the same check on every store)."""

    def __init__(self, name: object) -> None:
        self.name = name
        super().__init__(f"a branch name must be a non-empty string, got {name!r}")


class InvalidContent(InvalidType, ValueError):
    """Content the API would refuse: a malformed block, or a message with nothing to send.

    Raised before anything is written. ``where`` names the message (``"user message"``,
    ``"reply"``), ``block`` the offending block's index (``None``: the message as a whole).
    """

    def __init__(self, where: str, block: int | None, why: str) -> None:
        self.where = where
        self.block = block
        place = where if block is None else f"{where}, block {block}"
        super().__init__(f"{place}: {why}; nothing was stored")


class InvalidHead(InvalidType, ValueError):
    """A ``Head`` component of the wrong shape, refused when the head is made."""

    def __init__(self, component: str, value: object, expected: str) -> None:
        self.component = component
        self.value = value
        super().__init__(
            f"Head component {component!r} ({value!r:.120}) is not valid: give {expected}"
        )


class StorePathError(ContextManagerError, OSError):
    """A database path that cannot hold a database: its folder is missing, or it is a folder."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        super().__init__(f"{path}: {why}")

    def __str__(self) -> str:
        return str(self.args[0])


class DamagedDatabase(NotADatabase):
    """A SQLite file that is cut short (truncated) or corrupted: restore it from a backup."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        ValueError.__init__(self, f"{path}: the database file is damaged ({why})")


class StoreBusy(ContextManagerError, TimeoutError):
    """Another connection or process held the SQLite file's write lock past the busy timeout.

    Nothing of the call was written; the store stays usable.
    """

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        super().__init__(
            f"{path}: another connection or process held the database's write lock for longer "
            f"than the {timeout:g} s busy timeout; nothing of this call was written. Retry once "
            "it is done, or give SQLiteStore(path, busy_timeout=...) more seconds"
        )


class StoreRefused(ContextManagerError, ConnectionError):
    """The database server answered and refused (no such database, a failed login) or the
    connection string cannot be read: retrying will not help, the configuration must change."""

    def __init__(self, where: str, why: str) -> None:
        self.where = where
        super().__init__(f"{where}: {why}; nothing was written, fix the connection settings")


class AgentBusy(ContextManagerError, TimeoutError):
    """Another connection, process or host held the agent past the timeout.

    ``holder`` describes it: for a write or batch on PostgreSQL as the server reports it (pid,
    application name, client address, how long its transaction has been open); for a hold
    (``Store.hold``, taken by the runtime for each turn) its ``LABEL@HOST:PID`` and how long it
    has held. ``setting`` names the timeout to raise: ``lock_timeout`` or ``hold_timeout``.
    """

    def __init__(
        self, namespace: str, holder: str, timeout: float, *, setting: str = "lock_timeout"
    ) -> None:
        self.namespace = namespace
        self.holder = holder
        self.timeout = timeout
        self.setting = setting
        super().__init__(
            f"agent {namespace!r} is held by {holder} for longer than the {timeout:g} s "
            f"{setting.replace('_', ' ')}; wait for that host's turn or round to finish, stop "
            f"it, or raise {setting}"
        )


class StoreUnavailable(ContextManagerError, ConnectionError):
    """The store's database server could not be reached, or dropped the connection mid-call.

    Nothing of the failed call is committed. The store stays usable: the next call opens a fresh
    connection once the server is back.
    """

    def __init__(self, where: str, why: str) -> None:
        self.where = where
        super().__init__(
            f"{where}: the database server is unavailable ({why}); nothing of this call was "
            "written, retry once the server is back"
        )


class TelemetryUnavailable(ContextManagerError, ImportError):
    """Tracing was asked for (``tracer_provider=``) but ``opentelemetry-api`` is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "tracer_provider= needs the OpenTelemetry API: install thinking-context-manager[otel] "
            "(and an SDK of your choice, e.g. opentelemetry-sdk), or leave tracer_provider unset"
        )


class TokensFileError(ContextManagerError, ValueError):
    """The console's tokens file cannot be used; the message names the file, the line (``0``:
    the whole file, and the message names no line) and why."""

    def __init__(self, where: str, line: int, why: str) -> None:
        self.where = where
        self.line = line
        super().__init__(f"{where}, line {line}: {why}" if line else f"{where}: {why}")


class CompactionNotSupported(ContextManagerError, NotImplementedError):
    """A compaction this library cannot make (kept for callers that catch it; the library
    itself no longer raises it: background compaction is built, issue 29)."""
