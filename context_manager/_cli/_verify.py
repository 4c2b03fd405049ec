"""The ``verify`` command: replay a stored branch through the current compiler against the API.

A ``postgresql://`` URI is copied to a throwaway schema on the same database (``_verify_pg``).
Following the provider's recipe for checking an integration: for each stored reply with
thinking, the first request after it (the branch cut where the next reply was asked for) is
compiled again and sent with ``prefix_mismatch_behavior: "error"``, so a block the compiler
kept but the provider's prefix check fails is a 400 naming it. Invariants: nothing is written to
the user's database (the SQLite file and its sidecar are copied with the backup API, the copy is
worked on and removed); each cut is a throwaway branch of the copy (``branch_at``) compiled dry.
The real API when ``ANTHROPIC_API_KEY`` is set, the simulator otherwise (with its default
signing key: the key ``run`` and ``demo`` sign with). Exit code 1 on any refusal or drop the
compiler did not predict.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import anthropic
import attrs

from context_manager._compile._stage_finish import BINDING_BETA
from context_manager._manager import ContextManager
from context_manager._model._content import is_thinking
from context_manager._model._head import Head
from context_manager._model._messages import HEAD_CHANGE_KIND, StoredMessage
from context_manager._model._results import CompileResult
from context_manager._reasoning._capture import ReasoningCapture
from context_manager._reasoning._store import ReasoningStore
from context_manager._store._protocol import Store
from context_manager._store._sqlite import SQLiteStore
from context_manager.simulator import Simulator

from ._db import CliError, _read_only, is_postgres, open_sidecar, sidecar_path
from ._run import API_KEY_VARIABLE, DEFAULT_MODEL, SETTINGS
from ._verify_pg import postgres_copy

PROBE_TEXT = "(verify: the next turn)"
"""The user message a cut that ends with a reply gets on its throwaway branch."""
EXIT_MISPREDICTED = 1
ANCHORED_QUERY = "SELECT head FROM anchored_heads WHERE ns = ? ORDER BY at_seq DESC"
"""Every anchored head an agent's branches recorded, newest first (SQLite placeholders)."""
PATH = re.compile(r"messages\.\d+\.content\.\d+")
"""A block's path in a refusal's message."""


@attrs.frozen
class Outcome:
    """One stored reply: how many of its thinking blocks the compiler sent, and what the
    provider said (``refused``/``dropped``: paths the compiler did not predict)."""

    reply: StoredMessage
    sent: int
    blocks: int
    refused: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    error: str = ""
    skipped: bool = False
    """Not replayed: the head the reply was made under is not recoverable from the store (its
    stamp's ``system`` / ``tools`` digests match no head the store records), or ``why``."""
    why: str = "the head it was made under is not in the store"
    counted_as: str = "made under a head not in the store"
    """How the summary counts it when skipped."""
    put_back: int = 0
    """Of the blocks not counted as sent, those that went out only as the open tool round's
    reply, as recorded (provider rule 6), predicted to be dropped (``CompileResult.put_back``)."""

    @property
    def held(self) -> bool:
        return not self.refused and not self.dropped and not self.error

    def line(self) -> str:
        if self.skipped:
            return f"{self.reply.id}: skipped, {self.why}"
        lost = self.blocks - self.sent - self.put_back
        said = f"{self.sent} of {self.blocks} thinking blocks sent"
        if lost:
            said += f" ({lost} left out by the compiler, predicted)"
        if self.put_back:
            said += (
                f" ({self.put_back} only in the open round's reply as recorded, predicted dropped)"
            )
        if self.refused:
            return f"{self.reply.id}: REFUSED at {', '.join(self.refused)}: {self.error}"
        if self.dropped:
            return f"{self.reply.id}: DROPPED at {', '.join(self.dropped)} (not predicted)"
        if self.error:
            return f"{self.reply.id}: ERROR {self.error}"
        return f"{self.reply.id}: held, {said}"


def add_verify(commands: Any, common: argparse.ArgumentParser, handler: Any) -> None:
    """Register ``verify`` on the ``context-manager`` parser."""
    texts = {
        "help": "replay a stored branch against the API and check each reply's thinking held",
        "description": "Replay the stored branch through the current compiler: the first "
        "request after each stored reply is sent with prefix_mismatch_behavior 'error' (the "
        f"real API when {API_KEY_VARIABLE} is set, the local simulator otherwise). Nothing is "
        "written to the database (a copy is used).",
        "epilog": "Exit codes: 0 every reply's thinking held or was left out as predicted (a "
        "skipped reply, not replayed, is counted but changes nothing), 1 a refusal or drop the "
        "compiler did not predict, 2 bad input.",
    }
    verify = commands.add_parser("verify", parents=[common], **texts)
    verify.add_argument("path", metavar="PATH|URI", help="the SQLite file, or a postgresql:// URI")
    verify.add_argument("--agent", metavar="NAME", required=True, help="the agent's name")
    verify.add_argument("--branch", metavar="B", help="the branch (default: the current one)")
    verify.add_argument("--model", metavar="M", help="the model (default: each reply's own)")
    verify.add_argument(
        "--dry-run", action="store_true", help="only print the requests that would be sent"
    )
    verify.set_defaults(handler=handler)


