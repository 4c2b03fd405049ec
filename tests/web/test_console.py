"""The operator console over a real uvicorn server: who sees which page, and what a page holds."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import attrs
import pytest
from helpers import PROBE_HEAD, SUMMARIZED, runtime_on, slow_client

from context_manager import ContextManager, MemoryStore
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator
from context_manager.web import (
    Access,
    CallbackSource,
    ConsoleServer,
    Line,
    Principal,
    create_app,
    read_transcript,
    reads_reasoning,
    sees_agent,
)
from context_manager.web._html import transcript_page
from context_manager.web._source import pick_branch

OWNER, BOB, CAROL = "owner-token-0123456789", "bob-token-0123456789", "carol-token-0123456789"
TOKENS = f"""
# token                  principal  agents
{OWNER}  alice  *
{BOB}    bob    ada
{CAROL}  carol  other
"""
HEAD = attrs.evolve(PROBE_HEAD, settings={"max_tokens": 2048, "thinking": SUMMARIZED})


def thought(request: dict[str, Any]) -> list[dict[str, Any]]:
    asked = request["messages"][-1]["content"][-1]["text"]
    return [
        {"type": "thinking", "thinking": f"SECRET-THOUGHT about {asked}"},
        {"type": "text", "text": f"Answer to {asked}."},
    ]


async def fetch(url: str, token: str | None) -> tuple[int, str]:
    def get() -> tuple[int, str]:
        request = urllib.request.Request(url)
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, answer.read(4096).decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    return await asyncio.to_thread(get)


ALICE = Principal("alice", owner=True)
BOB_P = Principal("bob", agents=frozenset({"ada"}))
CAROL_P = Principal("carol", agents=frozenset({"other"}))


@pytest.mark.parametrize(
    ("principal", "agent", "asker", "sees", "reads"),
    [
        (ALICE, "ada", "bob", True, True),  # the owner: everything
        (ALICE, "ada", None, True, True),  # a turn nobody asked: the owner's
        (BOB_P, "ada", "bob", True, True),  # the asker, granted the agent
        (BOB_P, "ada", "alice", True, False),  # another asker's turn
        (BOB_P, "ada", None, True, False),
        (CAROL_P, "ada", "carol", False, False),  # not granted: nothing, even her own turn
        (ALICE, "missing", None, False, False),  # a missing agent: nobody
        (BOB_P, "missing", "bob", False, False),
    ],
)
def test_the_audience_rule(
    principal: Principal, agent: str, asker: str | None, sees: bool, reads: bool
) -> None:
    known = ["ada", "other"]
    seen = sees_agent(principal, agent, known)
    read = reads_reasoning(principal, agent, known, asker)
    assert (seen, read) == (sees, reads)


async def test_each_principal_gets_only_its_pages_and_everything_else_is_a_404() -> None:
    runtime = runtime_on(Simulator(script=thought))
    agent = runtime.register(Agent("ada", HEAD))
    by_bob = (await agent.run_turn("first question", asker="bob")).replies[0]
    by_alice = (await agent.run_turn("second question", asker="alice")).replies[0]
    async with runtime.serve(Access.parse(TOKENS)) as console:
        base = console.url
        table = [
            (OWNER, "/agents/ada", 200),
            (OWNER, f"/agents/ada/reasoning?cursor={by_bob}", 200),
            (OWNER, f"/agents/ada/reasoning?cursor={by_alice}", 200),
            (OWNER, "/agents/missing", 404),
            (BOB, "/agents/ada", 200),
            (BOB, f"/agents/ada/reasoning?cursor={by_bob}", 200),
            (BOB, f"/agents/ada/reasoning?cursor={by_alice}", 404),
            (BOB, "/agents/ada/reasoning?cursor=no-such-reply", 404),
            (BOB, "/agents/missing", 404),
            (CAROL, "/agents/ada", 404),
            (CAROL, f"/agents/ada/reasoning?cursor={by_bob}", 404),
            (CAROL, "/agents/ada/live", 404),
            (None, "/agents/ada", 401),
            (None, "/", 401),
        ]
        got = [(token, path, (await fetch(base + path, token))[0]) for token, path, _ in table]
        assert got == table
        _, missing = await fetch(base + "/agents/missing", BOB)
        _, hidden = await fetch(base + "/agents/ada", CAROL)
        assert missing == hidden
        _, page = await fetch(base + "/agents/ada", OWNER)
        _, durable = await fetch(base + f"/agents/ada/reasoning?cursor={by_bob}", BOB)
    assert "SECRET-THOUGHT" not in page
    assert "Answer to first question." in page
    body = json.loads(durable)
    assert [p["text"] for p in body["parts"]] == ["SECRET-THOUGHT about first question"]
    assert body["truncated"] is False


async def test_a_token_in_the_query_sets_a_cookie_once_and_redirects_without_it() -> None:
    runtime = runtime_on(Simulator(script=thought))
    runtime.register(Agent("ada", HEAD))
    async with runtime.serve(Access.parse(TOKENS)) as console:

        def visit() -> tuple[int, str, str]:
            class Stay(urllib.request.HTTPRedirectHandler):
                def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                    return None

            opener = urllib.request.build_opener(Stay)
            try:
                opener.open(f"{console.url}/agents/ada?token={OWNER}&branch=main", timeout=5)
            except urllib.error.HTTPError as err:
                return err.code, err.headers["location"], err.headers["set-cookie"]
            raise AssertionError("no redirect")

        status, location, cookie = await asyncio.to_thread(visit)
    assert (status, location) == (303, "/agents/ada?branch=main")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie


def three_thoughts(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *({"type": "thinking", "thinking": f"thought {n} " * 20} for n in range(3)),
        {"type": "text", "text": "Done."},
    ]


@pytest.mark.parametrize(
    ("max_parts", "max_bytes", "parts", "truncated"),
    [(256, 1 << 20, 3, False), (2, 1 << 20, 2, True), (256, 300, 1, True)],
)
async def test_the_durable_reasoning_answer_is_bounded_by_parts_and_bytes(
    max_parts: int, max_bytes: int, parts: int, truncated: bool
) -> None:
    runtime = runtime_on(Simulator(script=three_thoughts))
    agent = runtime.register(Agent("ada", HEAD))
    reply = (await agent.run_turn("think thrice", asker="bob")).replies[0]
    app = create_app(
        CallbackSource(lambda: ["ada"], lambda _: agent.context, lambda _: None),
        Access.parse(TOKENS),
        max_parts=max_parts,
        max_bytes=max_bytes,
    )
    async with ConsoleServer(app) as console:
        status, body = await fetch(f"{console.url}/agents/ada/reasoning?cursor={reply}", BOB)
    answer = json.loads(body)
    assert (status, len(answer["parts"]), answer["truncated"]) == (200, parts, truncated)
    assert answer["bytes"] <= max_bytes


def test_the_view_marks_redacted_and_omitted_thinking_and_shows_a_compaction() -> None:
    cm = ContextManager.open(MemoryStore(), namespace="ada")
    cm.add_message("assistant", [{"type": "compaction", "content": "Earlier: the build broke."}])
    cm.add_message("user", "go on")
    cm.add_message(
        "assistant",
        [
            {"type": "thinking", "thinking": "", "signature": "c2lnbmF0dXJlLW9uZQ=="},
            {"type": "redacted_thinking", "data": "b3BhcXVlLWRhdGE="},
            {"type": "text", "text": "On it."},
        ],
    )
    record = pick_branch(cm, None)
    assert record is not None
    view = read_transcript(cm, record)
    lines = [e for e in view.entries if isinstance(e, Line)]
    assert [line.form for line in lines] == ["compaction", "user", "assistant"]
    html = transcript_page(
        "ada", "main", ["main"], view, lambda _: True, live=False, principal="alice"
    )
    assert "⟨thinking, signed …9uZQ, omitted⟩" in html
    assert "⟨redacted, signed …hdGE⟩" in html
    assert "compaction: Earlier: the build broke." in html
    assert "show reasoning" not in html  # nothing readable to show


def sse_events(url: str, token: str) -> list[tuple[str, dict[str, Any]]]:
    """The live stream's events up to ``done``: ``(name, data)`` each."""
    request = urllib.request.Request(url)
    request.add_header("Authorization", f"Bearer {token}")
    events: list[tuple[str, dict[str, Any]]] = []
    with urllib.request.urlopen(request, timeout=10) as stream:
        name = ""
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
                if name == "done":
                    return events
    return events


