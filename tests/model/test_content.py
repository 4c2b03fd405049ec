"""The content model: real wire shapes and SDK objects convert losslessly, and never emit None."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types.beta import (
    BetaMessage,
    BetaRedactedThinkingBlock,
    BetaServerToolUseBlock,
    BetaTextBlock,
    BetaThinkingBlock,
    BetaToolUseBlock,
)
from hypothesis import example, given
from hypothesis import strategies as st

from context_manager import (
    Block,
    ImageBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
    block_from_wire,
    block_to_wire,
    blocks_from_wire,
    blocks_to_wire,
    converter,
    estimate_tokens,
)
from context_manager._binding._chain import block_bytes
from context_manager._compile._strategies import estimate_from_chars, wire_chars
from context_manager._model._content import to_block, to_blocks

SIGNATURE = "EqQBCkYIBxgCKkD3mZ9a1nY2Vb0x8wQyU6oI0cPpW2kq4Hc5RZqj6Z5x1yT3u7Q2aBcD"
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4m"
CHAR_CITATION = {
    "type": "char_location",
    "cited_text": "The grass is green.",
    "document_index": 0,
    "document_title": "My Document",
    "start_char_index": 0,
    "end_char_index": 20,
}
WEB_CITATION = {
    "type": "web_search_result_location",
    "url": "https://example.com/weather",
    "title": "Weather in Paris",
    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
    "cited_text": "Paris is 15C and sunny.",
}
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAE"}

# (wire dict as the API sends it, the block it becomes)
REAL_SHAPES: list[tuple[str, dict[str, Any], Block]] = [
    (
        "thinking with empty text and a signature (display omitted)",
        {"type": "thinking", "thinking": "", "signature": SIGNATURE},
        ThinkingBlock("", SIGNATURE),
    ),
    (
        "thinking with text",
        {"type": "thinking", "thinking": "Let me check the log.", "signature": SIGNATURE},
        ThinkingBlock("Let me check the log.", SIGNATURE),
    ),
    (
        "redacted thinking",
        {"type": "redacted_thinking", "data": REDACTED},
        RedactedThinkingBlock(REDACTED),
    ),
    ("plain text", {"type": "text", "text": "Hello."}, TextBlock("Hello.")),
    (
        "text with citations",
        {"type": "text", "text": "the grass is green", "citations": [CHAR_CITATION, WEB_CITATION]},
        TextBlock("the grass is green", extra={"citations": [CHAR_CITATION, WEB_CITATION]}),
    ),
    (
        "text with a citation whose document_title is null (the API requires the key)",
        {"type": "text", "text": "t", "citations": [{**CHAR_CITATION, "document_title": None}]},
        TextBlock("t", extra={"citations": [{**CHAR_CITATION, "document_title": None}]}),
    ),
    (
        "text with a cache marker",
        {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        TextBlock("cached", extra={"cache_control": {"type": "ephemeral", "ttl": "1h"}}),
    ),
    (
        "tool use",
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "Paris", "units": ["c"], "hint": None, "days": 3},
        },
        ToolUseBlock(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            {"location": "Paris", "units": ["c"], "hint": None, "days": 3},
        ),
    ),
    (
        "tool use with empty input and a caller",
        {
            "type": "tool_use",
            "id": "toolu_02",
            "name": "now",
            "input": {},
            "caller": {"type": "direct"},
        },
        ToolUseBlock("toolu_02", "now", {}, extra={"caller": {"type": "direct"}}),
    ),
    (
        "tool result with text content",
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "15 degrees"},
        ToolResultBlock("toolu_01", "15 degrees"),
    ),
    (
        "tool result with nested content and is_error false",
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01",
            "content": [
                {"type": "text", "text": "see chart", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": PNG},
            ],
            "is_error": False,
        },
        ToolResultBlock(
            "toolu_01",
            (
                TextBlock("see chart", extra={"cache_control": {"type": "ephemeral"}}),
                ImageBlock(PNG),
            ),
            is_error=False,
        ),
    ),
    (
        "tool result that is an error",
        {"type": "tool_result", "tool_use_id": "toolu_03", "content": "boom", "is_error": True},
        ToolResultBlock("toolu_03", "boom", is_error=True),
    ),
    (
        "tool result with no content at all",
        {"type": "tool_result", "tool_use_id": "toolu_04"},
        ToolResultBlock("toolu_04"),
    ),
    (
        "tool result with empty text content",
        {"type": "tool_result", "tool_use_id": "toolu_05", "content": ""},
        ToolResultBlock("toolu_05", ""),
    ),
    ("base64 image", {"type": "image", "source": PNG}, ImageBlock(PNG)),
    (
        "url image",
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ImageBlock({"type": "url", "url": "https://example.com/a.png"}),
    ),
    (
        "server tool use",
        {
            "type": "server_tool_use",
            "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
            "name": "web_search",
            "input": {"query": "weather in Paris"},
        },
        UnknownBlock(
            {
                "type": "server_tool_use",
                "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
                "name": "web_search",
                "input": {"query": "weather in Paris"},
            }
        ),
    ),
    (
        "web search tool result",
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://example.com/weather",
                    "title": "Weather in Paris",
                    "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1",
                    "page_age": "April 30, 2025",
                }
            ],
        },
        UnknownBlock(
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.com/weather",
                        "title": "Weather in Paris",
                        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1",
                        "page_age": "April 30, 2025",
                    }
                ],
            }
        ),
    ),
    (
        "a block type from the future",
        {"type": "hologram", "payload": {"frames": [1, 2, {"k": "v"}]}, "loop": True},
        UnknownBlock({"type": "hologram", "payload": {"frames": [1, 2, {"k": "v"}]}, "loop": True}),
    ),
    (
        "a known type missing a required field is kept verbatim",
        {"type": "thinking", "thinking": "no signature here"},
        UnknownBlock({"type": "thinking", "thinking": "no signature here"}),
    ),
]
SHAPE_IDS = [name for name, _, _ in REAL_SHAPES]


def _top_level_nones(wire: dict[str, Any]) -> list[str]:
    found = [key for key, value in wire.items() if value is None]
    content = wire.get("content")
    if wire.get("type") == "tool_result" and isinstance(content, list):
        for inner in content:
            found += _top_level_nones(inner)
    return found


@pytest.mark.parametrize(("name", "wire", "block"), REAL_SHAPES, ids=SHAPE_IDS)
def test_a_real_wire_block_becomes_the_expected_block(
    name: str, wire: dict[str, Any], block: Block
) -> None:
    """Each wire shape the API sends maps to its block class with every field kept."""
    assert block == block_from_wire(wire)


@pytest.mark.parametrize(("name", "wire", "block"), REAL_SHAPES, ids=SHAPE_IDS)
def test_a_block_goes_back_to_the_exact_wire_dict(
    name: str, wire: dict[str, Any], block: Block
) -> None:
    """Block to wire gives back exactly what the API sent, key for key."""
    no_none_fields: list[str] = []
    assert wire == block_to_wire(block)
    assert no_none_fields == _top_level_nones(block_to_wire(block))


@pytest.mark.parametrize(("name", "wire", "block"), REAL_SHAPES, ids=SHAPE_IDS)
def test_the_cattrs_converter_agrees_with_the_functions(
    name: str, wire: dict[str, Any], block: Block
) -> None:
    """``converter`` structures and unstructures blocks exactly as the module functions do."""
    assert block == converter.structure(wire, Block)  # type: ignore[arg-type]
    assert wire == converter.unstructure(block)


def test_a_whole_response_content_round_trips_in_both_directions() -> None:
    """A list of every real shape survives wire -> blocks -> wire and blocks -> wire -> blocks."""
    wires = [wire for _, wire, _ in REAL_SHAPES]
    blocks = tuple(block for _, _, block in REAL_SHAPES)
    assert wires == blocks_to_wire(blocks_from_wire(wires))
    assert blocks == blocks_from_wire(blocks_to_wire(blocks))


def test_null_block_fields_are_dropped_but_null_values_inside_fields_are_kept() -> None:
    """``citations: null`` goes (the API rejects it); a tool input's null is data and stays."""
    given_wire: list[dict[str, Any]] = [
        {"type": "text", "text": "plain", "citations": None},
        {"type": "tool_result", "tool_use_id": "t1", "content": None, "is_error": None},
        {"type": "tool_use", "id": "t2", "name": "f", "input": {"a": None}, "caller": None},
        {"type": "hologram", "beam": None, "color": "red"},
    ]
    expected = [
        {"type": "text", "text": "plain"},
        {"type": "tool_result", "tool_use_id": "t1"},
        {"type": "tool_use", "id": "t2", "name": "f", "input": {"a": None}},
        {"type": "hologram", "color": "red"},
    ]
    assert expected == blocks_to_wire(to_blocks(given_wire))
    assert expected == blocks_to_wire(blocks_from_wire(given_wire))


