"""Deterministic agent histories in SQLite: user words, signed replies, tool rounds, from a seed.

Every reply is compiled then recorded (so the compiler stamps it), and its thinking is signed by the
simulator's own signing function against the request as sent: the simulator verifies every block.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from context_manager import (
    CompileResult,
    ContextManager,
    Head,
    MessageId,
    Store,
    TextBlock,
    ThinkingBinding,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    estimate_tokens,
)
from context_manager.simulator import DEFAULT_KEY, DEFAULT_ORGANIZATION
from context_manager.simulator._canon import (
    CHAIN_START,
    chain_step,
    head_digest,
    normalize_content,
    strip_cache_control,
)
from context_manager.simulator._sign import NONCE_BYTES, Binding, block_digest, sign

MODEL = "claude-opus-5-5"
"""The model every benchmark head names: one that runs the prefix check (provider rule 10), so
every block is judged in full (a model that runs none is judged by the model check alone)."""

BINDING = ThinkingBinding(binds=True, drop_block=True, append_changes=False)
"""The binding a resident agent runs with: judge every block, let the provider drop, not refuse;
a head change is not appended (SPEC 7b) but re-renders the window, the worst case measured
(``benchmarks/_append.py`` measures appending)."""

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "read_log",
        "description": "Read lines from the service log.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
    {
        "name": "search_docs",
        "description": "Search the runbooks.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
)

TOOL_ROUND_WEIGHTS = (50, 25, 15, 10)
"""How many tool rounds a turn takes (0, 1, 2, 3): half the turns call no tool, as in a chat."""

USER_WORDS = (8, 60)
THINKING_WORDS = (20, 80)
LEAD_WORDS = (5, 20)
ANSWER_WORDS = (10, 60)
QUERY_WORDS = (2, 6)
RESULT_WORDS = (20, 120)
"""Word counts (fewest, most) of each kind of text: a few sentences, like a working chat."""

SIGNATURE_CHARS = 200
"""Length of a simulator signature for this model and organization (150 bytes, base64)."""

GENERATION_BATCH = 5_000
"""Messages written per durable commit while a history is generated (one fsync per batch)."""

_SIGNER_SALT = 0x5167
"""Keeps the nonce stream apart from the words stream of the same seed."""

_TEXT = """
    the service restarted after a deploy and the error rate climbed for ten minutes before the
    queue drained we should check which worker held the lock and whether the retry budget was
    spent the log shows timeouts against the database replica in the second region while the
    primary stayed healthy a config change raised the pool size but the migration ran twice so
    rows were locked longer than the health check allowed the alert fired and paged the on call
    engineer who rolled back the release then the latency returned to normal except for a few
    slow requests from a batch job that scans every account at midnight read the runbook about
    cache warming and confirm the fix with a canary before the weekend freeze starts tomorrow
"""
_WORDS = tuple(_TEXT.split())


def make_head(*, model: str = MODEL, system: str = "You are Ada, an on-call assistant.") -> Head:
    """The head every benchmark agent compiles under (thinking on, two tools)."""
    return Head(
        model=model,
        system=system,
        tools=list(TOOLS),
        settings={"max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 2048}},
    )


class Words:
    """A seeded source of message text (the only randomness in a history besides nonces)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def text(self, low: int, high: int) -> str:
        """Between ``low`` and ``high`` words."""
        return " ".join(self._rng.choices(_WORDS, k=self._rng.randint(low, high)))

    def rounds(self) -> int:
        """Tool rounds the next turn takes."""
        return self._rng.choices(range(len(TOOL_ROUND_WEIGHTS)), TOOL_ROUND_WEIGHTS)[0]

    def tool(self) -> str:
        return str(self._rng.choice(TOOLS)["name"])


def _last_thinking(messages: Sequence[dict[str, Any]]) -> bytes | None:
    """The predecessor digest a new reply's first block records: the newest thinking block sent."""
    for message in reversed(messages):
        content = message["content"]
        for block in reversed(content if isinstance(content, list) else []):
            if block.get("type") == "thinking":
                return block_digest("thinking", block["signature"])
            if block.get("type") == "redacted_thinking":
                return block_digest("redacted_thinking", block["data"])
    return None


