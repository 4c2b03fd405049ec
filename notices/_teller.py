"""The teller: turns a compile's strip and a call's drops into one ``[reasoning]`` line, or none.

State per agent and branch key, bounded by ``cap``. Never raises out of a report: a failure is
logged and tells nothing. A line counts as told once returned (see ``line_not_stored``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from context_manager import MessageId, PlacedDrops, StoredMessage, ThinkingStrip, library_logger

from ._incidents import ThinkingLossIncidents
from ._line import name_reply, reasoning_loss_line
from ._told import DEFAULT_CAP, ToldSets
from ._turn import TurnState

log = library_logger("notices")

ReadMessage = Callable[[str, MessageId], StoredMessage]
"""``read_message(agent, message_id)``: the stored reply, read through that agent's store.
Raises ``KeyError`` (``MessageNotFound``) for a reply the store does not have."""

NOT_MADE_EVENT = "[reasoning] line not made: the store failed reading a reply"
NOT_STORED_EVENT = "[reasoning] line not stored: it still counts as told"
FAILED_EVENT = "[reasoning] teller failed: nothing told"

NAME_SCAN_LIMIT = 64
"""Replies read, newest first, to find one a head-form line can name: a line is made at
compile time, so its cost must not grow with the history a head change strips."""

MAX_LOGGED_ERROR = 200
"""Characters of an exception's repr kept in a log event."""

_IDLE = TurnState.idle()


class _ReadFailed(Exception):
    """The store raised (other than not-found) while reading ``message_id``."""

    def __init__(self, message_id: MessageId, error: Exception) -> None:
        super().__init__(message_id)
        self.message_id = message_id
        self.error = error


class _Reader:
    """Reads the replies one line needs, each at most once; a missing reply reads as ``None``."""

    def __init__(self, read: ReadMessage, agent: str) -> None:
        self._read = read
        self._agent = agent
        self._cache: dict[MessageId, StoredMessage | None] = {}

    def get(self, message_id: MessageId) -> StoredMessage | None:
        if message_id in self._cache:
            return self._cache[message_id]
        try:
            message: StoredMessage | None = self._read(self._agent, message_id)
        except KeyError:
            message = None
        except Exception as err:
            raise _ReadFailed(message_id, err) from err
        self._cache[message_id] = message
        return message

    def this_turns(
        self, replies: Sequence[MessageId], turn: TurnState, *, oldest_first: bool
    ) -> set[MessageId]:
        """The replies that are ``turn``'s; with ``oldest_first``, stops below its head."""
        mine: set[MessageId] = set()
        if not turn.live:
            return mine
        for reply in reversed(replies):
            message = self.get(reply)
            if message is None:
                continue
            if turn.owns(message):
                mine.add(reply)
            elif oldest_first and message.sequence <= turn.head_sequence:
                break
        return mine

    def newest_named(self, replies: Sequence[MessageId]) -> StoredMessage | None:
        """The newest reply the store can read, when a line can name it.

        Never an older one: "up to" an older reply would leave the newest out of the line. A
        newest reply with neither text nor a tool call gives the unnamed wording (``None``).
        """
        for reply in list(reversed(replies))[:NAME_SCAN_LIMIT]:
            message = self.get(reply)
            if message is not None:
                return message if name_reply(message) is not None else None
        return None


