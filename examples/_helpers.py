"""What the framework examples share: the gateway served in-process, and what the library recorded.

``serve(app)`` runs an ASGI app (here ``gateway_app(store)``) under uvicorn in a thread, on a free
loopback port, and stops it on leaving the block: in your own setup run ``context-manager gateway
--db agents.db`` instead and point your client at ``http://127.0.0.1:8787``. ``report(agents,
name)`` reads the agent's transcript: its replies, their signed thinking, the head changes
appended, and every ``[reasoning]`` line the library told (or holds for the next call) when
reasoning was lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from context_manager import REASONING_LOSS_KIND, TextBlock, ThinkingBlock
from context_manager.adapters import ManagedAgents


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on ``127.0.0.1`` (a port the system picks) until the block ends; its URL."""
    import uvicorn  # the gateway extra; the managed client's examples need none of it

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def report(agents: ManagedAgents, name: str) -> list[str]:
    """Three lines on agent ``name``: its replies and their signed thinking, the ``system`` or
    ``tools`` changes appended (none rewrote the head), and what reasoning was lost."""
    cm = agents.context(name)
    replies = [m for m in cm.messages() if m.role == "assistant"]
    signed = [
        m for m in replies if any(isinstance(b, ThinkingBlock) and b.signature for b in m.content)
    ]
    notices = cm.messages(kind=REASONING_LOSS_KIND)
    told = [b.text for m in notices for b in m.content if isinstance(b, TextBlock)]
    lost = [*told, *agents.waiting(name)]
    return [
        f"{len(replies)} replies recorded, {len(signed)} with their signed thinking",
        f"system or tools changes appended: {len(cm.messages(kind='head-change'))}",
        "reasoning lost: " + (" ".join(lost) if lost else "none"),
    ]