def _same(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """The same message object, or equal to it with cache breakpoints left out."""
    return one is other or strip_cache_control(one) == strip_cache_control(other)


class Signer:
    """Signs a reply's thinking as the simulator would, bound to the request as compiled.

    Keeps the simulator's chain over the last request's messages so signing the next reply costs
    O(new messages): a steady compile only appends to (or merges into the end of) its messages,
    and a re-render makes every message new (checked by identity).
    """

    def __init__(self, head: Head, seed: int) -> None:
        self._family = head.model
        self._head = head_digest(head.system, list(head.tools))
        self._rng = random.Random(seed ^ _SIGNER_SALT)
        self._sent: list[dict[str, Any]] = []
        self._chains: list[bytes] = []

    def chain(self, messages: list[dict[str, Any]]) -> bytes:
        """The simulator's chain after ``messages`` (a compiled request's, as sent).

        A message the compile marked with a cache breakpoint is a fresh copy each time; markers
        never enter the chain, so a copy equal to the message sent before, markers aside, counts
        as the same message.
        """
        same = 0
        if self._sent and messages and _same(messages[0], self._sent[0]):
            same = min(len(messages), len(self._sent))
            while same > 0 and not _same(messages[same - 1], self._sent[same - 1]):
                same -= 1
        del self._chains[same:]
        chain = self._chains[-1] if self._chains else CHAIN_START
        for message in messages[same:]:
            for block in normalize_content(message["content"]):
                if block.get("type") not in ("thinking", "redacted_thinking"):
                    chain = chain_step(chain, message["role"], block)
            self._chains.append(chain)
        self._sent = messages
        return chain

    def thinking(self, result: CompileResult, text: str) -> ThinkingBlock:
        """A thinking block opening the reply to ``result``, signed against its request."""
        messages = result.request["messages"]
        binding = Binding(
            self._family,
            DEFAULT_ORGANIZATION,
            "",
            self._head,
            self.chain(messages),
            _last_thinking(messages),
        )
        nonce = self._rng.randbytes(NONCE_BYTES)
        signature = sign(DEFAULT_KEY, binding, block_type="thinking", own_text=text, nonce=nonce)
        return ThinkingBlock(text, signature)


class History:
    """One agent's transcript, grown turn by turn in ``store`` under ``namespace``.

    Args:
        store: where it lives (a ``SQLiteStore`` on disk in the benchmarks).
        namespace: the agent.
        strategy: the agent's selection strategy (``Window`` in most scenarios).
        seed: fixes every word and nonce.
    """

    def __init__(
        self, store: Store, namespace: str, strategy: Any, *, seed: int, count: int = 0
    ) -> None:
        self.namespace = namespace
        self.strategy = strategy
        self.head = make_head()
        self.words = Words(seed)
        self.signer = Signer(self.head, seed)
        self.count = count
        """Messages stored in this namespace (``count`` already there, plus what this adds)."""
        self._tool_ids = 0
        self._seed = seed
        self.attach(store)

    def attach(self, store: Store) -> None:
        """Continue on ``store`` (the same file reopened): a new ``ContextManager``, cold cache."""
        self.store = store
        self.cm = ContextManager.open(
            store, namespace=self.namespace, binding=BINDING, strategy=self.strategy
        )

    def user(self) -> MessageId:
        """Store one user message."""
        self.count += 1
        return self.cm.add_message("user", [TextBlock(self.words.text(*USER_WORDS))])

    def reply(self, result: CompileResult, *, tool: bool) -> list[str]:
        """Record a signed reply to ``result``; returns the ids of the tools it calls."""
        blocks: list[Any] = [self.signer.thinking(result, self.words.text(*THINKING_WORDS))]
        called: list[str] = []
        if tool:
            blocks.append(TextBlock(self.words.text(*LEAD_WORDS)))
            self._tool_ids += 1
            called.append(f"toolu_{self._seed % 1000:03d}_{self._tool_ids:010d}")
            blocks.append(
                ToolUseBlock(called[0], self.words.tool(), {"query": self.words.text(*QUERY_WORDS)})
            )
        else:
            blocks.append(TextBlock(self.words.text(*ANSWER_WORDS)))
        self.cm.record_reply(blocks, result)
        self.count += 1
        return called

    def results(self, called: Sequence[str]) -> MessageId:
        """Store the tool results answering ``called``."""
        self.count += 1
        content = [ToolResultBlock(tid, self.words.text(*RESULT_WORDS)) for tid in called]
        return self.cm.add_message("user", content)

    def turn(self) -> None:
        """A user message, zero to three tool rounds, and a final answer: each reply compiled."""
        self.user()
        for _ in range(self.words.rounds()):
            self.results(self.reply(self.cm.compile(self.head), tool=True))
        self.reply(self.cm.compile(self.head), tool=False)

    def grow_to(self, target: int, *, batch: int = GENERATION_BATCH) -> None:
        """Add whole turns until at least ``target`` messages are stored, ``batch`` per commit."""
        while self.count < target:
            mark = min(target, self.count + batch)
            with self.store.batch():
                while self.count < mark:
                    self.turn()


def mean_message_tokens(seed: int, *, turns: int = 400) -> float:
    """Estimated tokens per stored message of a history like ``seed``'s (for sizing a window).

    Samples ``turns`` turns from the same distributions without storing or signing anything; a
    signature's length is fixed, so a stand-in of that length counts the same.
    """
    words = Words(seed)
    signature = "x" * SIGNATURE_CHARS
    tool_id = "toolu_0000000000"
    messages: list[dict[str, Any]] = []
    for _ in range(turns):
        messages.append(
            {"role": "user", "content": [{"type": "text", "text": words.text(*USER_WORDS)}]}
        )
        for _ in range(words.rounds()):
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "thinking",
                            "thinking": words.text(*THINKING_WORDS),
                            "signature": signature,
                        },
                        {"type": "text", "text": words.text(*LEAD_WORDS)},
                        {
                            "type": "tool_use",
                            "id": tool_id,
                            "name": words.tool(),
                            "input": {"query": words.text(*QUERY_WORDS)},
                        },
                    ],
                }
            )
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": tool_id,
                            "content": words.text(*RESULT_WORDS),
                        }
                    ],
                }
            )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": words.text(*THINKING_WORDS),
                        "signature": signature,
                    },
                    {"type": "text", "text": words.text(*ANSWER_WORDS)},
                ],
            }
        )
    return sum(estimate_tokens(m) for m in messages) / len(messages)
