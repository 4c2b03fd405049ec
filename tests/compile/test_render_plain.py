"""Plain user messages and common replies rendered on the short paths render exactly as on
the general one.

``_plain.render_plain`` takes the user messages nothing is judged in (text, the results answering
the open round); ``_lean_reply.render_reply`` takes the replies of text, thinking and tool calls
that follow a user message with nothing to close; every other message goes through
``_message.render_judged``. The property: the same stored history rendered message by message
through ``render_message`` (short paths where they apply) and through ``render_judged`` alone
gives the same state (messages, provenance, token counts, spans, chain, open round, strips, kept
and unread thinking) and the same encoded pieces, for histories mixing such messages with
everything the short paths must leave alone, under releases, stamps, sidecars and observe mode.
A session compiled through the manager gives the same requests, strips and tokens with the reply
path on and off. Then, on every store, a reopened agent's request (a render from the stored
messages) holds the plain messages as they were stored.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest
from helpers import SESSION_STEPS, SessionStep, switched_off, unmarked, windowed_session
from hypothesis import given
from hypothesis import strategies as st

from context_manager import (
    ContextManager,
    Head,
    Passthrough,
    Store,
    TextBlock,
    ThinkingBinding,
    ToolResultBlock,
    ToolUseBlock,
)
from context_manager._binding._chain import CHAIN_SEED, LEGACY_CHAIN_SEED
from context_manager._compile import _lean_reply
from context_manager._compile._message import render_judged, render_message
from context_manager._compile._render import RenderContext, RenderState
from context_manager._compile._strategies import estimate_tokens
from context_manager._model._content import Block, RedactedThinkingBlock, ThinkingBlock
from context_manager._model._messages import HEAD_CHANGE_KIND, MessageMeta, StoredMessage
from context_manager._model._stamps import BlockStamp, Stamp
from context_manager._reasoning._capture import resolve_without_sidecar
from context_manager._store._protocol import Release

_WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
_IDS = ("call_a", "call_b", "call_c")

_texts = st.sampled_from(["hello", "  ", "", "\n\t", "look at the log", "ünïcode ✓"])
_ids = st.sampled_from(_IDS)


def _text(text: str, extra: bool) -> Block:
    return TextBlock(text, extra={"citations": []}) if extra else TextBlock(text)


_user_blocks = st.lists(
    st.one_of(
        st.builds(_text, _texts, st.booleans()),
        st.builds(ToolResultBlock, _ids, st.sampled_from(["ok", "failed"])),
    ),
    min_size=0,
    max_size=4,
)
_reply_blocks = st.lists(
    st.one_of(
        st.builds(TextBlock, _texts),
        st.builds(_text, _texts, st.booleans()),
        st.builds(ThinkingBlock, st.just("mull"), st.sampled_from(["c2ln", "", "b3Robw=="])),
        st.builds(RedactedThinkingBlock, st.just("ZGF0YQ==")),
        st.builds(ToolUseBlock, _ids, st.just("grep"), st.just({"q": "x"})),
        st.builds(ToolResultBlock, _ids, st.just("stray")),
    ),
    min_size=0,
    max_size=4,
)
_meta = st.sampled_from(
    [
        MessageMeta(),
        MessageMeta(),
        MessageMeta(),
        MessageMeta(system_notice=True),
        MessageMeta(kind="note"),
        MessageMeta(kind=HEAD_CHANGE_KIND, extra={"sent": {"system": "x"}}),
        MessageMeta(kind="summary"),
    ]
)
_message = st.one_of(
    st.tuples(st.just("user"), _user_blocks, _meta),
    st.tuples(st.just("assistant"), _reply_blocks, st.just(MessageMeta())),
    st.tuples(st.just("system"), st.lists(st.builds(TextBlock, _texts), max_size=2), _meta),
)
_contexts = st.fixed_dictionaries(
    {
        "binds": st.booleans(),
        "system_notices": st.sampled_from(["system", "user"]),
        "appends": st.booleans(),
        "counted": st.booleans(),
        "pieces": st.booleans(),
        "legacy": st.booleans(),
        "releases": st.dictionaries(
            st.integers(min_value=1, max_value=14),
            st.tuples(
                st.integers(min_value=0, max_value=3),
                st.booleans(),
                st.sampled_from([None, 1, 2]),
            ),
            max_size=5,
        ),
        "stamps": st.dictionaries(
            st.integers(min_value=1, max_value=14),
            st.tuples(
                st.sampled_from(["claude-sim-1", "claude-other-9"]),
                st.sampled_from(["sys-a", "sys-b"]),
                st.dictionaries(st.integers(min_value=0, max_value=3), st.just("seal"), max_size=3),
            ),
            max_size=8,
        ),
        "resolve": st.sampled_from(["none", "no sidecar", "sidecar"]),
        "observe": st.booleans(),
        "checks_prefix": st.booleans(),
    }
)


def _stored(specs: list[tuple[str, list[Block], MessageMeta]]) -> list[StoredMessage]:
    return [
        StoredMessage(
            id=f"msg_{n}",
            sequence=n,
            branch="main@1",
            role=role,  # type: ignore[arg-type]
            content=tuple(blocks),
            metadata=meta,
            created_at=_WHEN,
        )
        for n, (role, blocks, meta) in enumerate(specs, start=1)
    ]


def _sidecar(block: Block) -> Block | None:
    """A sidecar's resolver: the text kept elsewhere, or gone."""
    if isinstance(block, ThinkingBlock) and block.signature:
        return None if block.signature == "c2ln" else attrs.evolve(block, thinking="from aside")
    return block


