"""Regressions of issue 28, items 13-14, and issue 35's early type checks: bad input is refused
where it comes in, with a ``ContextManagerError`` that also is the builtin, and nothing is written.
"""

from __future__ import annotations

from typing import Any

import pytest

from context_manager import (
    ContextManager,
    ContextManagerError,
    Fold,
    Head,
    InvalidBranchName,
    InvalidContent,
    InvalidHead,
    InvalidType,
    InvalidValue,
    Store,
    Window,
)

HEAD = Head(model="claude-opus-5-5", system="You are Ada.", settings={"max_tokens": 64})

MALFORMED_BLOCKS: list[Any] = [
    {"type": "text", "text": 5},
    {"type": "text"},
    {"type": "text", "text": None},
    {"type": "tool_use", "name": "probe", "input": {}},
    {"type": "tool_use", "id": "toolu_1", "name": "probe", "input": [1, 2]},
    {"type": "tool_result"},
    {"type": "text", "text": "an emoji cut in two: \ud83d"},  # the API: not valid JSON
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "\ude00 the other half"},
    {"type": "tool_use", "id": "toolu_1", "name": "probe", "input": {"q": ["\udbff"]}},
]


def _opened(store: Store) -> ContextManager:
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "hello")
    return cm


def _stored(cm: ContextManager) -> list[Any]:
    return [(m.role, m.content) for m in cm.messages()]


@pytest.mark.parametrize("block", MALFORMED_BLOCKS)
def test_a_malformed_wire_block_is_refused_by_add_message_naming_it_and_nothing_is_written(
    store: Store, block: Any
) -> None:
    cm = _opened(store)
    before = _stored(cm)
    with pytest.raises(InvalidContent, match=r"user message, block 1: ") as caught:
        cm.add_message("user", [{"type": "text", "text": "fine"}, block])
    assert caught.value.block == 1
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, ValueError)
    assert _stored(cm) == before
    cm.compile(HEAD)  # every later compile still works


@pytest.mark.parametrize("block", MALFORMED_BLOCKS)
def test_a_malformed_wire_block_in_a_reply_is_refused_by_record_reply_and_nothing_is_written(
    store: Store, block: Any
) -> None:
    cm = _opened(store)
    result = cm.compile(HEAD)
    before = _stored(cm)
    with pytest.raises(InvalidContent, match=r"^reply, block 0: "):
        cm.record_reply({"type": "message", "role": "assistant", "content": [block]}, result)
    assert _stored(cm) == before
    cm.compile(HEAD)


def test_a_bare_string_is_not_a_reply_and_record_reply_says_what_to_pass(store: Store) -> None:
    cm = _opened(store)
    result = cm.compile(HEAD)
    with pytest.raises(InvalidContent, match="bare string; pass the SDK message"):
        cm.record_reply("hello", result)
    assert len(cm.messages()) == 1


@pytest.mark.parametrize("content", ["", "   ", [], [{"type": "text", "text": ""}]])
def test_an_empty_message_is_refused_and_nothing_is_written(store: Store, content: Any) -> None:
    cm = _opened(store)
    with pytest.raises(InvalidContent, match="user message: has no content the API accepts"):
        cm.add_message("user", content)
    assert len(cm.messages()) == 1


def test_a_whitespace_text_beside_other_content_is_stored_as_given(store: Store) -> None:
    cm = _opened(store)
    cm.add_message("user", [{"type": "text", "text": " "}, {"type": "text", "text": "more"}])
    assert len(cm.messages()) == 2


@pytest.mark.parametrize(
    ("call", "error", "builtin", "match"),
    [
        (lambda cm: cm.add_message("robot", "hi"), InvalidValue, ValueError, "unknown role"),
        (lambda cm: cm.add_message("user", None), InvalidContent, TypeError, "None"),
        (lambda cm: cm.add_message("user", "hi", metadata=[1]), InvalidType, TypeError, "meta"),
        (lambda cm: cm.compile(HEAD, budget="10"), InvalidType, TypeError, "budget"),
        (lambda cm: cm.compile(HEAD, budget=0), InvalidValue, ValueError, "budget"),
        (lambda cm: cm.messages(since="a"), InvalidType, TypeError, "since"),
        (lambda cm: cm.compile("head"), InvalidType, TypeError, "needs a Head"),
    ],
)
def test_bad_arguments_raise_the_library_errors_which_also_are_the_builtins(
    store: Store, call: Any, error: type[Exception], builtin: type[Exception], match: str
) -> None:
    cm = _opened(store)
    with pytest.raises(error, match=match) as caught:
        call(cm)
    assert isinstance(caught.value, ContextManagerError)
    assert isinstance(caught.value, builtin)
    assert len(cm.messages()) == 1


def test_an_empty_namespace_raises_a_library_error(store: Store) -> None:
    with pytest.raises(InvalidValue, match="namespace must be a non-empty string"):
        ContextManager.open(store, namespace="")


@pytest.mark.parametrize("name", [None, 5, ""])
def test_a_branch_name_that_is_not_a_non_empty_string_is_refused_the_same_on_every_store(
    store: Store, name: Any
) -> None:
    cm = _opened(store)
    with pytest.raises(InvalidBranchName, match="a branch name must be a non-empty string"):
        cm.fork(name)
    with pytest.raises(InvalidBranchName):
        cm.branch_at(cm.messages()[0].id, name)
    with pytest.raises(InvalidBranchName):
        store.create_branch("ada", name)
    assert [b.name for b in cm.list_branches()] == ["main"]
    assert cm.current_branch().name == "main"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": 123}, r"'model' \(123\) is not valid: give a model id string"),
        ({"model": ""}, "give a model id string"),
        ({"model": "m", "tools": "read_log"}, r"'tools' \('read_log'\) is not valid: give a list"),
        ({"model": "m", "tools": ["read_log"]}, "give a list of tool definition dicts"),
        ({"model": "m", "system": [5]}, "give a string or a list of text blocks"),
        ({"model": "m", "settings": "fast"}, "give a dict of request fields"),
    ],
)
def test_a_head_of_the_wrong_shape_is_refused_when_it_is_made(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidHead, match=match) as caught:
        Head(**kwargs)
    assert isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Window("big"), InvalidType),  # type: ignore[arg-type]
        (lambda: Window(0), InvalidValue),
        (lambda: Window(100, reanchor=2), InvalidValue),
        (lambda: Fold(lambda ms: "s", trigger_tokens="many"), InvalidType),  # type: ignore[arg-type]
        (lambda: Fold(lambda ms: "s", trigger_tokens=10, keep_tokens=-1), InvalidValue),
    ],
)
def test_a_strategy_of_the_wrong_shape_is_refused_when_it_is_made(
    make: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="must be"):
        make()
