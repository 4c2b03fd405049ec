"""``_compile._releases.Releases``: a branch's releases whose scan for those recorded since a
round began is kept until they change (issue 36: a tool loop's compile walked every release)."""

from __future__ import annotations

from context_manager._compile._releases import Releases
from context_manager._store._protocol import Release


def test_a_scan_is_answered_again_until_the_releases_change_and_then_afresh() -> None:
    releases = Releases({"msg_1": Release("msg_1", 0, True, at_sequence=1)})
    releases["msg_5"] = Release("msg_5", 0, False, at_sequence=9)
    assert releases.recorded_since(8) == {"msg_5"}
    assert releases.recorded_since(10) == frozenset()

    releases["msg_5"] = Release("msg_5", 0, True, at_sequence=9)  # reported since
    assert releases.recorded_since(8) == frozenset()
    releases.update({"msg_7": Release("msg_7", 1, False, at_sequence=12)})
    assert releases.recorded_since(8) == {"msg_7"}
    releases.pop("msg_7")
    assert releases.recorded_since(8) == frozenset()
    releases.setdefault("msg_8", Release("msg_8", 0, False, at_sequence=8))
    assert releases.recorded_since(8) == {"msg_8"}
    del releases["msg_8"]
    assert releases.recorded_since(8) == frozenset()
    releases["msg_9"] = Release("msg_9", 0, False, at_sequence=None)  # an older store's
    releases.clear()
    assert releases.recorded_since(0) == frozenset()
    assert releases.version == 8
