"""Prompt-cache breakpoints in compiled requests, checked against the simulator's cache.

What a user can rely on: a compile marks at most four places (the newest message, the newest
message of the previous call, the end of the head, the window's first message), keeps a host's
own markers within that limit, never changes which thinking blocks are sent, places the same
markers after a reopen, and turns a stable prefix into cache reads at the simulator.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import read_log_script, unmarked, wire_reply
from structlog.testing import capture_logs

from context_manager import (
    Caching,
    ContextManager,
    Head,
    MemoryStore,
    SQLiteStore,
    Store,
    TextBlock,
    Window,
)
from context_manager._compile import place_breakpoints, previous_request_end
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator

SYSTEM = "You are Ada, the on-call agent. Keep the service healthy. " * 90
READ_LOG = {"name": "read_log", "description": "Read the log.", "input_schema": {"type": "object"}}
HEAD = Head(
    model="claude-opus-5-5",
    system=SYSTEM,
    tools=[READ_LOG],
    settings={"max_tokens": 2048, "thinking": {"type": "adaptive"}},
)
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "a.db")
    yield made
    made.close()


def markers(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(place, cache_control)`` of every marker in a request, in reading order."""
    found: list[tuple[str, Any]] = []
    for k, tool in enumerate(request.get("tools", [])):
        if "cache_control" in tool:
            found.append((f"tools.{k}", tool["cache_control"]))
    system = request.get("system")
    for j, block in enumerate(system if isinstance(system, list) else []):
        if "cache_control" in block:
            found.append((f"system.{j}", block["cache_control"]))
    for i, message in enumerate(request["messages"]):
        for j, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append((f"messages.{i}.content.{j}", block["cache_control"]))
    return found


tool_script = read_log_script("check the log first", {"lines": 20})
"""Call ``read_log`` once per user question, then answer."""


async def _session(sim: Simulator, store: Store, caching: Caching, turns: int) -> Agent:
    runtime = Runtime(sim.client(), store)
    agent = runtime.register(Agent(name="ada", head=HEAD, tools={"read_log": _read_log}))
    agent.context.caching = caching
    for n in range(turns):
        await agent.run_turn(f"question {n}: what does the log say about worker {n}?")
    return agent


def _read_log(arguments: dict[str, Any]) -> str:
    return "worker restarted after the deploy; queue drained; no errors since. " * 8