def test_blocks_built_in_code_never_emit_none() -> None:
    """Optional fields left unset, and None put in ``extra`` or ``raw``, are not emitted."""
    blocks: list[Block] = [
        ToolResultBlock("t1"),
        ToolResultBlock("t2", [TextBlock("x", extra={"citations": None})], is_error=None),
        TextBlock("y", extra={"citations": None}),
        UnknownBlock({"type": "hologram", "beam": None}),
    ]
    expected = [
        {"type": "tool_result", "tool_use_id": "t1"},
        {"type": "tool_result", "tool_use_id": "t2", "content": [{"type": "text", "text": "x"}]},
        {"type": "text", "text": "y"},
        {"type": "hologram"},
    ]
    assert expected == blocks_to_wire(blocks)


def test_tool_result_content_given_as_a_list_of_blocks_or_dicts_is_the_same_block() -> None:
    """Nested content may be a list of blocks or of wire dicts; it is held as a tuple of blocks."""
    expected = ToolResultBlock("t1", (TextBlock("a"), ImageBlock(PNG)))
    assert expected == ToolResultBlock("t1", [TextBlock("a"), ImageBlock(PNG)])
    as_dicts = [{"type": "text", "text": "a"}, {"type": "image", "source": PNG}]
    assert expected == ToolResultBlock("t1", as_dicts)


