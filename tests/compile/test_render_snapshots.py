"""Render snapshots: a dropped or restarted render is restored from the store, never wrongly.

A host whose kept render was dropped (``forget_cache``, the per-process bound) or that restarted
gets, from its next compile, the very request a render from the stored messages would build;
the snapshot is used only while nothing it depended on changed, and bytes that are not a render
this library made are refused without running anything. Every store; requests go through the
real SDK client to the simulator.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import (
    SESSION_HEAD,
    THINKING_HEAD,
    CallCountingStore,
    invalid_calls,
    replies_with_thinking,
    signed_conversation,
    snapshots_off,
    unmarked,
)
from structlog.testing import capture_logs

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    MemoryStore,
    SQLiteStore,
    Store,
    Window,
    blocks_to_wire,
    estimate_tokens,
    set_render_cache_limit,
)
from context_manager._compile._compact import pack, unpack
from context_manager._compile._compiler import SNAPSHOT_REFRESH_MESSAGES
from context_manager._compile._strategies import CHARS_PER_TOKEN
from context_manager.simulator import Simulator

RESTORED = "render_snapshot_restored"


def events(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(e["event"]) for e in logs]


def cold(cm: ContextManager, head: Head = THINKING_HEAD) -> CompileResult:
    """What a render from the stored messages alone sends now (a dry run, nothing kept)."""
    cm.forget_cache()
    try:
        with snapshots_off():
            return cm.compile(head, dry_run=True)
    finally:
        cm.forget_cache()


async def test_a_compile_after_the_kept_render_was_dropped_restores_it_and_sends_the_same_request(
    store: Store,
) -> None:
    sim = Simulator()
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(sim, cm, 4)
    kept = cm.compile(THINKING_HEAD)
    expected = cold(cm)

    with capture_logs() as logs:
        again = cm.compile(THINKING_HEAD)

    assert RESTORED in events(logs)
    assert again.request == kept.request == expected.request
    assert again.provenance == expected.provenance
    await sim.client().beta.messages.create(**again.request)
    assert invalid_calls(sim) == []


async def test_a_restarted_host_restores_the_render_its_last_run_saved(
    two_hosts: tuple[Store, Store],
) -> None:
    first, second = two_hosts
    sim = Simulator()
    await signed_conversation(sim, ContextManager.open(first, namespace="ada"), 3)
    ContextManager.open(first, namespace="ada").compile(THINKING_HEAD)  # a render from the store
    restarted = ContextManager.open(second, namespace="ada")

    with capture_logs() as logs:
        again = restarted.compile(THINKING_HEAD)

    assert RESTORED in events(logs)
    assert again.request == cold(restarted).request
    await sim.client().beta.messages.create(**again.request)
    assert invalid_calls(sim) == []


def _edit(cm: ContextManager, other: ContextManager, replies: list[str]) -> Head:
    first_question = cm.messages()[0].id
    other.edit_message(first_question, "question 0, reworded")
    return THINKING_HEAD


def _release(cm: ContextManager, other: ContextManager, replies: list[str]) -> Head:
    other.compile(THINKING_HEAD)
    other.release_thinking(replies[0])
    return THINKING_HEAD


def _head(cm: ContextManager, other: ContextManager, replies: list[str]) -> Head:
    return Head(
        model=THINKING_HEAD.model,
        system="You are Ada, on call tonight.",
        tools=THINKING_HEAD.tools,
        settings=THINKING_HEAD.settings,
    )


def _window(cm: ContextManager, other: ContextManager, replies: list[str]) -> Head:
    cm.strategy = Window(max_tokens=60)
    return THINKING_HEAD


@pytest.mark.parametrize("change", [_edit, _release, _head, _window])
async def test_a_snapshot_is_not_restored_once_what_it_depended_on_changed(
    two_hosts: tuple[Store, Store],
    change: Callable[[ContextManager, ContextManager, list[str]], Head],
) -> None:
    first, second = two_hosts
    sim = Simulator()
    cm = ContextManager.open(first, namespace="ada")
    replies = await signed_conversation(sim, cm, 3)
    cm.forget_cache()
    cm.compile(THINKING_HEAD)  # a render from the store: its snapshot is saved
    head = change(cm, ContextManager.open(second, namespace="ada"), replies)
    expected = cold(cm, head)

    with capture_logs() as logs:
        again = cm.compile(head)

    assert RESTORED not in events(logs)
    assert again.request == expected.request
    await sim.client().beta.messages.create(**again.request)
    assert invalid_calls(sim) == []


class _Runs:
    """Unpickling this would create a file: the proof a snapshot ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


