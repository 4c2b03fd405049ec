"""What the real API refuses, the simulator refuses: a 400 in the API error shape, never a crash."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any
from unittest.mock import ANY

import anthropic
import httpx2
import pytest

from context_manager.simulator import (
    BINDING_BETA,
    INLINE_TOOLS_BETA,
    OUTPUT_CONFIG_BETA,
    SYSTEM_CLEAR_AT_BETA,
    TOOL_CHANGES_BETA,
    Simulator,
)

SIGNATURE_PLACEHOLDER = "c2ln"


def base() -> dict[str, Any]:
    return {
        "model": "claude-opus-5-5",
        "max_tokens": 2048,
        "thinking": {"type": "adaptive"},
        "messages": [{"role": "user", "content": "hi"}],
    }


def tool_round(tool_id: str = "toolu_1") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": tool_id, "name": "read_log", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id}]},
    ]


def with_messages(*messages: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body["messages"] = list(messages)

    return edit


def set_field(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = body
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value

    return edit


GREP = {"name": "grep", "input_schema": {"type": "object"}, "defer_loading": True}
"""A deferred tool: what a ``tool_addition`` by reference names."""


def add_grep() -> Callable[[dict[str, Any]], None]:
    """A user message, then a system message adding the deferred ``grep`` tool by reference."""

    def edit(body: dict[str, Any]) -> None:
        body["tools"] = [GREP]
        body["messages"] = [
            {"role": "user", "content": "hi"},
            {
                "role": "system",
                "content": [
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}
                ],
            },
        ]

    return edit


def delete(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        del body[name]

    return edit


REFUSED = [
    ("missing-model", delete("model"), "model: Field required"),
    ("missing-max-tokens", delete("max_tokens"), "max_tokens: Field required"),
    ("zero-max-tokens", set_field("max_tokens", 0), "max_tokens: Input should be an integer"),
    ("no-messages", set_field("messages", []), "messages: at least one message is required"),
    (
        "null-field",
        set_field("metadata", {"user_id": None}),
        "metadata.user_id: Input should not be null",
    ),
    (
        "unknown-field",
        set_field("temperature_x", 1),
        "temperature_x: Extra inputs are not permitted",
    ),
    (
        "bad-role",
        with_messages({"role": "robot", "content": "hi"}),
        "messages.0.role: Input should be 'user', 'assistant' or 'system'",
    ),
    (
        "empty-content",
        with_messages({"role": "user", "content": []}),
        "messages.0: all messages must have non-empty content",
    ),
    (
        "empty-string-content",
        with_messages({"role": "user", "content": ""}),
        "messages.0: all messages must have non-empty content",
    ),
    (
        "empty-text-block",
        with_messages({"role": "user", "content": [{"type": "text", "text": " "}]}),
        "messages.0.content.0.text: text content blocks must contain non-whitespace text",
    ),
    (
        "empty-text-in-tool-result",
        with_messages(
            *tool_round()[:2],
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": ""}],
                    }
                ],
            },
        ),
        "messages.2.content.0.content.0.text: text content blocks must contain",
    ),
    (
        "thinking-in-user-message",
        with_messages(
            {
                "role": "user",
                "content": [
                    {"type": "thinking", "thinking": "x", "signature": SIGNATURE_PLACEHOLDER}
                ],
            }
        ),
        "messages.0.content.0.type: 'thinking' blocks are not permitted in user messages",
    ),
    (
        "unknown-block-in-user-message",
        with_messages({"role": "user", "content": [{"type": "hologram"}]}),
        "messages.0.content.0.type: 'hologram' blocks are not permitted in user messages",
    ),
    (
        "tool-result-in-assistant-message",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
        ),
        "messages.1.content.0.type: 'tool_result' blocks are not permitted in assistant messages",
    ),
    (
        "thinking-without-signature",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]},
            {"role": "user", "content": "next"},
        ),
        "messages.1.content.0.signature: Field required",
    ),
    (
        "tool-use-answered-in-part",
        with_messages(
            {"role": "user", "content": "read both"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "read_log", "input": {}},
                    {"type": "tool_use", "id": "toolu_2", "name": "read_log", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_2",
    ),
    (
        "stray-tool-result",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9"}]},
        ),
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9",
    ),
    (
        "result-two-messages-late",
        with_messages(
            *tool_round()[:2],
            {"role": "user", "content": "wait"},
            {"role": "assistant", "content": "ok"},
            tool_round()[2],
        ),
        "messages.4.content.0: unexpected `tool_use_id` found in `tool_result` blocks",
    ),
    (
        "duplicate-tool-use-id-in-one-turn",
        with_messages(
            {"role": "user", "content": "read it twice"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "read_log", "input": {}},
                    {"type": "tool_use", "id": "toolu_1", "name": "read_log", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
        ),
        "messages.1.content.1: `tool_use` ids must be unique",
    ),
    (
        "output-format-without-its-beta",
        set_field("output_format", {"type": "json_schema", "schema": {"type": "object"}}),
        "output_format: Extra inputs are not permitted",
    ),
    (
        "null-setting-of-a-custom-tool",
        set_field(
            "tools",
            [{"name": "read_log", "description": None, "input_schema": {"type": "object"}}],
        ),
        "tools.0.description: Input should not be null",
    ),
    (
        "tool-use-without-input",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x"}]},
        ),
        "messages.1.content.0.input: Field required",
    ),
    (
        "clear-at-without-beta",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "note", "clear_at": "next_user_message"},
        ),
        f"messages.1.clear_at: 'clear_at' requires the beta header `anthropic-beta: "
        f"{SYSTEM_CLEAR_AT_BETA}`",
    ),
    (
        "tool-addition-without-beta",
        add_grep(),
        f"messages.1.content.0.type: 'tool_addition' requires the beta header `anthropic-beta: "
        f"{TOOL_CHANGES_BETA}`",
    ),
    (
        "output-config-without-beta",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [], "output_config": {"effort": "low"}},
        ),
        f"messages.1.output_config: 'output_config' requires the beta header `anthropic-beta: "
        f"{OUTPUT_CONFIG_BETA}`",
    ),
    (
        "inline-tool-without-beta",
        with_messages(
            {"role": "user", "content": "hi"},
            {
                "role": "system",
                "content": [
                    {
                        "type": "tool_addition",
                        "tool": {"type": "tool_definition", "definition": {"name": "x"}},
                    }
                ],
            },
        ),
        f"messages.1.content.0.tool.type: 'tool_definition' requires the beta header "
        f"`anthropic-beta: {INLINE_TOOLS_BETA}`",
    ),
    (
        "system-message-first",
        with_messages(
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}
        ),
        "messages.0: a `system` message must come right after a `user` message",
    ),
    (
        "small-thinking-budget",
        set_field("thinking", {"type": "enabled", "budget_tokens": 100}),
        "thinking.budget_tokens: Input should be an integer of at least 1024",
    ),
    (
        "unknown-thinking-type",
        set_field("thinking", {"type": "sometimes"}),
        "thinking.type: Input should be one of",
    ),
    (
        "system-empty-text",
        set_field("system", [{"type": "text", "text": ""}]),
        "system.0.text: text content blocks must contain non-whitespace text",
    ),
    (
        "duplicate-tool-names",
        set_field("tools", [{"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}]),
        "tools.1: Tool names must be unique",
    ),
]


@pytest.fixture
def client() -> Iterator[anthropic.Anthropic]:
    with Simulator().sync_client() as c:
        yield c


@pytest.mark.parametrize(("edit", "match"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_the_api_refusals_are_400s_naming_the_place(
    client: anthropic.Anthropic, edit: Callable[[dict[str, Any]], None], match: str
) -> None:
    """VENDOR_RULES 16-19 changed the system-message cases: one first in the list is refused
    (it must follow a user message) and a missing beta names the beta."""
    body = base()
    edit(body)

    with pytest.raises(anthropic.BadRequestError, match=match) as caught:
        # The SDK's raw post: its create() checks required and unknown arguments client-side.
        client.post("/v1/messages?beta=true", body=body, cast_to=object)

    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": ANY},
    }


ACCEPTED = [
    (
        "tool-use-answered-with-text",  # Mirascope, ellmer: a forced call (issue 28 item 9)
        with_messages(*tool_round()[:2], {"role": "user", "content": "and?"}),
        [],
    ),
    (
        "assistant-first",  # pydantic-ai recorded one (HTTP 200; issue 28 item 10)
        with_messages({"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}),
        [],
    ),
    (
        "whitespace-text-beside-other-content",  # llm-anthropic, ruby_llm (issue 28 item 7)
        with_messages(
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "\n\n"}, {"type": "text", "text": "Hello."}],
            },
            {"role": "user", "content": "next"},
        ),
        [],
    ),
    (
        "consecutive-user-messages",
        with_messages({"role": "user", "content": "hi"}, {"role": "user", "content": "again"}),
        [],
    ),
    (
        "tool-round-split-over-merged-messages",
        with_messages(
            *tool_round()[:2],
            {"role": "user", "content": [{"type": "text", "text": "here:"}]},
            tool_round()[2],
        ),
        [],
    ),
    (
        "unknown-block-in-assistant-message",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "server_widget", "id": "w1"}]},
            {"role": "user", "content": "next"},
        ),
        [],
    ),
    (
        "empty-final-assistant-prefill",
        with_messages({"role": "user", "content": "hi"}, {"role": "assistant", "content": []}),
        [],
    ),
    (
        "clear-at-with-its-beta",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "note", "clear_at": "next_user_message"},
        ),
        [SYSTEM_CLEAR_AT_BETA],
    ),
    ("tool-addition-with-its-beta", add_grep(), [TOOL_CHANGES_BETA]),
    (
        "output-config-with-its-beta",
        with_messages(
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [], "output_config": {"effort": "low"}},
        ),
        [OUTPUT_CONFIG_BETA],
    ),
    (
        "null-inside-a-tool-input-is-data",
        with_messages(
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "read_log", "input": {"path": None}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
        ),
        [],
    ),
    (
        "tool-use-id-used-again-in-a-later-round",  # pydantic-ai replaying another provider's
        with_messages(*tool_round(), *tool_round()[1:]),  # history (a recorded 200)
        [],
    ),
    (
        "null-settings-of-a-server-tool",  # pydantic-ai's web search and fetch (recorded 200s)
        set_field(
            "tools",
            [
                {
                    "type": "web_search_20250305",
                    "name": "web_search",
                    "allowed_domains": None,
                    "blocked_domains": None,
                    "max_uses": None,
                    "user_location": None,
                },
                {
                    "type": "web_fetch_20250910",
                    "name": "web_fetch",
                    "allowed_domains": None,
                    "blocked_domains": None,
                    "citations": None,
                    "max_content_tokens": None,
                    "max_uses": None,
                },
            ],
        ),
        [],
    ),
    (
        "output-format-with-its-beta",  # Mirascope's structured output (recorded 200s); the
        set_field(  # installed SDK names it no more: it rides in ``extra_body``
            "extra_body",
            {"output_format": {"type": "json_schema", "schema": {"type": "object"}}},
        ),
        ["structured-outputs-2025-11-13"],
    ),
    (
        "block-binding-with-its-beta",
        set_field("thinking", {"type": "adaptive", "block_binding": {}}),
        [BINDING_BETA],
    ),
]


@pytest.mark.parametrize(("edit", "betas"), [r[1:] for r in ACCEPTED], ids=[r[0] for r in ACCEPTED])
def test_what_the_api_accepts_is_answered(
    client: anthropic.Anthropic, edit: Callable[[dict[str, Any]], None], betas: list[str]
) -> None:
    body = base()
    edit(body)

    reply = client.beta.messages.create(**copy.deepcopy(body), betas=betas)

    assert reply.role == "assistant"


def test_a_body_that_is_not_json_is_a_400_in_the_api_shape() -> None:
    sim = Simulator()
    with httpx2.Client(transport=sim.transport(), base_url="http://sim.invalid") as raw:
        response = raw.post(
            "/v1/messages", content=b"{not json", headers={"anthropic-version": "2023-06-01"}
        )

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["message"].startswith("There was an error parsing the body")
    assert sim.requests == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cut \\ud83d", "no low surrogate in string"),
        ("cut \\ude00 twice", "invalid high surrogate in string"),
    ],
)
def test_a_lone_surrogate_escape_is_a_400_as_the_api_answers_it(text: str, message: str) -> None:
    """A tool's output cut inside an emoji, as clients report the API refusing it; the
    simulator failed on it with a 500. A whole pair is one character and is taken."""
    sim = Simulator()
    bodies = [
        json.dumps(base()).replace('"content": "hi"', f'"content": "{words}"').encode()
        for words in (text, "whole \\ud83d\\ude00")
    ]
    with httpx2.Client(transport=sim.transport(), base_url="http://sim.invalid") as raw:
        answers = [
            raw.post("/v1/messages", content=body, headers={"anthropic-version": "2023-06-01"})
            for body in bodies
        ]

    assert answers[0].status_code == 400
    assert answers[0].json()["error"] == {
        "type": "invalid_request_error",
        "message": f"The request body is not valid JSON: {message}",
    }
    assert answers[1].status_code == 200
    assert len(sim.requests) == 1


def test_a_request_without_the_version_header_is_refused() -> None:
    with httpx2.Client(transport=Simulator().transport(), base_url="http://sim.invalid") as raw:
        response = raw.post("/v1/messages", json=base())

    assert (response.status_code, response.json()["error"]["message"]) == (
        400,
        "anthropic-version: header is required",
    )


def test_another_endpoint_is_a_404_not_found_error(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError, match="GET /v1/models is not served"):
        client.models.list()