def test_a_string_becomes_one_text_block() -> None:
    """``"hello"`` is shorthand for ``[TextBlock("hello")]``."""
    assert (TextBlock("hello"),) == to_blocks("hello")


def test_one_block_or_one_wire_dict_is_a_one_block_message() -> None:
    """A single block or dict, not in a list, is accepted as the whole content."""
    assert (TextBlock("a"),) == to_blocks(TextBlock("a"))
    assert (TextBlock("a"),) == to_blocks({"type": "text", "text": "a"})


def _sdk_response() -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-5",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 2095, "output_tokens": 503},
        "content": [
            {"type": "thinking", "thinking": "", "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": REDACTED},
            {
                "type": "text",
                "text": "the grass is green",
                "citations": [{**CHAR_CITATION, "document_title": None}, WEB_CITATION],
            },
            {"type": "text", "text": "Let me search.", "citations": None},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "weather in Paris"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.com/weather",
                        "title": "Weather in Paris",
                        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1",
                        "page_age": None,
                    }
                ],
            },
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {"location": "Paris", "hint": None},
            },
        ],
    }


def test_an_sdk_message_gives_its_content_as_blocks() -> None:
    """A ``BetaMessage`` from the SDK converts to the blocks of its content, in order."""
    message = BetaMessage.model_validate(_sdk_response())
    expected = (
        ThinkingBlock("", SIGNATURE),
        RedactedThinkingBlock(REDACTED),
        TextBlock(
            "the grass is green",
            extra={"citations": [{**CHAR_CITATION, "document_title": None}, WEB_CITATION]},
        ),
        TextBlock("Let me search."),
        UnknownBlock(
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "weather in Paris"},
            }
        ),
        UnknownBlock(
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.com/weather",
                        "title": "Weather in Paris",
                        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1",
                        "page_age": None,
                    }
                ],
            }
        ),
        ToolUseBlock("toolu_01", "get_weather", {"location": "Paris", "hint": None}),
    )
    assert expected == to_blocks(message)