@pytest.mark.parametrize("kind", ["code", "damaged"])
async def test_snapshot_bytes_that_are_not_a_render_are_refused_and_run_nothing(
    kind: str, tmp_path: Path
) -> None:
    store = MemoryStore()
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(Simulator(), cm, 2)
    key = cm.current_branch_key()
    saved = store.load_render("ada", key)
    assert saved is not None
    marker = tmp_path / "ran"
    payload = {"messages": _Runs(str(marker))}
    blob = pack(pickle.dumps(payload)) if kind == "code" else b"not a render at all"
    store.save_render("ada", key, saved[0], blob)
    expected = cold(cm)
    store.save_render("ada", key, saved[0], blob)  # ``cold`` saved nothing (a dry run)

    with capture_logs() as logs:
        again = cm.compile(THINKING_HEAD)

    assert not marker.exists()
    assert "render_snapshot_refused" in events(logs)
    assert RESTORED not in events(logs)
    assert again.request == expected.request


async def test_compacting_an_idle_branchs_render_writes_nothing_and_waking_it_restores() -> None:
    """Issue 27: compacting (inside another agent's compile) is in memory only; waking the
    branch restores the snapshot its own compile saved, extended by what came since."""
    store = MemoryStore()
    sim = Simulator()
    idle = ContextManager.open(store, namespace="ada")
    await signed_conversation(sim, idle, 3)
    idle.compile(THINKING_HEAD)  # steady compiles since the first: the snapshot lags behind
    lagging = store.load_render("ada", idle.current_branch_key())
    set_render_cache_limit(64 * 2**20, hot_bytes=0)
    try:
        busy = ContextManager.open(store, namespace="bob")
        busy.add_message("user", "hello")
        busy.compile(THINKING_HEAD)  # the newest render: ada's is compacted
    finally:
        set_render_cache_limit(64 * 2**20)
    saved = store.load_render("ada", idle.current_branch_key())

    assert saved is not None
    assert saved == lagging
    assert json.loads(saved[0])["last_sequence"] < idle.branch_head()[1]
    woken = ContextManager.open(store, namespace="ada")
    with capture_logs() as logs:
        again = woken.compile(THINKING_HEAD)
    assert RESTORED in events(logs)
    assert again.request == cold(woken).request