def verify_branch(args: argparse.Namespace, out: TextIO) -> int:
    """The ``verify`` command; returns the exit code."""
    if is_postgres(args.path):
        with postgres_copy(args.path) as (copied, reader):
            rows = reader.execute(ANCHORED_QUERY.replace("?", "%s"), (args.agent,)).fetchall()
            return _verify_on(copied, None, args, out, [str(row[0]) for row in rows])
    if not Path(args.path).is_file():
        raise CliError(f"no such database: {args.path}")
    with _copy(Path(args.path)) as (db, side):
        store = SQLiteStore(db)
        sidecar = open_sidecar(side, create=False) if side is not None else None
        try:
            return _verify_on(store, sidecar, args, out, _anchored_heads(db, args.agent))
        finally:
            if sidecar is not None:
                sidecar.close()
            store.close()


def _verify_on(
    store: Store,
    sidecar: ReasoningStore | None,
    args: argparse.Namespace,
    out: TextIO,
    anchored: list[str],
) -> int:
    """Replay the agent's branch on ``store`` (a copy: it is written to)."""
    if args.agent not in store.namespaces():
        raise CliError(f"no agent {args.agent!r} in {args.path}")
    reasoning = ReasoningCapture(sidecar) if sidecar is not None else None
    cm = ContextManager.open(store, namespace=args.agent, reasoning=reasoning)
    if args.branch:
        cm.switch_branch(args.branch)
    return _replay(cm, args, out, anchored)


def _replay(cm: ContextManager, args: argparse.Namespace, out: TextIO, anchored: list[str]) -> int:
    branch = cm.current_branch().name
    stored = cm.messages()
    client = None if args.dry_run else _client()
    outcomes: list[Outcome] = []
    for n, (reply, cut) in enumerate(_cuts(stored)):
        cm.switch_branch(branch)
        cm.branch_at(cut.id, f"verify-{n}")
        cm.switch_branch(f"verify-{n}")
        if cut.role == "assistant":
            cm.add_message("user", PROBE_TEXT)
        head = _head_at(cm, _candidates(cm, stored, cut, anchored), reply, args)
        if head is None:
            outcomes.append(Outcome(reply, 0, 0, skipped=True))
            print(outcomes[-1].line(), file=out)
            continue
        result = cm.compile(head, dry_run=True)
        request = _enforced(result.request, bool(result.put_back))
        if client is not None and _foreign_compaction(request):
            outcomes.append(
                Outcome(
                    reply,
                    0,
                    0,
                    skipped=True,
                    why=FOREIGN_COMPACTION,
                    counted_as="carrying a server compaction only the API can judge",
                )
            )
            print(outcomes[-1].line(), file=out)
            continue
        if client is None:
            print(json.dumps({"reply": reply.id, "request": request}, default=str), file=out)
            continue
        outcome = _send(client, request, result, reply)
        outcomes.append(outcome)
        print(outcome.line(), file=out)
    failed = [o for o in outcomes if not o.held]
    if client is not None:
        print(summary(outcomes), file=out)
    return EXIT_MISPREDICTED if failed else 0


def summary(outcomes: list[Outcome]) -> str:
    """The closing line: replies held of every reply with thinking, and the skipped ones (not
    replayed, so neither held nor failed) by why."""
    held = sum(1 for o in outcomes if o.held and not o.skipped)
    said = f"{held} of {len(outcomes)} replies held"
    skipped = Counter(o.counted_as for o in outcomes if o.skipped)
    if skipped:
        why = ", ".join(f"{n} {reason}" for reason, n in skipped.items())
        said += f", {skipped.total()} skipped (not replayed: {why})"
    return f"{said}."


def _cuts(stored: list[StoredMessage]) -> Iterator[tuple[StoredMessage, StoredMessage]]:
    """Each reply with thinking, and the last message before the next reply (the cut)."""
    for i, message in enumerate(stored):
        if message.role != "assistant" or not any(is_thinking(b) for b in message.content):
            continue
        cut = message
        for later in stored[i + 1 :]:
            if later.role == "assistant":
                break
            cut = later
        yield message, cut


def _head_at(
    cm: ContextManager,
    candidates: list[tuple[Any, list[dict[str, Any]]]],
    reply: StoredMessage,
    args: argparse.Namespace,
) -> Head | None:
    """The head ``reply`` was made under, when the store records it: the first candidate whose
    ``system`` and ``tools`` digests are the stamp's; the model given, else the reply's own.
    ``None``: none matches."""
    stamp = cm.store.stamps(cm.namespace, [reply.id]).get(reply.id)
    model = args.model or (stamp.model if stamp is not None else None) or DEFAULT_MODEL
    made = stamp.head if stamp is not None else None
    for system, tools in candidates:
        head = Head(model=model, system=system, tools=tools, settings=SETTINGS)
        if made is None or all(made.get(c) == head.digests[c] for c in ("system", "tools")):
            return head
    return None


