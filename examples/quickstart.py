"""Quickstart: one agent's transcript on SQLite, forked into a second branch.

Run it after ``pip install .``:  python examples/quickstart.py
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import structlog

from context_manager import ContextManager, SQLiteStore, TextBlock, ThinkingBlock, ToolUseBlock


def show(cm: ContextManager, branch: str) -> None:
    """Print the messages ``branch`` sees, oldest first."""
    print(f"branch {branch!r}:")
    for message in cm.messages(branch=branch):
        parts = []
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ThinkingBlock):
                parts.append("[signed thinking]")
            elif isinstance(block, ToolUseBlock):
                parts.append(f"[calls {block.name}]")
        print(f"  #{message.sequence:<3} {message.role:<9} {' '.join(parts)}")


def main() -> None:
    # The library logs through structlog; a host picks the level. Keep warnings and up here.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as scratch:
        store = SQLiteStore(Path(scratch) / "agent.db")
        try:
            cm = ContextManager.open(store, namespace="ada")
            cm.add_message("user", "The nightly build failed. What changed?")
            cm.add_message(
                "assistant",
                [
                    # As the API returns it with display omitted: empty text, a signature.
                    ThinkingBlock("", "EqQBCkYIBxgCKkD3mZ9a1nY2Vb0x8wQy"),
                    TextBlock("The lockfile moved to a new minor release of the parser."),
                ],
            )
            cm.add_message("user", "Pin it back for now.")

            cm.fork("experiment")  # branch at the current head and switch to it
            cm.add_message("user", "Instead, try the new release with the fixed config.")
            cm.add_message(
                "assistant",
                [{"type": "tool_use", "id": "toolu_01", "name": "run_build", "input": {}}],
            )
            cm.switch_branch("main")
            cm.add_message("assistant", "Pinned. The nightly build is green again.")

            show(cm, "main")
            show(cm, "experiment")
            key, head = cm.branch_head()
            print(f"current branch {cm.current_branch().name!r} (key {key}), head #{head}")
        finally:
            store.close()


if __name__ == "__main__":
    main()