def test_an_sdk_message_goes_to_the_wire_as_the_api_sent_it_minus_null_block_fields() -> None:
    """Wire from an SDK message equals the response JSON, with only ``citations: null`` gone."""
    response = _sdk_response()
    expected = [dict(block) for block in response["content"]]
    del expected[3]["citations"]
    assert expected == blocks_to_wire(to_blocks(BetaMessage.model_validate(response)))


@pytest.mark.parametrize(
    ("sdk_block", "expected"),
    [
        (BetaTextBlock(type="text", text="hi"), TextBlock("hi")),
        (BetaTextBlock(type="text", text="hi", citations=None), TextBlock("hi")),
        (
            BetaThinkingBlock(type="thinking", thinking="", signature=SIGNATURE),
            ThinkingBlock("", SIGNATURE),
        ),
        (
            BetaRedactedThinkingBlock(type="redacted_thinking", data=REDACTED),
            RedactedThinkingBlock(REDACTED),
        ),
        (
            BetaToolUseBlock(type="tool_use", id="toolu_9", name="read_log", input={"n": 3}),
            ToolUseBlock("toolu_9", "read_log", {"n": 3}),
        ),
        (
            BetaServerToolUseBlock(
                type="server_tool_use", id="srvtoolu_9", name="web_search", input={"q": "x"}
            ),
            UnknownBlock(
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_9",
                    "name": "web_search",
                    "input": {"q": "x"},
                }
            ),
        ),
    ],
    ids=["text", "text-null-citations", "thinking", "redacted", "tool-use", "server-tool-use"],
)
def test_an_sdk_block_model_becomes_the_matching_block(sdk_block: object, expected: Block) -> None:
    """Each SDK content block model converts on its own, with no None field."""
    assert expected == to_block(sdk_block)
    assert (expected,) == to_blocks([sdk_block])


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ([TextBlock("ok"), 42], r"content item 42 is neither a block"),
        ([{"text": "no type"}], r"content item \{'text': 'no type'\} has no string 'type'"),
        ([{"type": 7}], r"content item \{'type': 7\} has no string 'type'"),
        ([TextBlock("ok"), object()], r"content item <object object at .*> is neither"),
        (None, r"content None is not a string, a block or an iterable of blocks"),
        (3.5, r"content 3.5 is not a string"),
        (b"raw bytes", r"content b'raw bytes' is bytes"),
    ],
    ids=["int", "dict-without-type", "non-string-type", "object", "none", "float", "bytes"],
)
def test_content_that_is_not_blocks_is_a_type_error_naming_the_item(
    content: object, match: str
) -> None:
    """Anything but blocks, wire dicts, SDK blocks or a string is refused, naming the culprit."""
    with pytest.raises(TypeError, match=match):
        to_blocks(content)


def test_tool_result_content_that_is_not_text_or_blocks_is_a_type_error() -> None:
    """A tool result built in code with content of the wrong kind is refused, naming it."""
    with pytest.raises(TypeError, match=r"tool result content 12 is neither text nor a list"):
        ToolResultBlock("t1", 12)
    with pytest.raises(TypeError, match=r"content item 5 is neither a block"):
        ToolResultBlock("t1", [5])


# Hypothesis: the converter's round trips hold for any well-formed content.

_KNOWN_FIELDS = {
    "type",
    "text",
    "thinking",
    "signature",
    "data",
    "id",
    "name",
    "input",
    "tool_use_id",
    "content",
    "is_error",
    "source",
    "raw",
    "extra",
}
_json_leaf = (
    st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)


_json = st.recursive(_json_leaf, _containers, max_leaves=8)
_json_or_null = st.recursive(_json_leaf | st.none(), _containers, max_leaves=8)
_extra = st.dictionaries(
    st.text(max_size=10).filter(lambda k: k not in _KNOWN_FIELDS), _json, max_size=3
)
_object = st.dictionaries(st.text(max_size=6), _json_or_null, max_size=4)
_text = st.text(max_size=20)


def _wire(kind: str, required: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, **extra, **required}