async def test_the_live_stream_sends_a_turns_reasoning_only_to_its_asker_and_the_owner() -> None:
    gate = asyncio.Event()
    runtime = Runtime(slow_client(Simulator(script=thought), gate, after=1), MemoryStore())
    agent = runtime.register(Agent("ada", HEAD))
    async with runtime.serve(Access.parse(TOKENS)) as console:
        turn = asyncio.create_task(agent.run_turn("what broke?", asker="alice"))
        while (p := agent.live.partial()) is None or not (p.text and p.text.value):
            await asyncio.sleep(0.01)
        url = f"{console.url}/agents/ada/live"
        owner = asyncio.create_task(asyncio.to_thread(sse_events, url, OWNER))
        other = asyncio.create_task(asyncio.to_thread(sse_events, url, BOB))
        await asyncio.sleep(0.3)  # both connected, mid-call
        gate.set()
        reply = (await turn).replies[0]
        seen_by_owner, seen_by_bob = await owner, await other
    assert seen_by_owner[0][0] == "reasoning-partial"
    text = "".join(data.get("text", "") for name, data in seen_by_owner if name != "done")
    assert text == "SECRET-THOUGHT about what broke?"
    assert seen_by_bob == [("done", {"call": seen_by_owner[-1][1]["call"], "reply": reply})]
