"""The local gateway over real loopback HTTP (uvicorn in a thread), with real clients.

LangChain's ``ChatAnthropic`` and the ``anthropic`` SDK's own tool runner set their base URL to
the gateway, stream, and run tool loops; the gateway answers from the simulator (no upstream) or
forwards to an upstream (the simulator behind a recording ASGI app) with the caller's own key.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from unittest.mock import ANY

import anthropic
import httpx2
import pytest
from helpers import RacedStore, cli, free_port, invalid_calls, serve, thinking_signatures

from context_manager import (
    REASONING_LOSS_KIND,
    ContextManager,
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    Store,
)
from context_manager.adapters import AGENT_HEADER, BRANCH_HEADER, gateway_app
from context_manager.simulator import Simulator

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

MODEL = "claude-opus-5-5"
AGENT = {AGENT_HEADER: "ada"}


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture
def offline(sim: Simulator, store: Store) -> Iterator[str]:
    """The gateway with no upstream: it answers from ``sim``."""
    with serve(gateway_app(store, simulator_client=sim.client())) as url:
        yield url


def stored(store: Store, agent: str = "ada") -> ContextManager:
    return ContextManager.open(store, namespace=agent)


async def test_the_sdk_streams_through_the_gateway_and_its_replies_are_recorded(
    sim: Simulator, store: Store, offline: str
) -> None:
    messages: list[Any] = []  # the SDK wants its own TypedDicts; these are wire dicts
    async with anthropic.AsyncAnthropic(
        base_url=offline, api_key="mine", default_headers=AGENT
    ) as client:
        for words in ("one", "two", "three"):
            messages.append({"role": "user", "content": words})
            async with client.messages.stream(
                model=MODEL,
                max_tokens=512,
                system=f"You are Ada; this is {words}.",
                thinking={"type": "adaptive"},
                messages=messages,
            ) as stream:
                reply = await stream.get_final_message()
            content = [b.to_dict() for b in reply.content]
            messages.append({"role": "assistant", "content": content})
    assert [call.status for call in sim.calls] == [200] * 3
    assert all(call.stream for call in sim.calls)
    assert len(thinking_signatures(sim.requests[-1])) == 2
    assert invalid_calls(sim) == []
    cm = stored(store)
    assert len(cm.messages(kind="head-change")) == 2
    assert [m.role for m in cm.messages() if m.metadata.kind is None] == ["user", "assistant"] * 3


async def test_count_tokens_goes_through_the_gateway_and_stores_nothing(
    sim: Simulator, store: Store, offline: str
) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=offline, api_key="mine", default_headers=AGENT
    ) as client:
        counted = await client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "hello"}]
        )
    assert counted.input_tokens > 0
    assert stored(store).messages() == []


async def test_count_tokens_on_another_branch_makes_no_branch_and_moves_the_agent_nowhere(
    store: Store, offline: str
) -> None:
    hello: list[Any] = [{"role": "user", "content": "hello"}]
    async with anthropic.AsyncAnthropic(
        base_url=offline, api_key="mine", default_headers=AGENT
    ) as client:
        await client.messages.create(model=MODEL, max_tokens=64, messages=hello)
        before = [b.name for b in stored(store).list_branches()], store.current_branch_name("ada")
        for branch in ("what-if", "main"):
            await client.messages.count_tokens(
                model=MODEL, messages=hello, extra_headers={BRANCH_HEADER: branch}
            )
        after = [b.name for b in stored(store).list_branches()], store.current_branch_name("ada")
    assert before == after == (["main"], "main")


async def test_two_gateways_on_one_database_serve_one_agent_turn_about_and_lose_nothing(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """Behind a load balancer: each call goes to the other gateway, and each compiles from what
    the other stored (its reply, the tool results, the appended system changes), so every reply
    is recorded once, on ``main``, and every earlier reply's thinking goes out as signed."""
    lookup: Any = {"name": "lookup", "input_schema": {"type": "object"}}
    messages: list[Any] = []
    with (
        serve(gateway_app(two_hosts[0], simulator_client=sim.client())) as one,
        serve(gateway_app(two_hosts[1], simulator_client=sim.client())) as two,
    ):
        for call, words in enumerate(["hello", "use lookup", "hello again", "use lookup again"]):
            messages.append({"role": "user", "content": words})
            while True:
                url = (one, two)[len(sim.calls) % 2]
                async with anthropic.AsyncAnthropic(
                    base_url=url, api_key="mine", default_headers=AGENT, max_retries=0
                ) as client:
                    reply = await client.messages.create(
                        model=MODEL,
                        max_tokens=256,
                        system=f"You are Ada (call {call}).",
                        thinking={"type": "adaptive"},
                        tools=[lookup],
                        messages=messages,
                    )
                messages.append(
                    {"role": "assistant", "content": [b.to_dict() for b in reply.content]}
                )
                uses = [b for b in reply.content if b.type == "tool_use"]
                if not uses:
                    break
                results = [
                    {"type": "tool_result", "tool_use_id": u.id, "content": "42"} for u in uses
                ]
                messages.append({"role": "user", "content": results})
    assert len(sim.calls) == 6
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 5
    for store in two_hosts:
        cm = stored(store)
        assert [b.name for b in cm.list_branches()] == ["main"]
        assert len([m for m in cm.messages() if m.role == "assistant"]) == 6
        assert len(cm.messages(kind="head-change")) == 3


