"""``Call``: one request the simulator answered, as ``Simulator.calls`` lists it."""

from __future__ import annotations

from typing import Any

import attrs

from ._verify import BlockCheck


@attrs.frozen
class Call:
    """One answered request.

    Attributes:
        request: the parsed request body, as received.
        betas: the names in its ``anthropic-beta`` header, sorted.
        status: the HTTP status answered.
        response: the reply message, or the error body.
        stream: the request asked for a stream.
        dropped: the blocks removed, in request order.
        unoffered_calls: names of tools the reply called that were not offered at that point
            (removed by a ``tool_removal``, deferred and never added, or not declared).
    """

    request: dict[str, Any]
    betas: tuple[str, ...]
    status: int
    response: dict[str, Any]
    stream: bool
    dropped: tuple[BlockCheck, ...] = ()
    unoffered_calls: tuple[str, ...] = ()
