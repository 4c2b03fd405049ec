"""The gateway: a local Messages API any client reaches by its base URL; here the plain SDK.

``context-manager gateway --db agents.db`` is the same app on port 8787; this script serves it
in-process on a free loopback port, with no upstream, so the simulator answers (no key, no
network). The ``system`` prompt changes between the calls: the gateway appends the change instead
of rewriting the head, so the first reply's thinking is still valid when it goes back.
Run it: ``python examples/gateway.py`` (needs ``pip install '.[gateway]'``). It prints::

    You said: The nightly build failed. What changed?
    You said: Roll it back?
    2 replies recorded, 2 with their signed thinking
    system or tools changes appended: 1
    reasoning lost: none
"""

import tempfile
from pathlib import Path

import anthropic
from _helpers import report, serve

from context_manager import SQLiteStore
from context_manager.adapters import AGENT_HEADER, gateway_app

with tempfile.TemporaryDirectory() as scratch:
    store = SQLiteStore(Path(scratch) / "agents.db")
    app = gateway_app(store)  # no upstream: the simulator answers, whatever key is sent
    with serve(app) as url:
        client = anthropic.Anthropic(
            base_url=url,
            api_key="your key (the gateway sends it upstream, never stores it)",
            default_headers={AGENT_HEADER: "ada"},  # which agent's transcript the call is
        )
        messages: list[anthropic.types.MessageParam] = []
        for system, question in [
            ("You are Ada.", "The nightly build failed. What changed?"),
            ("You are Ada, on call tonight.", "Roll it back?"),  # appended, not rewritten
        ]:
            messages.append({"role": "user", "content": question})
            with client.messages.stream(
                model="claude-opus-5-5",
                max_tokens=1024,
                system=system,
                thinking={"type": "adaptive"},
                messages=messages,
            ) as stream:
                reply = stream.get_final_message()
                print(stream.get_final_text())
            messages.append({"role": "assistant", "content": reply.content})
    for line in report(app.state.gateway.agents, "ada"):
        print(line)
    store.close()
