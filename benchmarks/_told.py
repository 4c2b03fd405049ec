"""Told state of one long-lived agent after many teller events: it must stay within the cap.

A seeded stream of what a resident agent's teller hears over months: calls without drops, calls
whose drops hit new replies (each opening or growing an incident, so told), head strips, and
dropped stream rounds stored later. Measures the entries held and the process's peak memory.
"""

from __future__ import annotations

import datetime as dt
import random
import resource
import sys
import time
from collections import deque

import attrs

from context_manager import (
    MessageId,
    MessageMeta,
    PlacedDrops,
    ReplyDrop,
    RoundDrop,
    StoredMessage,
    TextBlock,
    ThinkingStrip,
)
from notices import DEFAULT_CAP, ReasoningLossTeller

AGENT = "ada"
BRANCH = "b1@1"
PREFIX = "prefix_binding_mismatch"

CHECKPOINTS = (0.1, 0.5, 1.0)
"""Fractions of the run at which entries and peak memory are sampled (growth must stop)."""

DROP_SHARE = 0.45
CLEAN_SHARE = 0.45
STRIP_SHARE = 0.07
"""Event mix: calls dropping placed blocks, calls dropping nothing, head strips; the rest are
dropped stream rounds (told, then stored under an id)."""

RECENT_REPLIES = 64
"""Recently told replies a strip may take again (a strip's replies then leave the told set)."""

_NAMES = 16
"""Distinct stored replies the reader hands out (a line reads one reply to name it)."""


@attrs.frozen
class ToldReport:
    """What the told-state run measured."""

    events: int
    entries: int
    cap: int
    seconds: float
    lines: int
    samples: tuple[tuple[int, int, float], ...]
    """``(events so far, entries, peak process memory in MiB)`` at each checkpoint."""


def peak_memory_mib() -> float:
    """The process's peak resident memory so far (``getrusage``), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _replies() -> list[StoredMessage]:
    created = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return [
        StoredMessage(
            id=f"msg_{n}",
            sequence=n + 1,
            branch=BRANCH,
            role="assistant",
            content=(TextBlock(f"Checked the deploy log, step {n}: the retry budget ran out."),),
            metadata=MessageMeta(),
            created_at=created,
        )
        for n in range(_NAMES)
    ]


def told_state(events: int, *, seed: int, cap: int = DEFAULT_CAP) -> ToldReport:
    """Feed ``events`` teller events for one agent on one branch; report the state held.

    Args:
        events: how many ``for_drops`` / ``for_strip`` / ``note_round_stored`` calls.
        seed: fixes the event stream.
        cap: the teller's cap (the library's default unless a test wants a small one).
    """
    stored = _replies()

    def read(agent: str, message_id: MessageId) -> StoredMessage:
        return stored[int(message_id.rpartition("_")[2]) % _NAMES]

    rng = random.Random(seed)
    teller = ReasoningLossTeller(read, cap=cap)
    recent: deque[MessageId] = deque(maxlen=RECENT_REPLIES)
    marks = sorted({max(1, int(events * share)) for share in CHECKPOINTS})
    samples: list[tuple[int, int, float]] = []
    next_reply = 0
    lines = 0
    started = time.perf_counter()
    done = 0
    while done < events:
        pick = rng.random()
        line: str | None
        if pick < DROP_SHARE:
            hit = []
            for j in range(rng.randint(1, 3)):
                next_reply += 1
                hit.append(ReplyDrop(f"msg_{next_reply}", 0, PREFIX, f"messages.{j}.content.0"))
                recent.append(f"msg_{next_reply}")
            line = teller.for_drops(AGENT, BRANCH, PlacedDrops(replies=tuple(hit)), None)
        elif pick < DROP_SHARE + CLEAN_SHARE:
            line = teller.for_drops(AGENT, BRANCH, PlacedDrops(), None)
        elif pick < DROP_SHARE + CLEAN_SHARE + STRIP_SHARE:
            next_reply += 1
            taken = (*rng.sample(list(recent), min(len(recent), 3)), f"msg_{next_reply}")
            strip = ThinkingStrip("head", ("tools",), taken, len(taken), BRANCH, f"cmp_{done}")
            line = teller.for_strip(AGENT, BRANCH, strip, None)
        else:
            round_drop = RoundDrop(
                0,
                0,
                PREFIX,
                "messages.9.content.0",
                content=(TextBlock("Reading the runbook next."),),
            )
            line = teller.for_drops(AGENT, BRANCH, PlacedDrops(rounds=(round_drop,)), None)
            next_reply += 1
            teller.note_round_stored(AGENT, BRANCH, 0, f"msg_{next_reply}")
            done += 1
        lines += line is not None
        done += 1
        while marks and done >= marks[0]:
            samples.append((marks.pop(0), teller.told_count(AGENT), peak_memory_mib()))
    seconds = time.perf_counter() - started
    teller._check()
    return ToldReport(
        events=done,
        entries=teller.told_count(AGENT),
        cap=teller.cap,
        seconds=seconds,
        lines=lines,
        samples=tuple(samples),
    )