def test_a_compile_marks_the_newest_message_the_previous_calls_end_the_head_and_the_start(
    store: Store,
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    sim = Simulator()
    client = sim.sync_client()
    for question in ("first question", "second question"):
        cm.add_message("user", question)
        result = cm.compile(HEAD)
        cm.record_reply(client.beta.messages.create(**result.request), result)
    cm.add_message("user", "third question")

    request = cm.compile(HEAD).request

    assert [place for place, _ in markers(request)] == [
        "system.0",
        "messages.0.content.0",
        "messages.2.content.0",
        "messages.4.content.0",
    ]
    assert {json.dumps(value) for _, value in markers(request)} == {json.dumps(EPHEMERAL)}


def test_breakpoints_never_change_which_thinking_blocks_are_sent_or_verify(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    plain = ContextManager.open(store, namespace="ada", caching=Caching(enabled=False))
    sim = Simulator()
    client = sim.sync_client()
    for question in ("first", "second", "third"):
        cm.add_message("user", question)
        result = cm.compile(HEAD)
        cm.record_reply(client.beta.messages.create(**result.request), result)
    cm.add_message("user", "fourth")

    marked = cm.compile(HEAD, dry_run=True).request
    bare = plain.compile(HEAD, dry_run=True).request

    assert markers(bare) == []
    assert unmarked(marked["messages"]) == bare["messages"]
    assert marked["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert bare["system"] == SYSTEM
    assert [c.reason for c in sim.verify(marked)] == [None, None, None]


def test_a_reopened_store_places_the_same_breakpoints(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    cm = ContextManager.open(SQLiteStore(path), namespace="ada")
    client = Simulator().sync_client()
    for question in ("first", "second"):
        cm.add_message("user", question)
        result = cm.compile(HEAD)
        cm.record_reply(client.beta.messages.create(**result.request), result)
    cm.add_message("user", "third")
    before = cm.compile(HEAD, dry_run=True).request
    cm.store.close()

    reopened = ContextManager.open(SQLiteStore(path), namespace="ada")
    after = reopened.compile(HEAD, dry_run=True).request
    reopened.store.close()

    assert json.dumps(before, sort_keys=True) == json.dumps(after, sort_keys=True)


def test_a_hosts_own_markers_are_kept_and_counted_within_the_limit_of_four(store: Store) -> None:
    host_head = attrs.evolve(
        HEAD,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        tools=[{**READ_LOG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    )
    cm = ContextManager.open(store, namespace="ada")
    for n in range(4):
        cm.add_message("user", f"question {n}")
        cm.add_message("assistant", f"answer {n}")
    cm.add_message("user", [{"type": "text", "text": "marked by me", "cache_control": EPHEMERAL}])

    request = cm.compile(host_head).request

    assert markers(request) == [
        ("tools.0", {"type": "ephemeral", "ttl": "1h"}),
        ("system.0", EPHEMERAL),
        ("messages.6.content.0", EPHEMERAL),
        ("messages.8.content.0", EPHEMERAL),
    ]


def test_caching_off_sends_only_the_hosts_markers(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", caching=Caching(enabled=False))
    cm.add_message("user", [{"type": "text", "text": "mine", "cache_control": EPHEMERAL}])
    cm.add_message("assistant", "ok")
    cm.add_message("user", "next")

    assert markers(cm.compile(HEAD).request) == [("messages.0.content.0", EPHEMERAL)]


def test_the_one_hour_ttl_is_asked_for_and_never_follows_a_five_minute_marker(
    store: Store,
) -> None:
    cm = ContextManager.open(store, namespace="ada", caching=Caching(ttl="1h"))
    cm.add_message("user", [{"type": "text", "text": "mine", "cache_control": EPHEMERAL}])
    cm.add_message("assistant", "ok")
    cm.add_message("user", "next")

    request = cm.compile(HEAD).request

    one_hour = {"type": "ephemeral", "ttl": "1h"}
    assert markers(request) == [
        ("system.0", one_hour),
        ("messages.0.content.0", EPHEMERAL),
        ("messages.2.content.0", EPHEMERAL),
    ]
    Simulator().verify(request)  # the API accepts the order


def test_a_ttl_the_api_does_not_offer_is_refused() -> None:
    with pytest.raises(ValueError, match="'ttl' must be in"):
        Caching(ttl="10m")  # type: ignore[arg-type]


def test_thinking_blocks_and_system_messages_are_never_marked() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "thinking", "thinking": "", "signature": "s"},
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "r"}]},
            {"role": "system", "content": [{"type": "text", "text": "note"}]},
        ],
    }

    placed = place_breakpoints(body, Caching())

    assert markers(placed) == [
        ("messages.0.content.0", EPHEMERAL),
        ("messages.2.content.0", EPHEMERAL),
    ]
    assert "cache_control" not in json.dumps(body)  # the input is never modified


def test_more_host_markers_than_the_limit_get_no_more() -> None:
    content = [{"type": "text", "text": f"{n}", "cache_control": EPHEMERAL} for n in range(5)]
    body = {"model": "m", "system": "s", "messages": [{"role": "user", "content": content}]}

    assert place_breakpoints(body, Caching()) == body


def test_markers_inside_tool_results_count_against_the_limit() -> None:
    """A host's markers nested in a tool result's content count; a string result holds none."""
    nested = [{"type": "text", "text": f"{n}", "cache_control": EPHEMERAL} for n in range(4)]
    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": nested}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    body = {"model": "m", "system": "s", "messages": messages}

    assert place_breakpoints(body, Caching()) == body
    messages[2] = {"role": "user", "content": [{**result, "content": "plain"}]}
    assert len(markers(place_breakpoints(body, Caching()))) == 3


def test_the_previous_calls_end_is_the_message_before_the_newest_reply() -> None:
    roles = ["user", "assistant", "user", "assistant", "user", "system"]

    assert previous_request_end([{"role": r} for r in roles]) == 2
    assert previous_request_end([{"role": "assistant"}, {"role": "user"}]) is None


async def test_a_resident_session_reads_most_of_its_input_from_the_cache() -> None:
    sim = Simulator(script=tool_script)
    agent = await _session(sim, MemoryStore(), Caching(), turns=6)
    bare_sim = Simulator(script=tool_script)
    await _session(bare_sim, MemoryStore(), Caching(enabled=False), turns=6)

    usage = [call.response["usage"] for call in sim.calls]
    read = sum(u["cache_read_input_tokens"] for u in usage)
    whole = sum(
        u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] + u["input_tokens"]
        for u in usage
    )
    bare = [call.response["usage"]["cache_read_input_tokens"] for call in bare_sim.calls]

    assert len(sim.calls) == 12
    assert read / whole > 0.7
    assert bare == [0] * 12
    assert TextBlock("All is well.") in agent.context.messages()[-1].content


