"""Stage 3, render: extend the branch's kept render by what was stored since (O(new)), or
restore its snapshot, or render the window from the store."""

from __future__ import annotations

from context_manager._model._head import Head

from ._branch import CacheKey
from ._render import RenderContext
from ._run import Draft, Run


def render(run: Run, head: Head, ctx: RenderContext, cache_key: CacheKey) -> Draft:
    """The first draft: the render under ``head`` (see ``Compiler.render_cached``)."""
    rendered = run.engine.render_cached(run, cache_key, ctx)
    state = rendered.state
    return Draft(
        state=state,
        head=head,
        base_head=head,
        ctx=ctx,
        cache_key=cache_key,
        anchor=run.record.anchored_head,
        rendered=rendered,
        start_before=state.start,
        appended_before=state.last_change is not None,
    )
