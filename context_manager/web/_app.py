"""The console as an ASGI application (Starlette, imported lazily: the ``web`` extra).

Invariants: every route needs a principal (a bearer token in the ``Authorization`` header, the
``cm_token`` cookie, or ``?token=`` once, which sets the cookie and redirects to the same page
without it); no principal answers 401 and shows nothing; anything the principal may not see
answers the same 404 as a missing agent; reasoning text leaves the server only as the answer to
``/reasoning`` or on the live stream, and only to its asker or the owner.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from context_manager._model._errors import MessageNotFound
from context_manager._model._messages import ASKER_KEY
from context_manager._reasoning._audit import DEFAULT_MAX_BYTES, DEFAULT_MAX_PARTS, read_reasoning
from context_manager._reasoning._live import LiveSubscription, ReasoningEvent

from ._access import Access, Principal, reads_reasoning, sees_agent
from ._html import agents_page, message_page, transcript_page
from ._source import ConsoleSource, pick_branch, read_transcript

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

COOKIE = "cm_token"
"""The HttpOnly cookie a ``?token=`` visit sets (SameSite=Strict, the console's path)."""

NOT_FOUND = "No such agent, reply or page."
"""The one 404 text: hidden and missing things answer alike."""

INSTALL_HINT = "the console needs the web extra: pip install 'thinking-context-manager[web]'"

Handler = Callable[["Console", "Request", Principal], Awaitable["Response"]]


class Console:
    """What the routes share: the source, the access table and the reasoning bounds."""

    def __init__(
        self,
        source: ConsoleSource,
        access: Access,
        *,
        max_parts: int = DEFAULT_MAX_PARTS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.source = source
        self.access = access
        self.max_parts = max_parts
        self.max_bytes = max_bytes

    def visible(self, principal: Principal, agent: str) -> bool:
        return sees_agent(principal, agent, self.source.agents())

    def may_read(self, principal: Principal, agent: str, asker: str | None) -> bool:
        return reads_reasoning(principal, agent, self.source.agents(), asker)


def _html(body: str, status: int = 200) -> Response:
    from starlette.responses import HTMLResponse

    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def not_found() -> Response:
    return _html(message_page("Not found", NOT_FOUND), 404)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.cookies.get(COOKIE)


def _from_query(request: Request, access: Access) -> Response | None:
    """A ``?token=`` visit: set the cookie and send the browser to the page without it."""
    from starlette.responses import RedirectResponse

    token = request.query_params.get("token")
    if token is None:
        return None
    if access.principal(token) is None:
        return _html(message_page("Token required", "That token is not known here."), 401)
    rest = {k: v for k, v in request.query_params.multi_items() if k != "token"}
    target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
    answer = RedirectResponse(target, status_code=303)
    answer.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/", secure=False)
    return answer


def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """The route ``handler`` behind the token check."""

    async def route(request: Request) -> Response:
        console: Console = request.app.state.console
        redirect = _from_query(request, console.access)
        if redirect is not None:
            return redirect
        principal = console.access.principal(_bearer(request))
        if principal is None:
            words = "Open the console with ?token=YOUR_TOKEN once, or send a bearer token."
            return _html(message_page("Token required", words), 401)
        return await handler(console, request, principal)

    return route


async def agents_route(console: Console, request: Request, principal: Principal) -> Response:
    rows = []
    for agent in console.source.agents():
        if not console.visible(principal, agent):
            continue
        cm = console.source.context(agent)
        current = cm.store.current_branch_name(agent)
        names = [r.ref.name for r in cm.store.branches(agent)]
        rows.append((agent, sorted(names, key=lambda n: n != current), current))
    return _html(agents_page(principal.name, rows))


async def transcript_route(console: Console, request: Request, principal: Principal) -> Response:
    agent = request.path_params["agent"]
    if not console.visible(principal, agent):
        return not_found()
    cm = console.source.context(agent)
    record = pick_branch(cm, request.query_params.get("branch"))
    if record is None:
        return not_found()
    view = read_transcript(cm, record)
    branches = [r.ref.name for r in cm.store.branches(agent)]
    body = transcript_page(
        agent,
        record.ref.name,
        branches,
        view,
        lambda asker: console.may_read(principal, agent, asker),
        live=console.source.live(agent) is not None,
        principal=principal.name,
    )
    return _html(body)


async def reasoning_route(console: Console, request: Request, principal: Principal) -> Response:
    """``GET /agents/A/reasoning?cursor=REPLY``: one reply's reasoning, bounded."""
    from starlette.responses import JSONResponse

    agent = request.path_params["agent"]
    cursor = request.query_params.get("cursor", "")
    if not cursor or not console.visible(principal, agent):
        return not_found()
    cm = console.source.context(agent)
    try:
        reply = cm.get_message(cursor)
    except MessageNotFound:
        return not_found()
    asker = reply.metadata.extra.get(ASKER_KEY)
    if reply.role != "assistant" or not console.may_read(
        principal, agent, asker if isinstance(asker, str) else None
    ):
        return not_found()
    found = read_reasoning(
        cm, message_id=reply.id, max_parts=console.max_parts, max_bytes=console.max_bytes
    )
    parts = [
        {
            "block": p.block,
            "kind": p.kind,
            "status": p.status,
            "size": p.size,
            "digest": p.digest,
            "text": p.text.value if p.text is not None else None,  # deliberately: untrusted
        }
        for p in found.parts
    ]
    body = {
        "agent": agent,
        "reply": reply.id,
        "parts": parts,
        "truncated": found.truncated,
        "bytes": found.bytes,
        "untrusted": True,
    }
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


def sse_frame(event: ReasoningEvent) -> str:
    """One SSE frame for ``event`` (``reasoning-partial``, ``reasoning``, ``reset``, ``done``)."""
    name = "reasoning-partial" if event.kind == "partial" else event.kind
    data: dict[str, Any] = {"call": event.call}
    if event.text is not None:
        data["text"] = event.text.value  # deliberately: sent only to a permitted reader
    if event.kind == "partial":
        data["clipped"] = event.clipped
    if event.reply is not None:
        data["reply"] = event.reply
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _frames(
    console: Console, principal: Principal, agent: str, events: LiveSubscription
) -> AsyncIterator[str]:
    try:
        yield ": connected\n\n"
        async for event in events:
            if event.kind in ("partial", "reasoning") and not console.may_read(
                principal, agent, event.asker
            ):
                continue
            yield sse_frame(event)
    finally:
        await events.aclose()


async def live_route(console: Console, request: Request, principal: Principal) -> Response:
    """``GET /agents/A/live``: server-sent events of the agent's live reasoning."""
    from starlette.responses import StreamingResponse

    agent = request.path_params["agent"]
    if not console.visible(principal, agent):
        return not_found()
    hub = console.source.live(agent)
    if hub is None:
        return not_found()
    return StreamingResponse(
        _frames(console, principal, agent, hub.subscribe()),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def create_app(
    source: ConsoleSource,
    access: Access,
    *,
    max_parts: int = DEFAULT_MAX_PARTS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Starlette:
    """The console's ASGI app over ``source``, for the principals ``access`` names.

    ``/reasoning`` answers at most ``max_parts`` parts and ``max_bytes`` bytes of text (256 and
    1 MiB by default) with ``truncated: true`` past either; nothing past a bound is read.

    Raises:
        ImportError: Starlette is not installed (the ``web`` extra).
    """
    try:
        from starlette.applications import Starlette
        from starlette.routing import Route
    except ImportError as err:  # pragma: no cover - the web extra is part of the test extra
        raise ImportError(INSTALL_HINT) from err
    routes = [
        Route("/", guarded(agents_route)),
        Route("/agents/{agent:path}/reasoning", guarded(reasoning_route)),
        Route("/agents/{agent:path}/live", guarded(live_route)),
        Route("/agents/{agent:path}", guarded(transcript_route)),
    ]
    app = Starlette(routes=routes)
    app.state.console = Console(source, access, max_parts=max_parts, max_bytes=max_bytes)
    return app