async def test_a_call_whose_agent_another_host_holds_too_long_is_answered_409_and_stores_nothing(
    sim: Simulator, postgres_dsn: str
) -> None:
    """A host's turn holds the agent (``cm.hold()``, as the runtime does); a gateway call of it
    waits up to the store's lock timeout, then gets a 409 naming the holder (the SDK retries a
    409) and stores nothing, instead of a 500."""
    store = PostgresStore(postgres_dsn, lock_timeout=0.3)
    holding = ContextManager.open(store, namespace="ada")
    hello: list[Any] = [{"role": "user", "content": "hello"}]
    with (
        holding.hold(holder="worker-3"),
        serve(gateway_app(store, simulator_client=sim.client())) as url,
    ):
        async with anthropic.AsyncAnthropic(
            base_url=url, api_key="mine", default_headers=AGENT, max_retries=0
        ) as client:
            with pytest.raises(anthropic.ConflictError) as refused:
                await client.messages.create(model=MODEL, max_tokens=64, messages=hello)
    assert "worker-3" in str(refused.value)
    assert sim.calls == []
    assert holding.messages() == []
    store.close()


async def test_after_one_gateway_rewinds_the_other_goes_on_from_the_new_branch(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """The framework goes back one exchange through gateway A (a rewind: a new branch); its next
    call reaches gateway B, which follows the agent there. B used to stay on the old branch and
    take the framework's messages for edits of it (rewriting two stored messages), and A then
    stored B's reply as a copy whose thinking was not sent."""
    messages: list[Any] = []
    with (
        serve(gateway_app(two_hosts[0], simulator_client=sim.client())) as one,
        serve(gateway_app(two_hosts[1], simulator_client=sim.client())) as two,
    ):

        async def call(url: str, words: str) -> None:
            messages.append({"role": "user", "content": words})
            async with anthropic.AsyncAnthropic(
                base_url=url, api_key="mine", default_headers=AGENT, max_retries=0
            ) as client:
                reply = await client.messages.create(
                    model=MODEL, max_tokens=256, thinking={"type": "adaptive"}, messages=messages
                )
            messages.append({"role": "assistant", "content": [b.to_dict() for b in reply.content]})

        for url, words in [(one, "one"), (two, "two"), (one, "three")]:
            await call(url, words)
        del messages[4:]  # the framework goes back to before "three"
        for url, words in [(one, "three, asked otherwise"), (two, "four"), (one, "five")]:
            await call(url, words)
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 4  # every earlier reply's
    cm = stored(two_hosts[0])
    assert [b.name for b in cm.list_branches()] == ["main", "main~1"]
    assert [m.role for m in cm.messages(branch="main~1")] == ["user", "assistant"] * 5
    main = [m.content[0] for m in cm.messages(branch="main") if m.role == "user"]
    assert [getattr(b, "text", None) for b in main] == ["one", "two", "three"]


async def test_a_branch_another_gateway_made_meanwhile_is_where_the_call_goes(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """Two gateways on one database each get a first call naming the new branch ``trial``:
    the one whose fork the store refuses (the other made it a moment before) goes on that
    branch, where before the caller got a 400."""
    first, second = two_hosts
    raced = RacedStore(first, second, "trial")
    hello: list[Any] = [{"role": "user", "content": "hello"}]
    with serve(gateway_app(raced, simulator_client=sim.client())) as url:
        async with anthropic.AsyncAnthropic(
            base_url=url, api_key="mine", default_headers=AGENT, max_retries=0
        ) as client:
            first_reply = await client.messages.create(model=MODEL, max_tokens=64, messages=hello)
            answered: Any = {
                "role": "assistant",
                "content": [b.to_dict() for b in first_reply.content],
            }
            reply = await client.messages.create(
                model=MODEL,
                max_tokens=64,
                messages=[*hello, answered, {"role": "user", "content": "on trial"}],
                extra_headers={BRANCH_HEADER: "trial"},
            )
    assert reply.content[-1].type == "text"
    cm = stored(second)
    assert [b.name for b in cm.list_branches()] == ["main", "trial"]
    said = [m.role for m in cm.messages(branch="trial") if m.metadata.kind is None]
    assert said == ["user", "assistant", "user", "assistant"]


async def test_two_calls_of_one_agent_on_two_branches_at_once_are_both_recorded(
    sim: Simulator, store: Store
) -> None:
    """The gateway keeps one context per agent: a call on another branch, made while the first
    awaits its reply, moved it, and the first reply was not recorded (logged only)."""

    async def ask(url: str, branch: str) -> None:
        headers = {**AGENT, BRANCH_HEADER: branch}
        async with anthropic.AsyncAnthropic(
            base_url=url, api_key="mine", default_headers=headers, max_retries=0
        ) as client:
            await client.messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": branch}]
            )

    upstream = recording_upstream(sim, [], delay=0.2)
    with serve(upstream) as api, serve(gateway_app(store, upstream=api)) as url:
        await asyncio.gather(ask(url, "b1"), ask(url, "b2"))
    cm = stored(store)
    for branch in ("b1", "b2"):
        said = [m.role for m in cm.messages(branch=branch) if m.metadata.kind is None]
        assert said[-2:] == ["user", "assistant"], (branch, said)
    assert invalid_calls(sim) == []


async def test_a_call_that_names_no_agent_is_refused_with_the_apis_error_shape(
    store: Store, offline: str
) -> None:
    async with anthropic.AsyncAnthropic(base_url=offline, api_key="mine", max_retries=0) as client:
        with pytest.raises(anthropic.BadRequestError, match=AGENT_HEADER):
            await client.messages.create(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"messages": [{"role": "user", "content": 5}]}, "content 5 is not a string"),
        ({"messages": [{"role": "user", "content": None}]}, "content None is not a string"),
        ({"messages": [{"role": "user", "content": ["hi"]}]}, "content item 'hi' is neither"),
        ({"system": 5}, "system must be a list, got 5"),
        ({"tools": 5}, "tools must be a list, got 5"),
    ],
    ids=["content-number", "content-null", "bare-string-item", "system-number", "tools-number"],
)
async def test_a_body_of_the_wrong_shape_is_a_400_in_the_apis_shape_and_stores_nothing(
    store: Store, offline: str, change: dict[str, Any], says: str
) -> None:
    """The API refuses each of these with a 400; the gateway answered a 500 (its handler let
    the library's ``InvalidType`` through, or the reconcile failed on ``list(5)``)."""
    body = {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    async with anthropic.AsyncAnthropic(
        base_url=offline, api_key="mine", default_headers=AGENT, max_retries=0
    ) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            # the SDK's raw post: its create() would check some of these client-side
            await client.post("/v1/messages", body={**body, **change}, cast_to=object)

    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": ANY},
    }
    assert says in caught.value.message
    assert stored(store).messages() == []


