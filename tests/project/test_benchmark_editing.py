"""The context-editing benchmark (issue #30) runs on toy sizes and reports its keys; its one
deterministic figure, that the server's clearing costs no thinking, is checked."""

from __future__ import annotations

from pathlib import Path

from benchmarks._editing import (
    EDITING_KEYS,
    EditingConfig,
    add_editing,
    editing_figures,
    editing_rows,
)


def test_the_editing_session_reports_its_keys_and_the_server_clearing_loses_no_thinking(
    tmp_path: Path,
) -> None:
    figures = editing_figures(EditingConfig.tiny(), tmp_path)
    report = add_editing({"targets": {}, "details": {}}, figures)

    assert set(EDITING_KEYS) <= set(report)
    assert set(EDITING_KEYS) <= set(report["targets"])
    assert report["editing_kept_share"] == 1.0  # every block sent before a clear is sent after
    assert figures["client_kept_share"] < 1.0  # the fold alone loses the folded turns' thinking
    assert figures["turns_before_fold"]["client"] >= 1
    assert figures["turns_before_fold"]["editing"] > figures["turns_before_fold"]["client"]
    assert 0 < report["cache_read_share_editing"] <= 1
    assert "`editing_turns_ratio`" in editing_rows(report)