_RESOLVERS = {"none": None, "no sidecar": resolve_without_sidecar, "sidecar": _sidecar}


def _context(options: dict[str, Any]) -> RenderContext:
    def other_estimator(message: Any) -> int:
        return len(repr(message)) // 3

    releases = {
        f"msg_{n}": Release(f"msg_{n}", start, reported, since)
        for n, (start, reported, since) in options.get("releases", {}).items()
    }
    stamps = {
        f"msg_{n}": Stamp(
            model=model,
            head={"system": system, "model": "dm"},
            blocks={i: BlockStamp(seal) for i, seal in blocks.items()},
            owns=True,
        )
        for n, (model, system, blocks) in options.get("stamps", {}).items()
    }
    return RenderContext(
        binds=options["binds"],
        system_notices=options["system_notices"],
        digests={"system": "sys-a", "model": "dm"},
        bound=("system",),
        releases=releases,
        stamps=stamps,
        estimator=estimate_tokens if options["counted"] else other_estimator,
        resolve=_RESOLVERS[options.get("resolve", "none")],
        model="claude-sim-1",
        appends=options["appends"],
        pieces={} if options["pieces"] else None,
        observe=options.get("observe", False),
        checks_prefix=options.get("checks_prefix", True),
    )


def _render(
    messages: list[StoredMessage], ctx: RenderContext, legacy: bool, step: Any
) -> tuple[RenderState, list[int], Any]:
    ctx = attrs.evolve(ctx, pieces=None if ctx.pieces is None else {})
    state = RenderState(chain=CHAIN_SEED, legacy_chain=LEGACY_CHAIN_SEED if legacy else None)
    encoded = [step(state, ctx, message) for message in messages]
    return state, encoded, ctx.pieces


@given(st.lists(_message, max_size=14), _contexts)
def test_a_history_renders_the_same_on_the_short_path_and_the_general_one(
    specs: list[tuple[str, list[Block], MessageMeta]], options: dict[str, Any]
) -> None:
    messages = _stored(specs)
    ctx = _context(options)
    short = _render(messages, ctx, options["legacy"], render_message)
    general = _render(messages, ctx, options["legacy"], render_judged)
    assert short == general


_CALLS: list[Block] = [ToolUseBlock("call_a", "grep", {}), ToolUseBlock("call_b", "grep", {})]
_ROUND = ("assistant", _CALLS)
_EDGES: dict[str, list[tuple[str, list[Block]]]] = {
    "text": [("user", [TextBlock("hi"), TextBlock("there")])],
    "whitespace only": [("user", [TextBlock("  "), TextBlock("\n")])],
    "empty beside text": [("user", [TextBlock(""), TextBlock("hi")])],
    "whitespace beside text": [("user", [TextBlock(" "), TextBlock("hi")])],
    "text with a field": [("user", [TextBlock("hi", extra={"citations": []})])],
    "answered round": [
        _ROUND,
        ("user", [ToolResultBlock("call_b", "ok"), ToolResultBlock("call_a", "ok")]),
    ],
    "answered round and text": [
        _ROUND,
        ("user", [ToolResultBlock("call_a", "ok"), ToolResultBlock("call_b", "ok")]),
        ("assistant", [TextBlock("done")]),
        ("user", [TextBlock("next")]),
    ],
    "part of a round": [_ROUND, ("user", [ToolResultBlock("call_a", "ok")])],
    "a round answered by text": [_ROUND, ("user", [TextBlock("never mind")])],
    "a repeated result": [
        _ROUND,
        (
            "user",
            [
                ToolResultBlock("call_a", "ok"),
                ToolResultBlock("call_a", "ok"),
                ToolResultBlock("call_b", "ok"),
            ],
        ),
    ],
    "a stray result": [("user", [ToolResultBlock("call_z", "ok")])],
    "user after user": [("user", [TextBlock("one")]), ("user", [TextBlock("two")])],
    "after a blank reply": [
        ("user", [TextBlock("one")]),
        ("assistant", [TextBlock(" ")]),
        ("user", [TextBlock("two")]),
    ],
    "after a system message": [
        ("user", [TextBlock("one")]),
        ("system", [TextBlock("mind the time")]),
        ("user", [TextBlock("two")]),
        ("assistant", [TextBlock("ok")]),
    ],
    "a reply after a blank reply": [
        ("user", [TextBlock("one")]),
        ("assistant", [TextBlock(" ")]),
        ("assistant", [TextBlock("ok")]),
    ],
    "after thinking": [
        ("user", [TextBlock("one")]),
        ("assistant", [ThinkingBlock("mull", "c2ln"), TextBlock("ok")]),
        ("user", [TextBlock("two")]),
    ],
}


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("counted", [True, False])
@pytest.mark.parametrize("pieces", [True, False])
@pytest.mark.parametrize("case", sorted(_EDGES))
def test_each_edge_of_the_short_path_renders_as_the_general_one(
    case: str, pieces: bool, counted: bool, legacy: bool
) -> None:
    messages = _stored([(role, blocks, MessageMeta()) for role, blocks in _EDGES[case]])
    for notices in ("system", "user"):
        options = {"binds": True, "system_notices": notices, "appends": False}
        ctx = _context({**options, "counted": counted, "pieces": pieces})
        short = _render(messages, ctx, legacy, render_message)
        assert short == _render(messages, ctx, legacy, render_judged)