@pytest.mark.usefixtures("no_render_snapshots")
async def test_with_render_snapshots_off_none_is_saved(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(Simulator(), cm, 2)
    cm.forget_cache()
    cm.compile(THINKING_HEAD)

    assert store.load_render("ada", cm.current_branch_key()) is None


class _FailingSnapshots(MemoryStore):
    """A real store whose snapshot table is broken."""

    def save_render(self, namespace: str, branch: str, header: str, blob: bytes) -> None:
        raise OSError("disk full")

    def load_render(self, namespace: str, branch: str) -> tuple[str, bytes] | None:
        raise OSError("disk gone")


async def test_a_store_failing_to_save_or_load_a_snapshot_never_fails_a_compile() -> None:
    sim = Simulator()
    cm = ContextManager.open(_FailingSnapshots(), namespace="ada")
    with capture_logs() as logs:
        await signed_conversation(sim, cm, 2)
        cm.forget_cache()
        again = cm.compile(THINKING_HEAD)

    assert {"render_snapshot_unsaved", "render_snapshot_unread"} <= set(events(logs))
    assert again.request == cold(cm).request


async def test_a_restored_render_that_sheds_never_sends_thinking_released_before_the_snapshot(
    two_hosts: tuple[Store, Store],
) -> None:
    """A shed after a restore re-renders the window: it judges by every release the window's
    replies have, not only those of the messages stored since the snapshot."""
    first, second = two_hosts
    sim = Simulator()
    cm = ContextManager.open(first, namespace="ada")
    replies = await signed_conversation(sim, cm, 5)
    cm.release_thinking(replies[0])  # the oldest: every later block stays valid
    rendered = sum(
        estimate_tokens(m) for m in unmarked(cm.compile(THINKING_HEAD).request)["messages"]
    )
    stored = sum(
        estimate_tokens({"role": m.role, "content": blocks_to_wire(m.content)})
        for m in cm.messages()
    )
    window = Window(max_tokens=stored, reanchor=1.0)  # the whole history fits, as stored
    cm.strategy = window
    cm.forget_cache()
    cm.compile(THINKING_HEAD)  # a render from the store: saved
    restarted = ContextManager.open(second, namespace="ada", strategy=window)
    over = stored - rendered + 40  # tokens the next message must bring to go over the window
    restarted.add_message("user", "x" * (over * CHARS_PER_TOKEN))
    expected = cold(restarted)

    with capture_logs() as logs:
        shed = restarted.compile(THINKING_HEAD)

    assert RESTORED in events(logs)
    assert "thinking_shed" in events(logs)
    sent = replies_with_thinking(shed)
    assert replies[0] not in sent
    assert sent == replies[len(replies) - len(sent) :]  # a leading run shed, the rest sent
    assert shed.thinking_strip is not None  # the shed replies, told once; the released one
    assert replies[0] not in shed.thinking_strip.replies  # was told when it was released
    assert shed.request == expected.request
    await sim.client().beta.messages.create(**shed.request)
    assert invalid_calls(sim) == []


async def _released_and_saved(store: Store) -> tuple[list[str], str]:
    """A conversation whose oldest reply's thinking was released and told, then rendered from
    the store (its snapshot saved): the replies, and the branch key."""
    cm = ContextManager.open(store, namespace="ada")
    replies = await signed_conversation(Simulator(), cm, 4)
    cm.release_thinking(replies[0])
    told = cm.compile(THINKING_HEAD)
    assert told.thinking_strip is not None
    assert replies[0] in told.thinking_strip.replies
    cm.forget_cache()
    cm.compile(THINKING_HEAD)  # the release outdated every snapshot: rendered, and saved
    return replies, cm.current_branch_key()


def _restarted_release_reads(store: Store, released: str) -> int:
    """The release reads a restarted host's first compile on ``store`` makes, having checked
    that it restored the snapshot and sent what a render from the store would: not
    ``released``'s thinking, and no strip (the first host told it)."""
    counting = CallCountingStore(store, "releases")
    restarted = ContextManager.open(counting, namespace="ada")
    with capture_logs() as logs:
        again = restarted.compile(THINKING_HEAD)
    reads = counting.calls["releases"]
    assert RESTORED in events(logs)
    assert released not in replies_with_thinking(again)
    assert again.thinking_strip is None
    assert again.request == cold(restarted).request
    return reads


async def test_a_restarted_host_reads_no_release_its_snapshot_already_holds(
    two_hosts: tuple[Store, Store],
) -> None:
    """A snapshot holds the stored releases of every message its window rendered, read when
    it was saved; the restore uses them instead of reading them again (one read per window
    message, the largest part of a restore on a long history)."""
    first, second = two_hosts
    replies, _ = await _released_and_saved(first)

    assert _restarted_release_reads(second, replies[0]) == 0


async def test_a_snapshot_saved_without_its_windows_releases_is_restored_reading_them(
    two_hosts: tuple[Store, Store],
) -> None:
    """A snapshot whose releases could not be read when it was saved (the store failed then)
    holds none; its restore reads them from the store, and sends what a render would."""
    first, second = two_hosts
    replies, key = await _released_and_saved(first)
    saved = first.load_render("ada", key)
    assert saved is not None
    fields = pickle.loads(unpack(saved[1]))
    assert fields["window_releases"]  # the released reply's, at least
    fields["window_releases"] = None
    first.save_render("ada", key, saved[0], pack(pickle.dumps(fields)))

    assert _restarted_release_reads(second, replies[0]) == 1


async def test_a_restore_far_behind_the_branch_saves_a_fresh_snapshot(store: Store) -> None:
    """Steady compiles never save (that would cost every call); the first compile that restores
    a snapshot many messages behind saves one, so the next restart renders nothing again."""
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(Simulator(), cm, SNAPSHOT_REFRESH_MESSAGES // 2 + 4)
    key = cm.current_branch_key()
    head = cm.branch_head()[1]
    behind = json.loads(store.load_render("ada", key)[0])["last_sequence"]  # type: ignore[index]
    assert behind < head - SNAPSHOT_REFRESH_MESSAGES  # saved by the first compile only
    cm.forget_cache()

    with capture_logs() as logs:
        cm.compile(THINKING_HEAD)

    assert RESTORED in events(logs)
    saved = store.load_render("ada", key)
    assert saved is not None
    assert json.loads(saved[0])["last_sequence"] == head


async def test_deleting_a_branch_removes_its_snapshot_and_only_its_own(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    await signed_conversation(Simulator(), cm, 2)
    main = cm.current_branch_key()
    cm.fork("side")
    side = cm.current_branch_key()
    cm.compile(THINKING_HEAD)  # the fork's first render, from the stored messages: saved
    assert store.load_render("ada", side) is not None
    cm.switch_branch("main")

    cm.delete_branch("side")

    assert store.load_render("ada", side) is None
    assert store.load_render("ada", main) is not None


_CHILD = """
import json, sys
from structlog.testing import capture_logs
sys.path.insert(0, sys.argv[2])
from helpers import THINKING_HEAD
from context_manager import ContextManager, SQLiteStore

cm = ContextManager.open(SQLiteStore(sys.argv[1]), namespace="ada")
with capture_logs() as logs:
    result = cm.compile(THINKING_HEAD)
print(json.dumps({"events": [str(e["event"]) for e in logs], "request": result.request}))
"""


async def test_a_snapshot_saved_by_one_process_is_restored_by_a_fresh_one(tmp_path: Path) -> None:
    """Every part of the render cache key has a name another process gives it too (the
    documented readability table is wrapped in ``functools.lru_cache``), so a restarted host
    restores the snapshot its last run saved instead of rendering from the store."""
    path = tmp_path / "agent.db"
    sim = Simulator()
    cm = ContextManager.open(SQLiteStore(path), namespace="ada")
    await signed_conversation(sim, cm, 3)
    expected = cm.compile(THINKING_HEAD)  # a render from the store: its snapshot is saved
    cm.store.close()

    tests = str(Path(__file__).resolve().parents[1])
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), tests],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    seen = json.loads(child.stdout.strip().splitlines()[-1])

    assert RESTORED in seen["events"]
    assert seen["request"] == json.loads(json.dumps(expected.request))


def _block_maps(result: CompileResult) -> tuple[int, int]:
    """How many messages ``result`` sends whole (each block, in order) and how many distinct
    ``Source.blocks`` dicts they hold."""
    whole = [
        source.blocks
        for entry in result.provenance
        for source in entry.sources
        if source.blocks == {j: j for j in range(len(source.blocks))}
    ]
    return len(whole), len({id(blocks) for blocks in whole})


async def test_messages_sent_whole_share_their_block_maps_also_once_restored(
    two_hosts: tuple[Store, Store],
) -> None:
    """Memory: a render holds one ``blocks`` dict per block count, not one per message (a
    window of thousands of messages held thousands), and so does the render a restart restores."""
    first, second = two_hosts
    await signed_conversation(Simulator(), ContextManager.open(first, namespace="ada"), 12)
    rendered = ContextManager.open(first, namespace="ada").compile(THINKING_HEAD)
    restarted = ContextManager.open(second, namespace="ada")

    with capture_logs() as logs:
        restored = restarted.compile(THINKING_HEAD)

    assert RESTORED in events(logs)
    for result in (rendered, restored):
        whole, distinct = _block_maps(result)
        assert whole >= 24
        assert distinct <= 3  # one per block count: a question (1), a reply (2) or (3)
    assert restored.provenance == rendered.provenance


async def test_a_branchs_first_compile_saves_the_snapshot_a_restart_restores(
    two_hosts: tuple[Store, Store],
) -> None:
    """The first compile anchors the head; it renders before the anchor is set, and its render
    (and snapshot) was kept under the unanchored key, which no later compile asks for: a host
    restarted after it rendered the window from the store again."""
    first, second = two_hosts
    head = attrs.evolve(THINKING_HEAD, model=SESSION_HEAD.model)  # changes are appended
    cm = ContextManager.open(first, namespace="ada")
    for n in range(6):
        cm.add_message("user", f"question {n}")
        cm.add_message("assistant", f"answer {n}")
    cm.add_message("user", "and now?")
    cm.compile(head)  # the branch's first compile: renders, anchors, saves
    restarted = ContextManager.open(second, namespace="ada")

    with capture_logs() as logs:
        again = restarted.compile(head)

    assert RESTORED in events(logs)
    assert again.request == cold(restarted, head).request
