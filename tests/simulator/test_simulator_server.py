"""The simulator on loopback: the SDK over real sockets, streams included; clean start and stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from context_manager.simulator import BINDING_BETA, PREFIX_MISMATCH, Simulator, SimulatorServer

MODEL = "claude-sim-1"
REPO = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_SECONDS = 30


def request(messages: list[Any], **head: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 4096,
        "system": "You are Ada.",
        "thinking": {
            "type": "adaptive",
            "block_binding": {"prefix_mismatch_behavior": "drop_block"},
        },
        "betas": [BINDING_BETA],
        "messages": messages,
        **head,
    }


def wire(message: anthropic.types.beta.BetaMessage) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [b.model_dump(exclude_none=True) for b in message.content],
    }


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


@pytest.fixture
def url(sim: Simulator) -> Iterator[str]:
    with sim.serve(host="127.0.0.1", port=0) as base_url:
        yield base_url


def connect_refused(base_url: str) -> bool:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return False
    except OSError:
        return True


async def test_create_and_stream_over_loopback_keep_a_history_verified(
    sim: Simulator, url: str
) -> None:
    async with anthropic.AsyncAnthropic(base_url=url, api_key="sim", max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": "first"}]
        created = await client.beta.messages.create(**request(messages))
        messages += [wire(created), {"role": "user", "content": "second"}]
        async with client.beta.messages.stream(**request(messages)) as stream:
            streamed = await stream.get_final_message()
        messages += [streamed.to_param(), {"role": "user", "content": "third"}]
        kept = await client.beta.messages.create(**request(messages))
        changed = await client.beta.messages.create(**request(messages, system="Be brief."))

    assert url.startswith("http://127.0.0.1:")
    assert [b.type for b in streamed.content] == ["thinking", "text"]
    assert wire(streamed)["content"][1]["text"] == "You said: second"
    assert (created.input_transformations, streamed.input_transformations) == ([], [])
    assert kept.input_transformations == []
    assert [(t.path, t.reason) for t in changed.input_transformations or []] == [
        ("messages.1.content.0", PREFIX_MISMATCH),
        ("messages.3.content.0", PREFIX_MISMATCH),
    ]
    assert [c.stream for c in sim.calls] == [False, True, False, False]


async def test_refusals_and_failures_arrive_over_loopback_in_the_api_shape(
    sim: Simulator, url: str
) -> None:
    sim.fail_next(1, status=429)
    async with anthropic.AsyncAnthropic(base_url=url, api_key="sim", max_retries=0) as client:
        with pytest.raises(anthropic.RateLimitError, match="rate_limit_error"):
            await client.beta.messages.create(**request([{"role": "user", "content": "hi"}]))
        with pytest.raises(anthropic.BadRequestError, match="messages: at least one message"):
            await client.beta.messages.create(**request([]))


def test_the_server_serves_concurrent_clients(sim: Simulator, url: str) -> None:
    def one(n: int) -> str:
        with anthropic.Anthropic(base_url=url, api_key="sim", max_retries=0) as client:
            reply = client.beta.messages.create(**request([{"role": "user", "content": f"n{n}"}]))
        return str(wire(reply)["content"][1]["text"])

    async def all_of_them() -> list[str]:
        return await asyncio.gather(*(asyncio.to_thread(one, n) for n in range(8)))

    texts = asyncio.run(all_of_them())

    assert sorted(texts) == sorted(f"You said: n{n}" for n in range(8))
    assert len(sim.calls) == 8
    sim._check()


def test_stop_releases_the_port_and_is_idempotent(sim: Simulator) -> None:
    server = sim.server(port=0)
    base_url = server.start()
    with anthropic.Anthropic(base_url=base_url, api_key="sim", max_retries=0) as client:
        client.beta.messages.create(**request([{"role": "user", "content": "hi"}]))

    server.stop()
    server.stop()

    assert connect_refused(base_url)
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.url


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_only_loopback_addresses_can_be_bound(sim: Simulator, host: str) -> None:
    with pytest.raises(ValueError, match=f"binds only to loopback; '{host}' is not a loopback"):
        SimulatorServer(sim, host=host)


def test_the_module_command_serves_until_terminated() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-m", "context_manager.simulator", "--host", "127.0.0.1", "--port", "0"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            base_url = process.stdout.readline().strip()
            with anthropic.Anthropic(base_url=base_url, api_key="sim", max_retries=0) as client:
                reply = client.beta.messages.create(**request([{"role": "user", "content": "hi"}]))
        finally:
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=SUBPROCESS_TIMEOUT_SECONDS)

    assert base_url.startswith("http://127.0.0.1:")
    assert reply.content[1].text == "You said: hi"
    assert returncode == 0
    assert connect_refused(base_url)
