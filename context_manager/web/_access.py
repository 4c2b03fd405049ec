"""Who may see what in the console: bearer tokens naming principals, and the audience rule.

Invariants: a token is looked up by its SHA-256 digest, never compared as text or logged; the
owner sees every agent and every reply's reasoning; any other principal sees an agent only when
granted it, and a reply's reasoning (durable or live) only when it asked the turn; whatever a
principal may not see answers exactly as a missing agent does (404), so nothing tells the two
apart. Pure functions apart from the ``Access`` table, which is immutable.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from context_manager._model._errors import TokensFileError

OWNER_GRANT = "*"
"""In a tokens file, the agent list ``*`` makes the principal the owner."""

MIN_TOKEN_CHARS = 16
"""Shorter tokens are refused: a token is the only credential a page needs."""


@attrs.frozen
class Principal:
    """Someone holding a token: a name, whether they own the console, and the agents granted."""

    name: str
    owner: bool = False
    agents: frozenset[str] = frozenset()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@attrs.frozen
class Access:
    """The tokens a console accepts (by digest) and the principal each names.

    Build it with ``Access.from_file(path)``, ``Access.parse(text)`` or ``Access.of({token:
    principal})``.
    """

    by_digest: Mapping[str, Principal]

    @classmethod
    def of(cls, tokens: Mapping[str, Principal]) -> Access:
        """From ``{token: principal}`` (tokens kept only as digests)."""
        return cls({_digest(token): principal for token, principal in tokens.items()})

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Access:
        """Read a tokens file (see ``parse``).

        Raises:
            TokensFileError: the file cannot be read, or a line is malformed.
        """
        where = os.fspath(path)
        try:
            text = Path(where).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TokensFileError(where, 0, f"cannot read it ({_unreadable(err)})") from err
        return cls.parse(text, where=where)

    @classmethod
    def parse(cls, text: str, *, where: str = "<tokens>") -> Access:
        """One ``TOKEN PRINCIPAL [AGENT ...]`` per line; ``*`` as the agents: the owner.

        Blank lines and lines starting with ``#`` are skipped. A principal may hold several
        tokens (their grants are the same line's); a token may appear once.

        >>> access = Access.parse("0123456789abcdef alice *\\nfedcba9876543210 bob ada")
        >>> access.principal("fedcba9876543210")
        Principal(name='bob', owner=False, agents=frozenset({'ada'}))

        Raises:
            TokensFileError: a line with fewer than two fields, a short token, a repeated
                token, or ``*`` beside agent names; nothing valid in the whole file.
        """
        table: dict[str, Principal] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            token, principal = _parse_line(line, where, number)
            digest = _digest(token)
            if digest in table:
                raise TokensFileError(where, number, "this token is already given above")
            table[digest] = principal
        if not table:
            raise TokensFileError(where, 0, "no tokens in it (one `TOKEN PRINCIPAL *` line)")
        return cls(table)

    def principal(self, token: str | None) -> Principal | None:
        """The principal ``token`` names, or ``None`` (no token, or not one of these)."""
        if not token:
            return None
        return self.by_digest.get(_digest(token))


def _parse_line(line: str, where: str, number: int) -> tuple[str, Principal]:
    fields = line.split()
    if len(fields) < 2:
        raise TokensFileError(where, number, "expected `TOKEN PRINCIPAL [AGENT ...]`")
    token, name, grants = fields[0], fields[1], fields[2:]
    if len(token) < MIN_TOKEN_CHARS:
        raise TokensFileError(
            where, number, f"the token is shorter than {MIN_TOKEN_CHARS} characters"
        )
    if OWNER_GRANT in grants and len(grants) > 1:
        raise TokensFileError(where, number, "`*` (the owner) stands alone, without agents")
    owner = grants == [OWNER_GRANT]
    return token, Principal(name, owner=owner, agents=frozenset([] if owner else grants))


def sees_agent(principal: Principal, agent: str, known: Iterable[str]) -> bool:
    """Whether ``principal`` may see ``agent``'s transcript (``known``: the agents there are)."""
    if agent not in set(known):
        return False
    return principal.owner or agent in principal.agents


def reads_reasoning(
    principal: Principal, agent: str, known: Iterable[str], asker: str | None
) -> bool:
    """Whether ``principal`` may read the reasoning of a turn ``asker`` asked on ``agent``.

    The owner always; anyone else only their own turns on an agent they may see. A turn with no
    recorded asker is the owner's alone.
    """
    if not sees_agent(principal, agent, known):
        return False
    return principal.owner or (asker is not None and asker == principal.name)


def _unreadable(err: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in a few words (no errno, no repeated path)."""
    if isinstance(err, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if isinstance(err, IsADirectoryError):
        return "it is a directory"
    if isinstance(err, PermissionError):
        return "permission denied"
    return (err.strerror or str(err)).lower()