def test_the_short_path_takes_the_plain_messages_of_a_tool_round() -> None:
    """Not a vacuous property: the short path renders text and answering results itself."""
    from context_manager._compile._plain import render_plain

    messages = _stored(
        [
            ("user", [TextBlock("read the log")], MessageMeta()),
            ("assistant", [ToolUseBlock("call_a", "grep", {"q": "x"})], MessageMeta()),
            ("user", [ToolResultBlock("call_a", "ok")], MessageMeta()),
        ]
    )
    ctx = _context(
        {
            "binds": True,
            "system_notices": "system",
            "appends": False,
            "counted": True,
            "pieces": True,
        }
    )
    state = RenderState(chain=CHAIN_SEED)
    assert render_plain(state, ctx, messages[0]) is not None
    assert render_plain(state, ctx, messages[1]) is None  # a reply: judged
    render_judged(state, ctx, messages[1])
    assert render_plain(state, ctx, messages[2]) is not None
    assert state.open_tool_uses == {}
    assert [m["role"] for m in state.messages] == ["user", "assistant", "user"]


def test_a_reopened_agent_sends_its_plain_messages_as_stored(store: Store) -> None:
    head = Head(model="claude-sim-1", system="You are terse.", tools=[])
    binding = ThinkingBinding(binds=True, drop_block=True)
    cm = ContextManager.open(store, namespace="ada", binding=binding, strategy=Passthrough())
    cm.add_message("user", [TextBlock("read the log"), TextBlock("then the docs")])
    cm.add_message("assistant", [TextBlock("on it"), ToolUseBlock("call_a", "grep", {"q": "x"})])
    cm.add_message("user", [ToolResultBlock("call_a", "3 errors")])
    cm.add_message("assistant", [TextBlock("three errors")])
    cm.add_message("user", [TextBlock("  "), TextBlock("thanks")])
    reopened = ContextManager.open(store, namespace="ada", binding=binding, strategy=Passthrough())
    messages = unmarked(reopened.compile(head, dry_run=True).request["messages"])
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "read the log"},
                {"type": "text", "text": "then the docs"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "on it"},
                {"type": "tool_use", "id": "call_a", "name": "grep", "input": {"q": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_a", "content": "3 errors"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "three errors"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "  "}, {"type": "text", "text": "thanks"}],
        },
    ]


@given(steps=SESSION_STEPS, max_tokens=st.integers(min_value=400, max_value=3_000))
def test_a_session_compiles_the_same_with_the_reply_path_on_and_off(
    steps: list[SessionStep], max_tokens: int
) -> None:
    on = windowed_session(steps, max_tokens)
    with switched_off(_lean_reply):
        assert windowed_session(steps, max_tokens) == on


def test_the_reply_path_takes_a_reply_of_thinking_text_and_a_tool_call() -> None:
    """Not a vacuous property: the reply path renders and judges a common reply itself."""
    messages = _stored(
        [
            ("user", [TextBlock("read the log")], MessageMeta()),
            (
                "assistant",
                [
                    ThinkingBlock("mull", "c2ln"),
                    TextBlock("on it"),
                    ToolUseBlock("call_a", "grep", {"q": "x"}),
                ],
                MessageMeta(),
            ),
        ]
    )
    options = {"binds": False, "system_notices": "system", "appends": False}
    ctx = _context({**options, "counted": True, "pieces": True, "resolve": "no sidecar"})
    state = RenderState(chain=CHAIN_SEED)
    render_message(state, ctx, messages[0])
    assert _lean_reply.render_reply(state, ctx, messages[1]) is not None
    assert state.kept_thinking == {("msg_2", 0)}
    assert state.open_tool_uses == {"call_a": "grep"}
    assert [m["role"] for m in state.messages] == ["user", "assistant"]
    sidecar = attrs.evolve(ctx, resolve=_sidecar)
    state = RenderState(chain=CHAIN_SEED)
    render_message(state, sidecar, messages[0])
    assert _lean_reply.render_reply(state, sidecar, messages[1]) is None  # the general path's
