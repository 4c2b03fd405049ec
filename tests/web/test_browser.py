"""The console in a real headless Chromium (Selenium, the distribution's chromedriver).

Skipped with a reason when Chromium, chromedriver or Selenium is missing; with
``CONTEXT_MANAGER_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets) a missing browser fails instead.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from helpers import FAST_RETRY, PROBE_HEAD, SUMMARIZED, slow_client

from context_manager import ContextManager
from context_manager._cli import run_demo, sidecar_path
from context_manager._reasoning import ReasoningCapture, SQLiteReasoningStore, read_reasoning
from context_manager._store._sqlite import SQLiteStore
from context_manager.runtime import Agent, Runtime
from context_manager.simulator import Simulator
from context_manager.web import NOT_FOUND, Access, ConsoleServer, StoreSource, create_app

CHROMIUM = os.environ.get("CONTEXT_MANAGER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CONTEXT_MANAGER_CHROMEDRIVER", "/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,2000",
)
OWNER, BOB, CAROL = "owner-token-0123456789", "bob-token-0123456789", "carol-token-0123456789"
TOKENS = f"{OWNER} alice *\n{BOB} bob ada\n{CAROL} carol other\n"
THOUGHT = "Weighing the nightly build's failure: the parser step broke after the merge, so look."
HEAD = attrs.evolve(PROBE_HEAD, settings={"max_tokens": 2048, "thinking": SUMMARIZED})


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install '.[test]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (Path(path).is_file() or shutil.which(path)):
            return f"{path} is missing (apt-get install {package})"
    return None


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One headless Chromium for the module, with a fresh profile, never Selenium Manager."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CONTEXT_MANAGER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CONTEXT_MANAGER_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(20)
    try:
        yield browser
    finally:
        browser.quit()


async def visit(driver: Any, url: str) -> str:
    """Open ``url`` (in a thread: the console serves from this loop) and return its HTML."""

    def go() -> str:
        driver.get(url)
        return str(driver.page_source)

    return await asyncio.to_thread(go)


async def wait_for(driver: Any, script: str, timeout: float = 10) -> Any:
    """Poll ``script`` (JavaScript returning a value) until it is truthy."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await asyncio.to_thread(driver.execute_script, script)
        if value or loop.time() > end:
            return value
        await asyncio.sleep(0.05)


async def status_of(driver: Any, path: str) -> int:
    """The HTTP status the page's own ``fetch`` gets for ``path`` (the browser's cookie)."""
    script = (
        "const done = arguments[arguments.length - 1];"
        f"fetch({path!r}, {{credentials: 'same-origin'}}).then(r => done(r.status));"
    )
    return int(await asyncio.to_thread(driver.execute_async_script, script))


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    path = tmp_path / "demo.db"
    run_demo(argparse.Namespace(db=str(path)), io.StringIO(), color=False)
    return path


def demo_reasoning(store: SQLiteStore, sidecar: SQLiteReasoningStore) -> list[str]:
    cm = ContextManager.open(
        store, namespace="ada", reasoning=ReasoningCapture(sidecar, capture=False)
    )
    texts: list[str] = []
    for branch in cm.list_branches():
        for message in cm.messages(branch=branch.name):
            if message.role == "assistant":
                found = read_reasoning(cm, message_id=message.id)
                texts.extend(p.text.value for p in found.parts if p.text and p.text.value)
    return texts


async def test_the_console_shows_a_demo_transcript_with_every_line_form_and_marker(
    driver: Any, demo_db: Path, tmp_path: Path
) -> None:
    store = SQLiteStore(demo_db)
    sidecar = SQLiteReasoningStore(sidecar_path(demo_db))
    try:
        reasoning = demo_reasoning(store, sidecar)
        app = create_app(StoreSource(store, sidecar), Access.parse(TOKENS))
        async with ConsoleServer(app) as console:
            await asyncio.to_thread(driver.delete_all_cookies)
            await visit(driver, f"{console.url}/?token={OWNER}")
            agents = await asyncio.to_thread(
                driver.execute_script, "return document.body.innerText"
            )
            html, forms, text = "", [], ""
            for branch in ("imported", "main"):  # main last: the screenshot's page
                html += await visit(driver, f"{console.url}/agents/ada?branch={branch}")
                forms += await asyncio.to_thread(
                    driver.execute_script,
                    "return [...document.querySelectorAll('#transcript .line')]"
                    ".map(e => e.classList[1])",
                )
                text += await asyncio.to_thread(  # closed rounds' words too
                    driver.execute_script, "return document.body.textContent"
                )
            rounds = await asyncio.to_thread(
                driver.execute_script, "return document.querySelectorAll('details.round').length"
            )
            await asyncio.to_thread(driver.save_screenshot, str(tmp_path / "transcript.png"))
            button = await asyncio.to_thread(
                driver.execute_script,
                "const b = document.querySelector('button.show-reasoning'); b.click(); return 1",
            )
            shown = await wait_for(
                driver,
                "const p = document.querySelector('pre.reasoning');"
                "return !p.hidden && p.textContent",
            )
    finally:
        sidecar.close()
        store.close()
    assert "ada" in agents
    assert {"user", "assistant", "results", "reasoning", "head-change", "summary"} <= set(forms)
    for words in (
        "head form",
        "count form",
        "at least form",
        "strip cause: tools",
        "strip before this call: 2 blocks of 2 replies left out, cause head (tools)",
        "cause messages",
        "signed …",
        "left out",
        "released",
        "dropped (prefix)",
        "dropped (organization)",
        "dropped (model)",
        "omitted",
        "tool_addition + grep",
        "fold summary",
        "Tokens per turn",
    ):
        assert words in text, words
    assert "<svg" in html
    assert rounds >= 1
    assert reasoning  # the demo captured readable reasoning ...
    assert not [t for t in reasoning if t in html or t in text]  # ... no page embeds any
    assert button == 1
    assert any(t in shown for t in reasoning)  # shown on request, to the owner
    assert (tmp_path / "transcript.png").stat().st_size > 10_000