def _candidates(
    cm: ContextManager, stored: list[StoredMessage], cut: StoredMessage, anchored: list[str]
) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Heads to try, likeliest first: each ``head-change`` message's head at or before the cut
    (newest first), the agent's anchored heads (``anchored``, as JSON), ``run``'s default."""
    found: list[tuple[Any, list[dict[str, Any]]]] = []
    for message in reversed(stored):
        sent = message.metadata.extra.get("sent")
        if message.sequence > cut.sequence or message.metadata.kind != HEAD_CHANGE_KIND:
            continue
        if isinstance(sent, Mapping):
            known = sent.get("known", {})
            active = sent.get("active", ())
            found.append((sent.get("system"), [dict(known[n]) for n in active if n in known]))
    for text in anchored:
        head = json.loads(text)
        found.append((head.get("system"), list(head.get("tools", ()))))
    found.append((f"You are {cm.namespace}, a resident agent.", []))
    return found


def _anchored_heads(db: Path, agent: str) -> list[str]:
    """Every anchored head the agent's branches recorded (the copy's table), newest first."""
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute(ANCHORED_QUERY, (agent,)).fetchall()
    except sqlite3.Error:
        rows = []
    finally:
        connection.close()
    return [str(row[0]) for row in rows]


def _enforced(request: dict[str, Any], put_back: bool = False) -> dict[str, Any]:
    """``request`` asking the provider to refuse any block its prefix check fails; with
    ``put_back`` (the open round's reply goes out as recorded with thinking the compiler
    predicts fails, ``CompileResult.put_back``), to drop each instead and say where, so the
    request is still judged block by block."""
    thinking = dict(request.get("thinking") or {})
    behavior = "drop_block" if put_back else "error"
    thinking["block_binding"] = {"prefix_mismatch_behavior": behavior}
    betas = list(request.get("betas", ()))
    if BINDING_BETA not in betas:
        betas.append(BINDING_BETA)
    return {**request, "thinking": thinking, "betas": betas}


def _send(
    client: anthropic.Anthropic,
    request: dict[str, Any],
    result: CompileResult,
    reply: StoredMessage,
) -> Outcome:
    blocks = sum(1 for b in reply.content if is_thinking(b))
    sent = sum(
        len(source.signatures)
        for entry in result.provenance
        for source in entry.sources
        if source.message_id == reply.id
    )
    put_back = _put_back_of(result, reply)
    sent -= put_back  # sent as recorded, predicted to be dropped
    try:
        message = client.beta.messages.create(**request)
    except anthropic.BadRequestError as err:
        text = str(err)
        paths = tuple(dict.fromkeys(PATH.findall(text)))
        return Outcome(
            reply, sent, blocks, refused=paths or ("?",), error=text[:300], put_back=put_back
        )
    except anthropic.APIError as err:
        return Outcome(reply, sent, blocks, error=str(err)[:300], put_back=put_back)
    expected = set(result.unreadable) | set(result.put_back)
    dropped = tuple(
        t.path
        for t in message.input_transformations or []
        if t.type == "thinking_dropped" and t.path not in expected
    )
    return Outcome(reply, sent, blocks, dropped=dropped, put_back=put_back)


def _put_back_of(result: CompileResult, reply: StoredMessage) -> int:
    """How many of ``reply``'s thinking blocks the request carries only as the open round's
    reply sent as recorded (``CompileResult.put_back``)."""
    if not result.put_back:
        return 0
    index = int(result.put_back[0].split(".")[1])
    source = result.provenance[index].single_source
    return len(result.put_back) if source is not None and source.message_id == reply.id else 0


FOREIGN_COMPACTION = (
    "its request carries a server compaction, which the simulator judges only in the process "
    "that made it (it keeps what a compaction covered in memory); verify it against the API"
)


def _foreign_compaction(request: dict[str, Any]) -> bool:
    """Whether ``request`` carries a compaction block and is answered by a fresh simulator."""
    if os.environ.get(API_KEY_VARIABLE):
        return False
    return any(
        isinstance(block, dict) and block.get("type") == "compaction"
        for message in request.get("messages", ())
        if isinstance(message.get("content"), list)
        for block in message["content"]
    )


def _client() -> anthropic.Anthropic:
    if os.environ.get(API_KEY_VARIABLE):
        return anthropic.Anthropic()
    return Simulator().sync_client()


@contextlib.contextmanager
def _copy(path: Path) -> Iterator[tuple[Path, Path | None]]:
    """A copy of the database (and its sidecar, when there is one), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="cm-verify-") as folder:
        db = Path(folder) / "copy.db"
        _backup(path, db)
        side = sidecar_path(path)
        copied = sidecar_path(db) if side.is_file() else None
        if copied is not None:
            _backup(side, copied)
        yield db, copied


def _backup(source: Path, target: Path) -> None:
    try:
        src = _read_only(source)
    except sqlite3.Error as err:
        raise CliError(f"cannot read {source}: {err}") from err
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    except sqlite3.Error as err:
        raise CliError(f"cannot read {source}: {err}") from err
    finally:
        dst.close()
        src.close()
