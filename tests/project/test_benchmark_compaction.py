"""The staying-inside-the-window benchmark (issue 29) runs its three strategies on toy sizes.

No figure's target is asserted (toy sizes mean nothing), only what holds at any size: every
compaction's kept replies still send their thinking, the session is many windows long, and a
tool-heavy variant is the same session with larger tool results.
"""

from __future__ import annotations

import asyncio

from benchmarks._compaction import (
    COMPACTION_KEYS,
    STRATEGIES,
    SessionConfig,
    compaction_figures,
    resident_session,
)


def test_the_session_kept_inside_its_window_three_ways_reports_each_figure() -> None:
    figures = compaction_figures(SessionConfig.tiny())

    assert set(COMPACTION_KEYS) <= set(figures["targets"]) & set(figures)
    assert figures["compaction_kept_share"] == 1.0
    assert set(figures["input_tokens_per_turn"]) == set(STRATEGIES)
    session = figures["compaction_session"]
    assert session["compactions"] >= 2
    assert session["history_over_window"] > 2
    assert session["kept_thinking_blocks"] > 0
    assert session["thinking_sent"]["compact"] > session["thinking_sent"]["window"]


def test_a_tool_heavy_session_is_the_same_session_with_larger_tool_results() -> None:
    light = asyncio.run(resident_session("window", SessionConfig.tiny()))
    heavy = asyncio.run(
        resident_session(
            "window",
            SessionConfig(turns=16, window_tokens=1_200, system_words=100, tool_result_words=200),
        )
    )

    assert light.turns == heavy.turns
    assert heavy.history_tokens > 1.5 * light.history_tokens