def thinking_script(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "thinking", "thinking": THOUGHT}, {"type": "text", "text": "Done."}]


LIVE_TEXT = "return document.getElementById('live-text').textContent"


async def test_live_reasoning_streams_to_the_page_and_a_page_opened_mid_call_catches_up(
    driver: Any,
) -> None:
    gate = asyncio.Event()
    sim = Simulator(script=thinking_script)
    from context_manager import MemoryStore

    runtime = Runtime(slow_client(sim, gate, after=2), MemoryStore(), retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", HEAD))
    async with runtime.serve(Access.parse(TOKENS)) as console:
        await asyncio.to_thread(driver.delete_all_cookies)
        await visit(driver, f"{console.url}/agents/ada?token={OWNER}")
        watching = await asyncio.to_thread(lambda: driver.current_window_handle)
        turn = asyncio.create_task(agent.run_turn("why did the build fail?", asker="bob"))
        first = await wait_for(driver, LIVE_TEXT)  # streamed to the open page as it came
        partial = agent.live.partial()
        assert partial is not None
        assert partial.text is not None
        await asyncio.to_thread(driver.switch_to.new_window, "tab")
        await visit(driver, f"{console.url}/agents/ada?token={BOB}")  # the asker, mid-call
        caught_up = await wait_for(driver, LIVE_TEXT)
        status = await asyncio.to_thread(
            driver.execute_script, "return document.getElementById('live-status').textContent"
        )
        gate.set()
        await turn
        finished = await wait_for(
            driver, f"const t = {LIVE_TEXT[7:]}; return t.length >= {len(THOUGHT)} && t"
        )
        await asyncio.to_thread(driver.close)
        await asyncio.to_thread(driver.switch_to.window, watching)
        watched = await wait_for(
            driver, f"const t = {LIVE_TEXT[7:]}; return t.length >= {len(THOUGHT)} && t"
        )
    assert first
    assert THOUGHT.startswith(first)
    assert len(first) < len(THOUGHT)  # shown while the stream was held mid-thinking
    assert caught_up == partial.text.value
    assert status.startswith("streaming (caught up)")
    assert finished == THOUGHT
    assert watched == THOUGHT


async def test_a_non_owner_gets_404_on_another_askers_reasoning_and_on_the_stream(
    driver: Any,
) -> None:
    runtime = Runtime(Simulator(script=thinking_script).client(), _memory(), retry=FAST_RETRY)
    agent = runtime.register(Agent("ada", HEAD))
    by_alice = (await agent.run_turn("status?", asker="alice")).replies[0]
    by_bob = (await agent.run_turn("and now?", asker="bob")).replies[0]
    async with runtime.serve(Access.parse(TOKENS)) as console:
        await asyncio.to_thread(driver.delete_all_cookies)
        page = await visit(driver, f"{console.url}/agents/ada?token={BOB}")
        statuses = [
            await status_of(driver, f"/agents/ada/reasoning?cursor={by_alice}"),
            await status_of(driver, f"/agents/ada/reasoning?cursor={by_bob}"),
            await status_of(driver, "/agents/nobody/live"),
        ]
        buttons = await asyncio.to_thread(
            driver.execute_script,
            "return document.querySelectorAll('button.show-reasoning').length",
        )
        await asyncio.to_thread(driver.delete_all_cookies)
        await visit(driver, f"{console.url}/?token={CAROL}")
        carol = [
            await status_of(driver, "/agents/ada/live"),
            await status_of(driver, f"/agents/ada/reasoning?cursor={by_bob}"),
            await status_of(driver, "/agents/ada"),
        ]
        hidden = await visit(driver, f"{console.url}/agents/ada/live")
    assert THOUGHT not in page
    assert statuses == [404, 200, 404]
    assert buttons == 1  # bob is offered his own turn's reasoning only
    assert carol == [404, 404, 404]
    assert NOT_FOUND in hidden


def _memory() -> Any:
    from context_manager import MemoryStore

    return MemoryStore()
