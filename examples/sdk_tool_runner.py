"""The ``anthropic`` SDK's own tool runner, streaming through the gateway.

The runner asks for a server-held thread first; the gateway answers as the API does for a server
that holds none (``thread_unsupported_request``), and the runner sends the whole history instead,
so the library chooses what is sent: the open tool round's thinking goes back as recorded. The
gateway runs in-process with no upstream (the simulator answers: no key, no network). Run it:
``python examples/sdk_tool_runner.py`` (needs ``pip install '.[gateway]'``). It prints::

    read_log called
    Done.
    2 replies recorded, 2 with their signed thinking
    system or tools changes appended: 0
    reasoning lost: none
"""

import tempfile
from pathlib import Path

import anthropic
from _helpers import report, serve

from context_manager import SQLiteStore
from context_manager.adapters import AGENT_HEADER, gateway_app


@anthropic.beta_tool
def read_log() -> str:
    """Read the service log."""
    print("read_log called")
    return "all quiet since 12:05"


with tempfile.TemporaryDirectory() as scratch:
    store = SQLiteStore(Path(scratch) / "agents.db")
    app = gateway_app(store)  # `context-manager gateway --db agents.db`, in-process
    with serve(app) as url:
        client = anthropic.Anthropic(
            base_url=url,
            api_key="your key (sent upstream as is)",
            default_headers={AGENT_HEADER: "ada"},
        )
        runner = client.beta.messages.tool_runner(
            model="claude-opus-5-5",
            max_tokens=1024,
            thinking={"type": "adaptive"},
            tools=[read_log],
            messages=[{"role": "user", "content": "What changed overnight? Use read_log."}],
            stream=True,
        )
        for stream in runner:  # one stream per model call; the runner runs the tools between
            reply = stream.get_final_message()
        print(*(block.text for block in reply.content if block.type == "text"))
    for line in report(app.state.gateway.agents, "ada"):
        print(line)
    store.close()
