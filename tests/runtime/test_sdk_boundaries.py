"""Regressions of issue 28, items 15, 16 and 18: request settings the SDK has no keyword for, a
legacy alias and its dated id, and the simulator's typed facade."""

from __future__ import annotations

import inspect
import typing

import attrs
import pytest
from helpers import THINKING_HEAD, calling_script, runtime_on

from context_manager import ContextManager, Head, Store, ThinkingBinding
from context_manager._model._readability import same_model
from context_manager.runtime import Agent
from context_manager.simulator import Simulator

SAMPLING = {"temperature": 1.0, "top_p": 0.9, "top_k": 40}


async def test_a_setting_the_sdk_has_no_keyword_for_reaches_the_api_through_run_turn() -> None:
    sim = Simulator(script=calling_script())
    head = attrs.evolve(THINKING_HEAD, settings={**THINKING_HEAD.settings, "temperature": 1.0})
    ada = runtime_on(sim).register(Agent("ada", head))
    await ada.run_turn("hello")
    assert sim.requests[-1]["temperature"] == 1.0


def test_result_request_works_as_keywords_of_create_and_stream_with_the_installed_sdk(
    store: Store,
) -> None:
    sim = Simulator()
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "hello")
    head = Head(model="claude-opus-5-5", settings={"max_tokens": 64, **SAMPLING})
    request = cm.compile(head).request
    assert request["extra_body"] == SAMPLING
    with sim.sync_client() as client:
        made = client.beta.messages.create(**request)
        with client.beta.messages.stream(**request) as stream:
            streamed = stream.get_final_message()
    assert made.role == streamed.role == "assistant"
    assert [{k: r[k] for k in SAMPLING} for r in sim.requests] == [SAMPLING, SAMPLING]


def test_a_host_extra_body_is_kept_beside_the_moved_settings(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada")
    cm.add_message("user", "hello")
    head = Head(
        model="claude-opus-5-5",
        settings={"max_tokens": 64, "top_k": 5, "extra_body": {"service": "x"}},
    )
    assert cm.compile(head).request["extra_body"] == {"service": "x", "top_k": 5}


def test_a_legacy_alias_and_its_dated_id_are_one_model() -> None:
    assert same_model("claude-3-5-haiku-latest", "claude-3-5-haiku-20241022")
    assert same_model("claude-3-5-haiku", "claude-3-5-haiku-latest")
    assert not same_model("claude-3-5-haiku-latest", "claude-3-5-sonnet-20241022")
    assert not same_model("claude-3-5-haiku-latest", "claude-3-haiku-20240307")


def test_switching_between_a_legacy_alias_and_its_dated_id_strips_nothing(store: Store) -> None:
    cm = ContextManager.open(store, namespace="ada", binding=ThinkingBinding(drop_block=False))
    cm.add_message("user", "hello")
    alias = Head(model="claude-3-5-haiku-latest", settings={"max_tokens": 64})
    result = cm.compile(alias)
    cm.record_reply(
        [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "text", "text": "hi"},
        ],
        result,
    )
    cm.add_message("user", "again")
    dated = cm.compile(attrs.evolve(alias, model="claude-3-5-haiku-20241022"))
    assert dated.thinking_strip is None
    assert dated.request["messages"][1]["content"][0]["type"] == "thinking"


def test_simulator_verify_block_takes_a_typed_block() -> None:
    hints = typing.get_type_hints(Simulator.verify_block)
    assert hints["block"] is not typing.Any
    assert "Any" not in str(inspect.signature(Simulator.verify_block).parameters["block"])


@pytest.mark.parametrize("model", ["claude-3-5-haiku-latest"])
def test_a_legacy_alias_is_served_by_the_simulator(model: str) -> None:
    with Simulator().sync_client() as client:
        reply = client.beta.messages.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.model == model


def test_the_managed_clients_keywords_keep_the_moved_settings_for_a_call_not_for_a_count() -> None:
    from anthropic.resources.beta.messages import AsyncMessages

    from context_manager.adapters._calls import call_kwargs

    request = {"model": "claude-opus-5-5", "messages": [], "extra_body": {"temperature": 1.0}}
    called = call_kwargs(AsyncMessages.create, {**request, "max_tokens": 8, "top_k": 3}, {})
    counted = call_kwargs(AsyncMessages.count_tokens, request, {}, keep_unknown=False)
    assert called["extra_body"] == {"temperature": 1.0, "top_k": 3}
    assert "extra_body" not in counted