class ReasoningLossTeller:
    """Decides what an agent is told about lost reasoning, and words it (SPEC 9).

    Args:
        read_message: ``(agent, message_id) -> StoredMessage`` through the agent's store.
        cap: most told entries kept per agent and branch (oldest first out).
        incidents: the drop incidents to share (e.g. with an operators' view); a new one
            when ``None``. The teller observes each call's drops on it exactly once.

    Raises:
        ValueError: ``cap`` is not a positive int.

    Strips are told by cause. ``head`` and ``first``: when the strip takes a reply not yet
    told on that branch. ``messages``: only when it takes a reply of the current turn, counting
    the replies not yet told (none: silent). A strip's replies then leave the told set (the
    context manager never reports them again on that branch). Drops are told by incident
    (``ThinkingLossIncidents``); a drop line's replies and rounds join the told set.

    Not thread-safe; one teller serves one event loop.
    """

    def __init__(
        self,
        read_message: ReadMessage,
        *,
        cap: int = DEFAULT_CAP,
        incidents: ThinkingLossIncidents | None = None,
    ) -> None:
        self._read = read_message
        self._told = ToldSets(cap)
        self.incidents = incidents if incidents is not None else ThinkingLossIncidents()

    @property
    def cap(self) -> int:
        """Most told entries kept per agent and branch."""
        return self._told.cap

    def for_strip(
        self, agent: str, branch_key: str, strip: ThinkingStrip, turn: TurnState | None
    ) -> str | None:
        """The line for one committing compile's strip, or ``None`` when nothing is told.

        Args:
            agent: the agent's name.
            branch_key: the key of the branch the compile read (the observer's key).
            strip: ``CompileResult.thinking_strip``; never a dry compile's.
            turn: the agent's turn (``None``: no live turn).

        Returns:
            The line to store as the agent's notice (it counts as told now), or ``None``:
            nothing to tell, or the line could not be made (logged; the replies stay untold).
            Never raises.
        """
        try:
            return self._for_strip(agent, branch_key, strip, turn or _IDLE)
        except _ReadFailed as failed:
            self._not_made(agent, branch_key, "strip", failed)
        except Exception as err:
            self._failed(agent, branch_key, "strip", err)
        return None

    def for_drops(
        self, agent: str, branch_key: str, placed: PlacedDrops, turn: TurnState | None
    ) -> str | None:
        """The line for one call's placed drops, or ``None`` when its incident tells nothing.

        Call it once for every model call, drops or not (a call without placed drops closes
        the incident). It also raises the operators' alert through ``incidents``.

        Args:
            agent: the agent's name.
            branch_key: the key of the branch the call's compile read.
            placed: from ``place_thinking_drops`` (or ``ContextManager.place_drops``).
            turn: the agent's turn (``None``: no live turn); dropped rounds are this turn's.

        Returns:
            The line (it counts as told now), or ``None``: the incident did not open or grow,
            none of the drops could be placed, or the line could not be made (logged; the
            incident does not count it, so the next call with as many drops tells it).
            Never raises.
        """
        try:
            return self._for_drops(agent, branch_key, placed, turn or _IDLE)
        except _ReadFailed as failed:
            self._not_made(agent, branch_key, "drops", failed)
        except Exception as err:
            self._failed(agent, branch_key, "drops", err)
        return None

    def note_round_stored(
        self, agent: str, branch_key: str, round: int, message_id: MessageId
    ) -> None:
        """A stream round is now stored as ``message_id``.

        If a drop line told that round, the stored reply joins the told set, so a later strip
        that takes it does not tell it again. Call it for each appended round as it is stored.
        Never raises.
        """
        try:
            if self._told.take_round(agent, branch_key, round):
                self._told.add(agent, branch_key, (message_id,))
        except Exception as err:
            self._failed(agent, branch_key, "round", err)

    def line_not_stored(
        self, agent: str, branch_key: str, error: BaseException | None = None
    ) -> None:
        """Report that a line this teller returned could not be stored.

        It is logged (the event names ``[reasoning]``) and still counts as told: the loss was
        counted when the line was returned, so it is not told again unless it is reported again
        (a strip's replies are not; a drop's are when its incident grows or re-opens).
        """
        log.warning(
            NOT_STORED_EVENT,
            agent=agent,
            branch=branch_key,
            error=_describe(error) if error is not None else None,
        )

    def restored(self, agent: str, branch_key: str, replies: Sequence[MessageId]) -> None:
        """Forget ``replies`` on a branch: their withheld thinking is sent again
        (``CompileResult.restored``), so losing it again later is told again (SPEC 9)."""
        self._told.discard(agent, branch_key, replies)

    def forget(self, agent: str, branch_key: str | None = None) -> None:
        """Drop an agent's told state and open incident, or only one branch's.

        Call it when a branch is deleted, an agent removed, or a run or fork ends.
        """
        self._told.forget(agent, branch_key)
        self.incidents.forget(agent, branch_key)

    def told_count(self, agent: str | None = None, branch_key: str | None = None) -> int:
        """Told entries held (reply ids and rounds awaiting their id), to check the bound."""
        return self._told.count(agent, branch_key)

    def _check(self) -> None:
        """Assert the structural invariants (tests call it after each mutation)."""
        self._told._check()
        self.incidents._check()

    # rules
    def _for_strip(
        self, agent: str, branch_key: str, strip: ThinkingStrip, turn: TurnState
    ) -> str | None:
        replies = tuple(strip.replies)
        line: str | None = None
        if strip.cause in ("head", "first"):
            line = self._head_or_first_line(agent, branch_key, strip, replies, turn)
        elif strip.cause == "messages":
            if turn.live:
                line = self._fold_line(agent, branch_key, replies, turn)
        else:
            log.debug("strip_cause_unknown", agent=agent, branch=branch_key, cause=strip.cause)
        self._told.discard(agent, branch_key, replies)
        return line

    def _head_or_first_line(
        self,
        agent: str,
        branch_key: str,
        strip: ThinkingStrip,
        replies: tuple[MessageId, ...],
        turn: TurnState,
    ) -> str | None:
        untold = self._told.untold(agent, branch_key, replies)
        if not untold:
            return None
        reader = _Reader(self._read, agent)
        mine = reader.this_turns(replies, turn, oldest_first=True)
        if strip.cause == "first":
            return self._count_line(agent, reader, untold, mine)
        return reasoning_loss_line(
            agent,
            "head",
            reply=reader.newest_named(replies),
            this_turn=bool(mine),
            changed=strip.changed,
        )

    def _fold_line(
        self, agent: str, branch_key: str, replies: tuple[MessageId, ...], turn: TurnState
    ) -> str | None:
        untold = self._told.untold(agent, branch_key, replies)
        if not untold:
            return None
        reader = _Reader(self._read, agent)
        mine = reader.this_turns(replies, turn, oldest_first=True)
        if not mine:
            return None
        return self._count_line(agent, reader, untold, mine)

    def _for_drops(
        self, agent: str, branch_key: str, placed: PlacedDrops, turn: TurnState
    ) -> str | None:
        step = self.incidents.observe(agent, branch_key, placed)
        if not step.tell:
            return None
        try:
            line = self._drop_line(agent, placed, turn)
        except BaseException:
            self.incidents.retract(agent, branch_key, step)
            raise
        self._told.add(agent, branch_key, (*placed.reply_ids, *placed.round_indexes))
        return line

    def _drop_line(self, agent: str, placed: PlacedDrops, turn: TurnState) -> str:
        if placed.unplaced_count:
            return reasoning_loss_line(agent, "at_least", count=placed.reply_count)
        ids = placed.reply_ids
        reader = _Reader(self._read, agent)
        if not ids:
            first = placed.rounds[0].content
            return reasoning_loss_line(
                agent, "count", reply=first, count=placed.reply_count, this_turn=True
            )
        this_turn = bool(placed.rounds) or bool(reader.this_turns(ids, turn, oldest_first=False))
        return reasoning_loss_line(
            agent, "count", reply=reader.get(ids[0]), count=placed.reply_count, this_turn=this_turn
        )

    @staticmethod
    def _count_line(
        agent: str, reader: _Reader, counted: Sequence[MessageId], mine: set[MessageId]
    ) -> str:
        return reasoning_loss_line(
            agent,
            "count",
            reply=reader.get(counted[0]),
            count=len(counted),
            this_turn=any(reply in mine for reply in counted),
        )

    # failures
    def _not_made(self, agent: str, branch_key: str, what: str, failed: _ReadFailed) -> None:
        log.warning(
            NOT_MADE_EVENT,
            agent=agent,
            branch=branch_key,
            source=what,
            message_id=failed.message_id,
            error=_describe(failed.error),
        )

    def _failed(self, agent: str, branch_key: str, what: str, err: Exception) -> None:
        log.error(FAILED_EVENT, agent=agent, branch=branch_key, source=what, error=_describe(err))


def _describe(error: BaseException) -> str:
    return repr(error)[:MAX_LOGGED_ERROR]
