"""Regressions of issue 28, item 17, and issue 35's simulator items: the simulator accepts what the
real API accepted (recorded 200s) and refuses, in the API's words, what it refuses (a model it does
not serve, a prompt over the context window, a tool without ``input_schema``)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest

from context_manager.simulator import Simulator

BASE = {
    "model": "claude-opus-5-5",
    "max_tokens": 2048,
    "messages": [{"role": "user", "content": "hi"}],
}

WEB_SEARCH_TURN = [
    {"role": "user", "content": "search for it"},
    {
        "role": "assistant",
        "content": [
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "it"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.com/",
                        "title": "Example",
                        "encrypted_content": "EqgfCioIARgBIiQ3",
                        "page_age": None,
                    }
                ],
            },
            {"type": "text", "text": "Found it.", "citations": None},
        ],
    },
    {"role": "user", "content": "thanks"},
]


@pytest.fixture
def client() -> Iterator[anthropic.Anthropic]:
    with Simulator().sync_client() as c:
        yield c


def post(client: anthropic.Anthropic, body: dict[str, Any]) -> Any:
    """The SDK's raw post: create() checks its keywords client-side, the API does not."""
    return client.post("/v1/messages?beta=true", body=body, cast_to=object)


def edited(**fields: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body.update(fields)
    return body


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("page-age-null-in-a-web-search-result", edited(messages=WEB_SEARCH_TURN)),
    (
        "block-level-citations-and-cache-control-null",
        edited(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi", "citations": None, "cache_control": None}
                    ],
                }
            ]
        ),
    ),
    (
        "whitespace-text-beside-other-content",
        edited(
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "\n\n"}, {"type": "text", "text": "ok"}],
                },
                {
                    "role": "user",
                    "content": [{"type": "text", "text": " "}, {"type": "text", "text": "go"}],
                },
            ]
        ),
    ),
    ("sampling-settings", edited(temperature=1.0, top_p=0.9, top_k=40)),
]


@pytest.mark.parametrize("body", [r[1] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_what_recorded_traffic_shows_the_api_accepting_the_simulator_accepts(
    client: anthropic.Anthropic, body: dict[str, Any]
) -> None:
    assert post(client, body)["role"] == "assistant"


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "whitespace-text-as-the-only-content",
        edited(messages=[{"role": "user", "content": [{"type": "text", "text": "  "}]}]),
        "messages.0.content.0.text: text content blocks must contain non-whitespace text",
    ),
    (
        "tool-without-input-schema",
        edited(tools=[{"name": "read_log", "description": "Read."}]),
        "tools.0.custom.input_schema: Field required",
    ),
    (
        "prompt-over-the-context-window",
        edited(messages=[{"role": "user", "content": "x" * 3_000_000}]),
        r"prompt is too long: \d+ tokens > 200000 maximum",
    ),
    ("temperature-out-of-range", edited(temperature=3), "temperature: Input should be a number"),
]


@pytest.mark.parametrize(("body", "match"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_what_the_api_refuses_the_simulator_refuses_with_a_400_in_its_words(
    client: anthropic.Anthropic, body: dict[str, Any], match: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=match) as caught:
        post(client, body)
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


@pytest.mark.parametrize("model", ["claude-opus-55", "gpt-4o", "claude-opus-5-5-turbo"])
def test_a_model_the_api_does_not_serve_is_the_apis_404_naming_it(
    client: anthropic.Anthropic, model: str
) -> None:
    with pytest.raises(anthropic.NotFoundError, match=f"model: {model}") as caught:
        client.beta.messages.create(**edited(model=model))
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": f"model: {model}"},
    }


@pytest.mark.parametrize(
    "model",
    [
        "claude-opus-5-5",
        "claude-opus-5-5-20260901",
        "claude-3-5-haiku-latest",
        "claude-3-5-haiku-20241022",
        "claude-sim-1",
        "claude-haiku-5-5",
    ],
)
def test_documented_ids_their_dated_forms_and_the_simulators_test_ids_are_served(
    client: anthropic.Anthropic, model: str
) -> None:
    assert client.beta.messages.create(**edited(model=model)).role == "assistant"


def test_a_model_newer_than_the_table_is_served_once_the_simulator_is_told_of_it() -> None:
    with Simulator(extra_models=["claude-opus-6"]).sync_client() as c:
        assert c.beta.messages.create(**edited(model="claude-opus-6")).role == "assistant"


def test_the_context_window_is_configurable() -> None:
    body = edited(messages=[{"role": "user", "content": "x" * 4_000}])
    with (
        Simulator(context_window=500).sync_client() as c,
        pytest.raises(anthropic.BadRequestError, match="> 500 maximum"),
    ):
        post(c, body)


def test_count_tokens_refuses_a_model_the_api_does_not_serve(client: anthropic.Anthropic) -> None:
    count: Callable[..., Any] = client.beta.messages.count_tokens
    with pytest.raises(anthropic.NotFoundError, match="model: gpt-4o"):
        count(model="gpt-4o", messages=BASE["messages"])