def test_langchain_chat_anthropic_streams_a_tool_loop_through_the_gateway(
    sim: Simulator, store: Store, offline: str
) -> None:
    chat_models = pytest.importorskip("langchain_anthropic")
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def read_log() -> str:
        """Read the log."""
        return "all is well"

    llm = chat_models.ChatAnthropic(
        model=MODEL,
        base_url=offline,
        api_key="mine",
        max_tokens=1024,
        streaming=True,
        thinking={"type": "adaptive"},
        default_headers=AGENT,
        max_retries=0,
    ).bind_tools([read_log])
    history: list[Any] = []
    for run in range(2):
        history.append(HumanMessage(f"question {run}: please use read_log"))
        while True:
            system = SystemMessage(f"You are Ada, on run {run}.")
            reply = llm.invoke([system, *history])
            history.append(reply)
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:
                history.append(ToolMessage(read_log.invoke({}), tool_call_id=call["id"]))
    assert [call.status for call in sim.calls] == [200] * 4
    assert [call.dropped for call in sim.calls] == [()] * 4
    assert all(call.stream for call in sim.calls)
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(sim.requests[-1])) == 3  # every earlier reply's thinking
    assert len(stored(store).messages(kind="head-change")) == 1
    assert stored(store).messages(kind=REASONING_LOSS_KIND) == []