async def test_a_window_jump_rewrites_the_window_once_then_reads_it_again() -> None:
    """Plain jumps (``shed_thinking=False``): with shedding on, this history never jumps."""
    sim = Simulator(script=tool_script)
    store = MemoryStore()
    runtime = Runtime(sim.client(), store)
    agent = runtime.register(
        Agent(
            name="ada",
            head=HEAD,
            tools={"read_log": _read_log},
            strategy=Window(max_tokens=2_000, shed_thinking=False),
        )
    )
    for n in range(8):
        await agent.run_turn(f"question {n}: worker {n}?")

    starts = [call.request["messages"][0]["content"][0]["text"] for call in sim.calls]
    jumps = [n for n in range(1, len(starts)) if starts[n] != starts[n - 1]]
    usage = [call.response["usage"] for call in sim.calls]

    assert jumps
    for n in jumps:
        assert usage[n]["cache_creation_input_tokens"] > 0
        assert usage[n + 1]["cache_read_input_tokens"] > usage[n]["cache_read_input_tokens"]
    assert all(u["cache_read_input_tokens"] > 0 for u in usage[1:])


def test_a_compile_places_what_the_simulator_accepts(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = Simulator().sync_client()
    cm.add_message("user", "hello")
    first = client.beta.messages.create(**cm.compile(HEAD).request)

    assert first.usage.cache_creation_input_tokens > 0
    assert wire_reply(first)["content"]


def test_a_hosts_marker_deep_in_the_window_is_counted_on_every_steady_compile(
    store: Store,
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", [{"type": "text", "text": "pinned", "cache_control": EPHEMERAL}])
    other = ContextManager.open(store, namespace="bob")
    for n in range(6):
        cm.add_message("assistant", f"answer {n}")
        cm.add_message("user", f"question {n}")
        if n % 2:  # another render in the same thread between two of ours
            other.add_message("user", f"interleaved {n}")
            other.compile(HEAD)

        request = cm.compile(HEAD).request

        assert len(markers(request)) == (3 if n == 0 else 4)
        assert markers(request)[1] == ("messages.0.content.0", EPHEMERAL)
        Simulator().verify(request)


def test_a_hosts_marker_deep_in_a_restored_render_is_counted_as_in_the_render_it_was_made_from(
    two_hosts: tuple[Store, Store],
) -> None:
    """A restarted host restores the saved render with the markers its messages carry: its
    first request places the breakpoints the render from the store places, host's counted."""
    first, second = two_hosts
    cm = ContextManager.open(first, namespace="ada")
    cm.add_message("user", "question")
    cm.add_message("assistant", "answer")
    cm.add_message("user", [{"type": "text", "text": "pinned", "cache_control": EPHEMERAL}])
    for n in range(6):
        cm.add_message("assistant", f"answer {n}")
        cm.add_message("user", f"question {n}")
    cm.compile(HEAD)  # the first compile anchors the head
    made = ContextManager.open(first, namespace="ada").compile(HEAD).request  # saved
    restarted = ContextManager.open(second, namespace="ada")

    with capture_logs() as logs:
        request = restarted.compile(HEAD).request

    assert "render_snapshot_restored" in [e["event"] for e in logs]
    assert markers(request) == markers(made)
    assert len(markers(request)) == 4
    assert ("messages.2.content.0", EPHEMERAL) in markers(request)
    Simulator().verify(request)
