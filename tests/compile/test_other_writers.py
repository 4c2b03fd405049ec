"""Two writers of one agent: a manager that keeps a render sees the other's binding writes.

Two managers on one store stand for two hosts running the same agent in turn (issue 20): two
``SQLiteStore`` objects on one file, two ``PostgresStore`` objects on one schema, or one
``MemoryStore`` shared. What one host releases (``release_thinking``, ``place_drops``, a shed)
the other must not send again from the render it kept, and every loss is told once between them.
Requests go through the real SDK client to the simulator, which judges each one.
"""

from __future__ import annotations

from helpers import (
    THINKING_HEAD,
    StoreWithout,
    invalid_calls,
    replies_with_thinking,
    signed_conversation,
)
from structlog.testing import capture_logs

from context_manager import ContextManager, MemoryStore, Store
from context_manager.simulator import PREFIX_MISMATCH, Simulator

OTHER_WRITER = "binding_written_elsewhere"


async def test_thinking_another_host_released_is_not_sent_from_a_kept_render(
    two_hosts: tuple[Store, Store],
) -> None:
    first, second = two_hosts
    sim = Simulator()
    a = ContextManager.open(first, namespace="ada")
    replies = await signed_conversation(sim, a, 3)
    assert replies_with_thinking(a.compile(THINKING_HEAD)) == replies  # kept by host A

    b = ContextManager.open(second, namespace="ada")
    b.compile(THINKING_HEAD)
    b.release_thinking(replies[0])
    with capture_logs() as logs:
        after = a.compile(THINKING_HEAD)

    assert replies_with_thinking(after) == replies[1:]
    assert after.thinking_strip is not None
    assert after.thinking_strip.replies == (replies[0],)
    assert [e["event"] for e in logs].count(OTHER_WRITER) == 1
    await sim.client().beta.messages.create(**after.request)
    assert invalid_calls(sim) == []
    told_again = b.compile(THINKING_HEAD)  # host A reported the strip: host B does not
    assert told_again.thinking_strip is None
    assert replies_with_thinking(told_again) == replies[1:]


async def test_a_drop_another_host_placed_is_not_sent_again_by_a_host_that_kept_its_render(
    two_hosts: tuple[Store, Store],
) -> None:
    first, second = two_hosts
    sim = Simulator()
    client = sim.client()
    a = ContextManager.open(first, namespace="ada")
    replies = await signed_conversation(sim, a, 3)
    a.compile(THINKING_HEAD)

    b = ContextManager.open(second, namespace="ada")
    sent = b.compile(THINKING_HEAD)
    sim.force_drop(paths=["messages.1.content.0"], reason=PREFIX_MISMATCH)
    response = await client.beta.messages.create(**sent.request)
    assert response.input_transformations
    # the oldest block dropped, and each later one that recorded it (VENDOR_RULES 4)
    assert b.place_drops(response, sent).releases() == tuple((r, 0) for r in replies)
    b.record_reply(response, sent)
    b.add_message("user", "and then?")
    after = a.compile(THINKING_HEAD)

    assert not set(replies) & set(replies_with_thinking(after))
    assert after.thinking_strip is not None
    assert after.thinking_strip.replies == tuple(replies)
    await client.beta.messages.create(**after.request)
    assert sim.calls[-1].status == 200
    assert not sim.calls[-1].dropped  # nothing sent that the provider would drop


async def test_a_hosts_own_releases_and_commits_never_read_as_another_writers() -> None:
    """One host alone: its own binding writes keep its render (no re-render, no log event)."""
    sim = Simulator()
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    with capture_logs() as logs:
        replies = await signed_conversation(sim, cm, 3)
        cm.release_thinking(replies[0])
        cm.compile(THINKING_HEAD)
        cm.add_message("user", "more")
        cm.compile(THINKING_HEAD)

    assert OTHER_WRITER not in [e["event"] for e in logs]


async def test_a_store_without_binding_serials_still_compiles_and_releases() -> None:
    store = StoreWithout("serials", "serials_and_read")  # written before serials
    cm = ContextManager.open(store, namespace="ada")
    replies = await signed_conversation(Simulator(), cm, 2)
    cm.release_thinking(replies[0])

    assert replies_with_thinking(cm.compile(THINKING_HEAD)) == replies[1:]


def test_each_binding_record_write_moves_the_binding_serial_by_one_for_every_reader(
    two_hosts: tuple[Store, Store],
) -> None:
    """The store contract the compiler counts its own writes by (``Store.serials``)."""
    first, second = two_hosts
    cm = ContextManager.open(first, namespace="ada")
    cm.add_message("user", "hello")
    reply = cm.add_message("assistant", "hi")
    key = cm.current_branch_key()
    before = second.serials("ada")

    first.add_release("ada", key, reply, 0)
    second.commit_binding("ada", key, first_compiled=True, releases=[], reported=[reply])
    first.commit_binding("ada", key, first_compiled=True, releases=[(reply, 0)], reported=[])

    assert first.serials("ada") == second.serials("ada") == (before[0], before[1] + 3)
    assert second.serials("bob") == (0, 0)  # per agent
    cm.edit_message(reply, "hello again")
    assert second.serials("ada")[0] > before[0]