def test_the_sdks_own_tool_runner_streams_through_the_gateway(
    sim: Simulator, store: Store, offline: str
) -> None:
    @anthropic.beta_tool
    def read_log() -> str:
        """Read the log."""
        return "all is well"

    with anthropic.Anthropic(base_url=offline, api_key="mine", default_headers=AGENT) as client:
        runner = client.beta.messages.tool_runner(
            model=MODEL,
            max_tokens=1024,
            thinking={"type": "adaptive"},
            tools=[read_log],
            messages=[{"role": "user", "content": "please use read_log"}],
            stream=True,
        )
        for stream in runner:
            for _ in stream:
                pass
    assert len(sim.calls) == 2
    assert all(call.stream for call in sim.calls)
    assert [call.status for call in sim.calls] == [200, 200]
    assert invalid_calls(sim) == []
    in_flight = sim.requests[-1]["messages"][1]
    assert [b["type"] for b in in_flight["content"]] == ["thinking", "tool_use"]
    assert [m.role for m in stored(store).messages()] == ["user", "assistant"] * 2


def recording_upstream(sim: Simulator, seen: list[dict[str, str]], delay: float = 0.0) -> Any:
    """An upstream Messages API: the simulator, behind an app that records request headers
    (and answers after ``delay`` seconds, so calls overlap)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def answer(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen.append(headers)
        await asyncio.sleep(delay)
        reply = sim.handle("POST", request.url.path, headers, await request.body())
        kept = {k: v for k, v in reply.headers if k != "content-length"}
        return Response(reply.body, status_code=reply.status, headers=kept)

    paths = ("/v1/messages", "/v1/messages/count_tokens")
    return Starlette(routes=[Route(p, answer, methods=["POST"]) for p in paths])


async def test_calls_are_forwarded_with_the_callers_own_key_and_no_other(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "the-gateways-own-key")
    seen: list[dict[str, str]] = []
    store = MemoryStore()
    with (
        serve(recording_upstream(sim, seen)) as upstream,
        serve(gateway_app(store, upstream=upstream, agent="ada")) as url,
    ):
        raw = httpx2.post(
            f"{url}/v1/messages",
            headers={"x-api-key": "the-callers-key", "anthropic-version": "2023-06-01"},
            json={
                "model": MODEL,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
    assert raw.status_code == 200
    assert raw.json()["content"][-1]["text"] == "You said: hi"
    assert seen[0]["x-api-key"] == "the-callers-key"
    assert "the-gateways-own-key" not in json.dumps(seen)
    assert "authorization" not in seen[0]
    assert len(stored(store).messages()) == 2


async def test_an_upstream_refusal_is_answered_with_its_own_status_and_body(
    sim: Simulator,
) -> None:
    seen: list[dict[str, str]] = []
    sim.fail_next(1, 429)
    with (
        serve(recording_upstream(sim, seen)) as upstream,
        serve(gateway_app(MemoryStore(), upstream=upstream, agent="ada")) as url,
    ):
        raw = httpx2.post(
            f"{url}/v1/messages",
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
            json={
                "model": MODEL,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "hi"}],
            },
        )
    assert raw.status_code == 429
    assert raw.json()["error"]["type"] == "rate_limit_error"


def test_the_command_refuses_an_address_that_is_not_loopback(tmp_path: Any) -> None:
    done = cli("gateway", "--db", tmp_path / "g.db", "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "not loopback" in done.stderr


def test_the_command_serves_offline_from_the_simulator_and_keeps_the_transcript(
    tmp_path: Any,
) -> None:
    port = free_port()
    database = tmp_path / "g.db"
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    command = ["gateway", "--db", str(database), "--port", str(port)]
    server = subprocess.Popen(
        [sys.executable, "-m", "context_manager", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert server.stdout is not None
        assert "the local simulator (offline)" in server.stdout.readline()
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx2.post(
                    f"http://127.0.0.1:{port}/v1/messages",
                    headers={
                        AGENT_HEADER: "ada",
                        BRANCH_HEADER: "trial",
                        "x-api-key": "anything",
                        "anthropic-version": "2023-06-01",
                    },
                    json={
                        "model": MODEL,
                        "max_tokens": 64,
                        "messages": [{"role": "user", "content": "hello"}],
                    },
                )
                break
            except httpx2.ConnectError:
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.1)
        assert answer.status_code == 200
        assert answer.json()["content"][-1]["text"] == "You said: hello"
    finally:
        server.terminate()
        server.communicate(timeout=20)
    store = SQLiteStore(database)
    cm = ContextManager.open(store, namespace="ada")
    assert cm.current_branch().name == "trial"
    assert [m.role for m in cm.messages()] == ["user", "assistant"]
    store.close()


async def test_pydantic_ai_by_base_url_through_the_gateway_keeps_every_replys_thinking(
    sim: Simulator, store: Store
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, RunContext
    from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
    from pydantic_ai.providers.anthropic import AnthropicProvider

    def read_log() -> str:
        """Read the log."""
        return "all is well"

    app = gateway_app(store, agent="ada", simulator_client=sim.client())
    with serve(app) as url:
        provider = AnthropicProvider(base_url=url, api_key="mine")
        settings = AnthropicModelSettings(anthropic_thinking={"type": "adaptive"}, max_tokens=512)
        agent: Agent[int, str] = Agent(
            AnthropicModel(MODEL, provider=provider),
            deps_type=int,
            tools=[read_log],
            model_settings=settings,
        )

        @agent.instructions
        def name_the_run(ctx: RunContext[int]) -> str:
            return f"You are Ada, on run {ctx.deps}."

        history = None
        for run in range(2):
            result = await agent.run("use read_log", deps=run, message_history=history)
            history = result.all_messages()
        await provider.client.close()
    assert [call.status for call in sim.calls] == [200] * 4
    assert [call.dropped for call in sim.calls] == [()] * 4
    assert len(thinking_signatures(sim.requests[-1])) == 3
    assert invalid_calls(sim) == []


def test_a_long_call_the_caller_sends_without_streaming_is_answered(
    sim: Simulator, store: Store, offline: str
) -> None:
    """LiteLLM (the Agents SDK's route to Claude) sends a large ``max_tokens`` without
    streaming; the API takes it, so the gateway does too (the ``anthropic`` SDK's own
    client-side refusal of long non-streaming calls is the caller's choice, not the gateway's)."""
    raw = httpx2.post(
        f"{offline}/v1/messages",
        headers={"x-api-key": "mine", "anthropic-version": "2023-06-01", **AGENT},
        json={
            "model": MODEL,
            "max_tokens": 64000,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert raw.status_code == 200
    assert [call.status for call in sim.calls] == [200]
    assert sim.requests[0]["max_tokens"] == 64000


CONTAINER = {"id": "container_1", "expires_at": "2026-04-24T11:19:38.758845Z"}
"""What a code execution reply carries beside its content: its container and when it expires."""

UPSTREAM_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [{"type": "text", "text": "Done."}],
    "container": CONTAINER,
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 2},
}


def upstream_events() -> bytes:
    """``UPSTREAM_REPLY`` as the API streams it, the container on its ``message_delta``."""
    start = {**UPSTREAM_REPLY, "content": [], "container": None, "stop_reason": None}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Done."},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None, "container": CONTAINER},
            "usage": {"output_tokens": 2},
        },
        {"type": "message_stop"},
    ]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def api_answering_with_a_container(request: httpx2.Request) -> httpx2.Response:
    if json.loads(request.content).get("stream"):
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, content=upstream_events(), headers=headers)
    return httpx2.Response(200, json=UPSTREAM_REPLY)


async def test_a_reply_carrying_a_date_is_answered_whole_as_json_and_as_a_stream(
    store: Store,
) -> None:
    """A code execution reply's container expiry is a date to the SDK; the gateway answered
    such a reply with a 500, and cut its stream before the last two events (found replaying
    pydantic-ai's recorded code execution calls)."""
    api = anthropic.AsyncAnthropic(
        api_key="x",
        http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(api_answering_with_a_container)
        ),
        max_retries=0,
    )
    ask: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Run it."}],
    }
    with serve(gateway_app(store, simulator_client=api)) as url:
        async with anthropic.AsyncAnthropic(
            base_url=url, api_key="mine", default_headers=AGENT, max_retries=0
        ) as client:
            reply = await client.beta.messages.create(**ask)
            async with client.beta.messages.stream(**ask) as stream:
                streamed = await stream.get_final_message()

    assert reply.to_dict(mode="json")["container"] == CONTAINER
    assert streamed.to_dict(mode="json")["container"] == CONTAINER
    recorded = stored(store).messages()  # the same question again: a new branch, recorded too
    assert [(m.role, m.content[0].text) for m in recorded] == [  # type: ignore[union-attr]
        ("user", "Run it."),
        ("assistant", "Done."),
    ]


def test_gateway_app_without_starlette_says_how_to_install_the_gateway_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in sys.modules if n == "starlette" or n.startswith("starlette.")]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it fails, as when not installed
    with pytest.raises(ImportError) as raised:
        gateway_app(MemoryStore())
    assert str(raised.value) == (
        "the gateway needs starlette and uvicorn: pip install 'thinking-context-manager[gateway]'"
    )
    assert isinstance(raised.value, ModuleNotFoundError)  # what it raised before, still caught