_leaf_wire = st.one_of(
    st.builds(lambda t, e: _wire("text", {"text": t}, e), _text, _extra),
    st.builds(
        lambda t, s, e: _wire("thinking", {"thinking": t, "signature": s}, e), _text, _text, _extra
    ),
    st.builds(lambda d, e: _wire("redacted_thinking", {"data": d}, e), _text, _extra),
    st.builds(
        lambda i, n, inp, e: _wire("tool_use", {"id": i, "name": n, "input": inp}, e),
        _text,
        _text,
        _object,
        _extra,
    ),
    st.builds(lambda src, e: _wire("image", {"source": src}, e), _object, _extra),
    st.builds(
        lambda k, e: {"type": k, **e},
        st.text(min_size=1, max_size=12).filter(
            lambda k: (
                k
                not in {"text", "thinking", "redacted_thinking", "tool_use", "tool_result", "image"}
            )
        ),
        _extra,
    ),
)


@st.composite
def _tool_result_wire(draw: st.DrawFn) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "tool_result", **draw(_extra), "tool_use_id": draw(_text)}
    content = draw(st.none() | _text | st.lists(_leaf_wire, max_size=3))
    if content is not None:
        wire["content"] = content
    is_error = draw(st.none() | st.booleans())
    if is_error is not None:
        wire["is_error"] = is_error
    return wire


wire_content = st.lists(_leaf_wire | _tool_result_wire(), max_size=5)


@given(wire_content)
def test_any_wire_content_without_none_round_trips_through_blocks(
    wire: list[dict[str, Any]],
) -> None:
    """Property: ``blocks_to_wire(blocks_from_wire(d)) == d`` for wire dicts with no None field."""
    assert wire == blocks_to_wire(blocks_from_wire(wire))


@given(wire_content)
def test_any_blocks_round_trip_through_the_wire(wire: list[dict[str, Any]]) -> None:
    """Property: ``blocks_from_wire(blocks_to_wire(x)) == x`` for any blocks."""
    blocks = blocks_from_wire(wire)
    assert blocks == blocks_from_wire(blocks_to_wire(blocks))
    assert blocks == to_blocks(blocks_to_wire(blocks))


@given(wire_content)
def test_no_block_ever_emits_a_none_field(wire: list[dict[str, Any]]) -> None:
    """Property: no emitted block (nested tool-result content included) has a None field."""
    no_none_fields: list[str] = []
    for emitted in blocks_to_wire(blocks_from_wire(wire)):
        assert no_none_fields == _top_level_nones(emitted)


def _canonical_oracle(value: Any) -> bytes:
    """Canonical JSON as the binding rules define it, written with the standard library."""

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    text = json.dumps(strip(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode()


@given(wire_content, st.text())
@example([], 'DEL \x7f, quote ", backslash \\, tab \t, NUL \x00')
@example([], "caf\u00e9 \u2028 \U0001f600 \x7f")
def test_the_bytes_a_block_binds_are_its_canonical_json_whatever_it_holds(
    wire: list[dict[str, Any]], text: str
) -> None:
    """Property: the chain's bytes of any block (plain text, thinking and tool-result blocks of
    any characters included) are its canonical JSON: keys sorted, compact, non-ASCII kept, cache
    markers left out."""
    plain = [
        {"type": "text", "text": text},
        {"text": text, "type": "text"},
        {"type": "thinking", "thinking": text, "signature": text[::-1]},
        {"type": "tool_result", "tool_use_id": text[:3], "content": text},
    ]
    for block in [*wire, *plain]:
        assert block_bytes(block) == _canonical_oracle(block)
        marked = {**block, "cache_control": {"type": "ephemeral"}}
        assert block_bytes(marked) == _canonical_oracle(block)


@given(wire_content, st.text())
def test_a_message_estimate_is_the_sum_of_what_each_block_counts(
    wire: list[dict[str, Any]], text: str
) -> None:
    """Property: the render's per-block character counts add up to the default estimate of
    the whole message (a plain text block of any characters included)."""
    blocks = [*wire, {"type": "text", "text": text}]
    for role in ("user", "assistant"):
        counted = estimate_from_chars(role, sum(wire_chars(block) for block in blocks))
        assert counted == estimate_tokens({"role": role, "content": blocks})
