"""``cm.reconcile(params)``: a framework's own per-call message list, turned into our request.

Each test drives the context the way a framework does: it keeps its own list (user words, its own
copy of each reply), rebuilds ``system`` and ``tools`` per call, and hands the whole parameters
over; the simulator (the real SDK client in-process) answers and checks every request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from helpers import (
    REPLY_COPIES,
    RacedStore,
    framework_copy,
    framework_params,
    invalid_calls,
    reworded,
    thinking_signatures,
    unmarked,
)
from structlog.testing import capture_logs

from context_manager import (
    REASONING_LOSS_KIND,
    CompileResult,
    ContextManager,
    FrameworkParamsInvalid,
    MessageMeta,
    SQLiteStore,
    Store,
    TextBlock,
    Window,
)
from context_manager.simulator import OUTPUT_CONFIG_BETA, SYSTEM_CLEAR_AT_BETA, Simulator


async def turn(
    client: anthropic.AsyncAnthropic,
    cm: ContextManager,
    messages: list[dict[str, Any]],
    words: str | None,
    *,
    style: str = "as-sent",
    **params: Any,
) -> CompileResult:
    """One framework call: its words appended to its list, reconciled, sent, recorded, and its
    own copy of the reply appended to its list."""
    if words is not None:
        messages.append({"role": "user", "content": words})
    result = cm.reconcile(framework_params(messages, **params))
    reply = await client.beta.messages.create(**result.request)
    cm.record_reply(reply, result)
    messages.append(framework_copy(reply, style))
    return result


def own(cm: ContextManager) -> list[str]:
    """The framework's messages as stored (library-owned ones left out): role and first text."""
    out = []
    for message in cm.messages():
        if message.metadata.kind is None and not message.metadata.system_notice:
            first = next((b for b in message.content if isinstance(b, TextBlock)), None)
            out.append(f"{message.role}:{first.text if first else ''}")
    return out


@pytest.fixture
def sim() -> Simulator:
    return Simulator()


async def test_new_messages_are_stored_once_and_a_retried_call_stores_nothing(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    sim.fail_next(1, 529)
    messages.append({"role": "user", "content": "two"})
    result = cm.reconcile(framework_params(messages))
    with pytest.raises(anthropic.APIStatusError):
        await client.beta.messages.create(**result.request)
    stored = own(cm)
    await turn(client, cm, messages, None)  # the framework retries the same call
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.stored == ()
    assert stored == ["user:one", "assistant:You said: one", "user:two"]
    assert own(cm) == [*stored, "assistant:You said: two"]
    assert invalid_calls(sim) == ["status 529"]


@pytest.mark.parametrize("style", REPLY_COPIES)
async def test_a_frameworks_copy_of_a_reply_is_matched_and_the_recorded_bytes_go_out(
    sim: Simulator, store: Store, style: str
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    first = await turn(client, cm, messages, "one", style=style)
    await turn(client, cm, messages, "two", style=style)
    third = await turn(client, cm, messages, "three", style=style)
    assert len(own(cm)) == 6
    assert len(thinking_signatures(third.request)) == 2
    sent = third.request["messages"][1]
    recorded = sim.responses[0]["content"]
    assert unmarked(sent["content"]) == recorded
    assert first.thinking_strip is None
    assert third.thinking_strip is None
    assert invalid_calls(sim) == []


def searching_script(request: dict[str, Any]) -> list[Any]:
    """Replies that search the web on the server, as web search and code execution return them
    (a server tool's call and its result inside the reply), then answer."""
    return [
        {"type": "thinking", "thinking": "I should look it up."},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {"type": "web_search_result", "url": "https://a.example", "page_age": None}
            ],
        },
        {"type": "text", "text": "Found it."},
    ]


@pytest.mark.parametrize("style", REPLY_COPIES)
async def test_a_reply_holding_a_server_tools_result_is_matched_to_the_frameworks_copy(
    store: Store, style: str
) -> None:
    """pydantic-ai, chatlas and Mirascope send such replies back (recorded requests). The
    reconcile failed on them (``KeyError``) before such blocks had a comparison key of their
    own, and took a copy that dropped a null inside the result (``page_age``) for an edit."""
    sim = Simulator(script=searching_script)
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "Search for it.", style=style)

    second = await turn(client, cm, messages, "And again?", style=style)

    assert len(own(cm)) == 4
    assert unmarked(second.request["messages"][1]["content"]) == sim.responses[0]["content"]
    assert len(thinking_signatures(second.request)) == 1
    assert second.thinking_strip is None
    assert invalid_calls(sim) == []


async def test_a_changed_system_and_tools_are_appended_and_nothing_is_stripped(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one", system="Run 1.")
    extra = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}
    tools = [*framework_params([])["tools"], extra]
    result = await turn(client, cm, messages, "two", system="Run 2.", tools=tools)
    assert unmarked(result.request["system"]) == [{"type": "text", "text": "Run 1."}]
    assert result.thinking_strip is None
    assert result.appended
    assert len(cm.messages(kind="head-change")) == 1
    assert invalid_calls(sim) == []
    assert len(thinking_signatures(result.request)) == 1


async def test_an_edit_of_an_earlier_message_is_stored_as_an_edit_and_strips_with_its_cause(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    await turn(client, cm, messages, "two")
    first_id = cm.messages()[0].id
    messages[0] = {"role": "user", "content": "one, reworded"}
    result = await turn(client, cm, messages, "three")
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.edited == (first_id,)
    assert own(cm)[0] == "user:one, reworded"
    assert result.thinking_strip is not None
    assert result.thinking_strip.cause == "messages"
    assert len(result.thinking_strip.replies) == 2
    assert invalid_calls(sim) == []


async def test_a_reply_reworded_with_its_thinking_sent_back_keeps_that_thinking(
    sim: Simulator, store: Store
) -> None:
    """A change invalidates only the thinking after it (provider rule 5): the reply's own
    thinking, which the framework sent back as recorded, stands before the changed words."""
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    await turn(client, cm, messages, "two")
    messages[3] = reworded(messages[3])

    result = await turn(client, cm, messages, "three")

    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.edited == (cm.messages()[3].id,)
    assert cm.last_reconciliation.edit_lost == ()
    assert len(thinking_signatures(result.request)) == 2
    assert result.thinking_strip is None
    assert invalid_calls(sim) == []


@pytest.mark.parametrize("style", ["no-thinking", "tagged-thinking"])
async def test_a_reply_reworded_without_its_thinking_reports_that_thinking_lost(
    sim: Simulator, store: Store, style: str
) -> None:
    """The edit is stored as the framework sent it, so the reply's recorded thinking is gone
    from the branch: the strip says so (it said nothing before), as for a host fold."""
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one", style=style)
    await turn(client, cm, messages, "two", style=style)
    reply = cm.messages()[3].id
    messages[3] = reworded(messages[3])

    result = await turn(client, cm, messages, "three", style=style)

    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.edit_lost == (reply,)
    assert cm.last_reconciliation.edit_lost_blocks == 1
    assert result.thinking_strip is not None
    assert result.thinking_strip.cause == "messages"
    assert result.thinking_strip.replies == (reply,)
    assert len(thinking_signatures(result.request)) == 1
    assert invalid_calls(sim) == []


async def test_a_sliding_window_is_followed_as_a_host_fold_and_reported_in_the_strip(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    for words in ("one", "two", "three"):
        await turn(client, cm, messages, words)
    del messages[:2]  # the framework keeps its last turns only
    result = await turn(client, cm, messages, "four")
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.host_fold is not None
    assert [m["role"] for m in result.request["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert result.thinking_strip is not None
    assert result.thinking_strip.cause == "messages"
    assert cm.last_reconciliation.covered == (cm.messages()[1].id,)  # the reply it dropped
    assert len(result.thinking_strip.replies) == 3  # that one, and the two kept after the cut
    assert invalid_calls(sim) == []
    nxt = await turn(client, cm, messages, "five")
    assert cm.last_reconciliation.host_fold is None
    assert nxt.thinking_strip is None
    assert len(thinking_signatures(nxt.request)) == 1  # the reply made after the fold


async def test_a_frameworks_own_summary_is_followed_and_matched_on_later_calls(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    for words in ("one", "two", "three"):
        await turn(client, cm, messages, words)
    summary = {"role": "user", "content": "Summary: the user counted to two."}
    messages[:4] = [summary, {"role": "assistant", "content": "Understood."}]
    result = await turn(client, cm, messages, "four")
    texts = [b.get("text") for m in result.request["messages"] for b in m["content"]]
    assert "Summary: the user counted to two.\n\nUnderstood." in texts
    assert result.thinking_strip is not None
    await turn(client, cm, messages, "five")
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.host_fold is None
    assert cm.last_reconciliation.edited == ()
    assert invalid_calls(sim) == []


async def test_with_its_own_strategy_the_library_ignores_the_frameworks_truncation(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada", strategy=Window(max_tokens=100_000))
    client = sim.client()
    messages: list[dict[str, Any]] = []
    for words in ("one", "two", "three"):
        await turn(client, cm, messages, words)
    del messages[:4]
    result = await turn(client, cm, messages, "four")
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.host_fold is None
    assert len(result.request["messages"]) == 7
    assert result.thinking_strip is None
    assert len(thinking_signatures(result.request)) == 3


async def test_notices_and_head_changes_of_the_library_are_never_taken_for_edits(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one", system="Run 1.")
    await turn(client, cm, messages, "two", system="Run 2.")
    meta = MessageMeta(system_notice=True, kind=REASONING_LOSS_KIND, target="ada")
    cm.add_message("system", [TextBlock("[reasoning] ada: a notice.")], metadata=meta)
    result = await turn(client, cm, messages, "three", system="Run 2.")
    done = cm.last_reconciliation
    assert done is not None
    assert done.edited == ()
    assert done.host_fold is None
    assert done.rewound_to is None
    assert result.thinking_strip is None
    assert invalid_calls(sim) == []


async def test_the_same_framework_list_after_a_restart_reconciles_to_the_same_request(
    sim: Simulator, tmp_path: Path
) -> None:
    path = tmp_path / "ada.db"
    store = SQLiteStore(path)
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one", system="Run 1.")
    await turn(client, cm, messages, "two", system="Run 2.")
    messages.append({"role": "user", "content": "three"})
    before = cm.reconcile(framework_params(messages, system="Run 3."))
    store.close()
    reopened = SQLiteStore(path)
    after = ContextManager.open(reopened, namespace="ada").reconcile(
        framework_params(messages, system="Run 3.")
    )
    assert after.request == before.request
    reopened.close()


async def test_a_rewind_whose_branch_name_another_host_took_meanwhile_goes_on_under_the_next(
    sim: Simulator, two_hosts: tuple[Store, Store]
) -> None:
    """Two hosts rewinding one agent at once both pick ``main~1``; the one the store refuses
    goes on as ``main~2`` instead of failing the framework's call."""
    first, second = two_hosts
    cm = ContextManager.open(RacedStore(first, second, "main~1"), namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    await turn(client, cm, messages, "two")
    del messages[2:]
    result = await turn(client, cm, messages, "two, asked otherwise")
    assert cm.current_branch().name == "main~2"
    assert [b.name for b in cm.list_branches()] == ["main", "main~1", "main~2"]
    asked = "two, asked otherwise"
    said = ["user:one", "assistant:You said: one", f"user:{asked}", f"assistant:You said: {asked}"]
    assert own(cm) == said
    assert len(thinking_signatures(result.request)) == 1
    assert invalid_calls(sim) == []


async def test_fewer_messages_than_before_rewind_onto_a_new_branch_and_the_old_one_keeps_them(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    await turn(client, cm, messages, "two")
    del messages[2:]  # the framework goes back to before "two" and asks something else
    result = await turn(client, cm, messages, "two, asked otherwise")
    assert cm.current_branch().name == "main~1"
    assert own(cm)[2] == "user:two, asked otherwise"
    assert len(own(cm)) == 4
    assert len(cm.messages(branch="main")) == 4
    assert result.thinking_strip is None
    assert len(thinking_signatures(result.request)) == 1
    assert invalid_calls(sim) == []


async def test_a_dry_reconcile_stores_nothing_and_shows_the_new_messages(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    await turn(client, cm, messages, "one")
    stored = own(cm)
    messages.append({"role": "user", "content": "two"})
    dry = cm.reconcile(framework_params(messages), dry_run=True)
    assert own(cm) == stored
    assert dry.dry
    assert dry.request["messages"][-1] == {
        "role": "user",
        "content": [{"type": "text", "text": "two"}],
    }


async def test_the_frameworks_betas_and_its_own_drop_block_go_out_with_the_request(
    store: Store,
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    thinking = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    params = framework_params(
        [{"role": "user", "content": "hello"}], betas=["some-beta-2026-01-01"], thinking=thinking
    )
    result = cm.reconcile(params)
    assert "some-beta-2026-01-01" in result.request["betas"]
    assert result.request["thinking"]["block_binding"] == {"prefix_mismatch_behavior": "drop_block"}


def test_params_without_a_model_or_a_messages_list_are_refused_with_a_clear_error(
    store: Store,
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    with pytest.raises(ValueError, match="model"):
        cm.reconcile({"messages": []})
    with pytest.raises(ValueError, match="messages"):
        cm.reconcile({"model": "claude-opus-5-5", "messages": "hello"})
    cm.add_message("user", "kept")
    with pytest.raises(FrameworkParamsInvalid, match="at least one message"):
        cm.reconcile({"model": "claude-opus-5-5", "messages": []})
    assert [m.role for m in cm.messages()] == ["user"]  # nothing folded, nothing stored


async def test_words_asked_twice_are_read_the_way_that_loses_no_thinking(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    for words in ("again", "other", "again"):
        await turn(client, cm, messages, words)
    del messages[:4]  # a window from the second "again", or a rewind after the first: the same
    result = await turn(client, cm, messages, "last")
    done = cm.last_reconciliation
    assert done is not None
    assert done.host_fold is None
    assert done.rewound_to == "main~1"  # read as a rewind: every reply before it keeps its thinking
    assert [m["role"] for m in result.request["messages"]] == ["user", "assistant", "user"]
    assert result.thinking_strip is None
    assert len(thinking_signatures(result.request)) == 1
    assert invalid_calls(sim) == []


async def test_a_frameworks_cache_markers_on_each_newest_message_never_pile_up(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    marker = {"type": "ephemeral"}
    for words in ("one", "two", "three", "four", "five", "six"):
        for message in messages:  # the framework moves its marker to the newest message
            if isinstance(message["content"], list):
                for block in message["content"]:
                    block.pop("cache_control", None)
        text = {"type": "text", "text": words, "cache_control": marker}
        messages.append({"role": "user", "content": [text]})
        result = await turn(client, cm, messages, None)
        sent = json.dumps(result.request)
        assert sent.count('"cache_control"') <= 4
    assert [call.status for call in sim.calls] == [200] * 6
    assert len(thinking_signatures(sim.requests[-1])) == 5


async def test_a_window_from_a_question_asked_twice_is_matched_where_more_of_it_matches(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []
    for words in ("please use probe", "other", "please use probe"):
        await turn(client, cm, messages, words)
        call = messages[-1]["content"][-1]
        if call["type"] == "tool_use":  # the framework runs the tool, then calls again
            answer = {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}
            messages.append({"role": "user", "content": [answer]})
            await turn(client, cm, messages, None)
    start = max(k for k, m in enumerate(messages) if m["content"] == "please use probe")
    del messages[:start]  # the window starts at the second question, whose tool call differs
    result = await turn(client, cm, messages, "last")
    done = cm.last_reconciliation
    assert done is not None
    assert done.rewound_to is None
    assert done.host_fold is not None
    assert cm.current_branch().name == "main"
    assert len(result.request["messages"]) == 5
    assert invalid_calls(sim) == []


async def test_a_rewind_after_a_followed_window_keeps_the_window_so_a_tool_round_stays_valid(
    sim: Simulator, store: Store
) -> None:
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = []

    def slide() -> None:  # the framework drops its two oldest messages
        del messages[:2]

    await turn(client, cm, messages, "a question")
    await turn(client, cm, messages, "a question")
    slide()
    await turn(client, cm, messages, "another one")
    slide()
    await turn(client, cm, messages, "another one")
    slide()  # read as a rewind to the first "another one": its window still starts there
    result = await turn(client, cm, messages, "please use probe")
    assert [m["content"][0]["text"] for m in result.request["messages"][::2]] == [
        "another one",
        "please use probe",
    ]
    call = messages[-1]["content"][-1]
    assert call["type"] == "tool_use"
    answer = {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}
    messages.append({"role": "user", "content": [answer]})
    closing = await turn(client, cm, messages, None)
    assert closing.thinking_strip is None  # the open round's thinking goes out, valid
    assert invalid_calls(sim) == []


CLEAR_AT = {"role": "system", "content": "Be terse for now.", "clear_at": "next_user_message"}
EFFORT = {"role": "system", "output_config": {"effort": "low"}}  # per-message effort, no content


async def test_a_frameworks_system_messages_keep_their_clear_at_and_output_config(
    sim: Simulator, store: Store
) -> None:
    """Provider rules 18, 19 and 21: the fields go out on the message where the framework put
    it. ``clear_at`` was dropped (the note stayed in force for good) and a message of effort
    alone was refused (``InvalidContent``, or no content at all)."""
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}, CLEAR_AT]
    await turn(client, cm, messages, None, betas=[SYSTEM_CLEAR_AT_BETA])
    messages += [{"role": "user", "content": "and now?"}, EFFORT]
    second = await turn(
        client, cm, messages, None, betas=[SYSTEM_CLEAR_AT_BETA, OUTPUT_CONFIG_BETA]
    )

    sent = [m for m in unmarked(second.request["messages"]) if m["role"] == "system"]
    assert sent == [
        {**CLEAR_AT, "content": [{"type": "text", "text": "Be terse for now."}]},
        {**EFFORT, "content": []},
    ]
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.edited == ()
    assert invalid_calls(sim) == []


async def test_a_dry_reconcile_appends_the_new_messages_with_their_fields_and_no_markers(
    store: Store,
) -> None:
    """What ``count_tokens`` counts: the new messages as the call would store them. Their
    markers went out as they came, after the compiler's own, so a one-hour marker after the
    compiler's five-minute one was refused (the API's order of TTLs)."""
    sim = Simulator()
    cm = ContextManager.open(store, namespace="ada")
    marked = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    params = framework_params([{"role": "user", "content": [marked]}, CLEAR_AT])

    dry = cm.reconcile({**params, "betas": [SYSTEM_CLEAR_AT_BETA]}, dry_run=True)
    request = {k: v for k, v in dry.request.items() if k != "max_tokens"}
    counted = await sim.client().beta.messages.count_tokens(**request)

    assert counted.input_tokens > 0
    assert dry.request["messages"][-2:] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {**CLEAR_AT, "content": [{"type": "text", "text": "Be terse for now."}]},
    ]


def citing_script(request: dict[str, Any]) -> list[Any]:
    """A cited answer, in three text blocks as the API returns one (the cited words apart)."""
    cited = {
        "type": "char_location",
        "cited_text": "The sky is blue.",
        "document_index": 0,
        "start_char_index": 0,
        "end_char_index": 16,
    }
    return [
        {"type": "thinking", "thinking": "The document says so."},
        {"type": "text", "text": "According to the document, "},
        {"type": "text", "text": "the sky is blue", "citations": [cited]},
        {"type": "text", "text": "."},
    ]


@pytest.mark.parametrize("joiner", ["", " "])
async def test_a_cited_reply_whose_texts_the_framework_joined_is_matched_and_sent_as_recorded(
    store: Store, joiner: str
) -> None:
    """chatlas, llm and ellmer keep a reply as its text joined (``"".join``): such a copy of
    a cited reply was taken for an edit, and the recorded reply was replaced by it, its
    citations gone and its thinking stripped."""
    sim = Simulator(script=citing_script)
    cm = ContextManager.open(store, namespace="ada")
    client = sim.client()
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "The sky is blue."},
        "citations": {"enabled": True},
    }
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [document, {"type": "text", "text": "The sky?"}]}
    ]
    await turn(client, cm, messages, None)
    texts = [b["text"] for b in messages.pop()["content"] if b["type"] == "text"]
    messages.append({"role": "assistant", "content": joiner.join(texts)})

    second = await turn(client, cm, messages, "Thanks.")

    assert unmarked(second.request["messages"][1]["content"]) == sim.responses[0]["content"]
    assert second.thinking_strip is None
    assert cm.last_reconciliation is not None
    assert cm.last_reconciliation.edited == ()
    assert invalid_calls(sim) == []


async def test_a_message_field_the_api_refuses_is_not_stored_and_that_is_logged(
    sim: Simulator, store: Store
) -> None:
    """An OpenAI-style ``name`` on a message: the API refuses it (400), the library leaves it
    out; it did so with nothing said."""
    cm = ContextManager.open(store, namespace="ada")
    named = {"role": "user", "content": "hi", "name": "bob"}

    with capture_logs() as logs:
        result = cm.reconcile(framework_params([named]))
    await sim.client().beta.messages.create(**result.request)

    dropped = [e for e in logs if e["event"] == "framework_message_fields_dropped"]
    assert [(e["role"], e["fields"]) for e in dropped] == [("user", ["name"])]
    assert unmarked(result.request["messages"]) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
    assert invalid_calls(sim) == []
