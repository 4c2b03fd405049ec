"""The console's pages as HTML strings: pure functions from views to markup.

Invariants: every stored string is escaped (``html.escape``, quotes included) and cleaned of
control characters before it is placed; no page embeds reasoning text (a reply's reasoning is
fetched on request by the page's script, from an endpoint that checks the audience); tool rounds
are ``<details>`` elements, open while the round waits for its results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from urllib.parse import quote

from ._chart import usage_chart
from ._view import Entry, Line, Marker, Part, Round, TranscriptView, clean

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:70em;color:#222}
a{color:#2952a3}.muted{color:#777}.line{border-left:3px solid #ddd;margin:.3em 0;padding:.2em .6em}
.seq{color:#999;font:12px monospace;margin-right:.6em}.form{font-weight:600;margin-right:.6em}
.line.reasoning{border-color:#c79100;background:#fff8e1}.line.head-change{border-color:#6b7fa8}
.line.summary,.line.compaction{border-color:#4c9a2a;background:#f1f8ec}
.marker{font:12px monospace;background:#eee;border-radius:3px;padding:0 .3em;margin-right:.3em}
.marker[data-state="left out"]{background:#ffe0b2}.marker[data-state="released"]{background:#ffcdd2}
.call,.result{font:12px monospace}.result.error{color:#b00020}
details.round{margin:.3em 0;border:1px dashed #bbb;padding:.2em .5em}
pre.reasoning,#live-text{white-space:pre-wrap;background:#fafafa;border:1px solid #ddd;padding:.5em}
.untrusted{color:#b00020;font-size:12px}.strip{color:#8a5a00;font-size:12px}
"""

SCRIPT = """
for (const button of document.querySelectorAll('button.show-reasoning')) {
  button.addEventListener('click', async () => {
    const out = button.parentElement.querySelector('pre.reasoning');
    const r = await fetch(button.dataset.url, {credentials: 'same-origin'});
    if (!r.ok) { out.textContent = 'not available (' + r.status + ')'; out.hidden = false; return; }
    const body = await r.json();
    out.textContent = body.parts.map(p => '[block ' + p.block + ', ' + p.kind + ', ' + p.status
      + '] ' + (p.text === null ? '' : p.text)).join('\\n')
      + (body.truncated ? '\\n(truncated)' : '');
    out.hidden = false;
  });
}
const live = document.getElementById('live');
if (live) {
  const out = document.getElementById('live-text');
  const status = document.getElementById('live-status');
  const source = new EventSource(live.dataset.stream);
  source.addEventListener('reasoning-partial', e => {
    const d = JSON.parse(e.data); out.textContent = d.text;
    status.textContent = 'streaming (caught up)' + (d.clipped ? ', oldest text dropped' : '');
  });
  source.addEventListener('reasoning', e => {
    out.textContent += JSON.parse(e.data).text; status.textContent = 'streaming';
  });
  source.addEventListener('reset', () => { out.textContent = ''; status.textContent = 'reset'; });
  source.addEventListener('done', () => { status.textContent = 'reply recorded; reload'; });
}
"""


def text(value: str) -> str:
    """Stored text, safe in HTML."""
    return escape(clean(value), quote=True)


def page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{text(title)}</title><style>{STYLE}</style></head><body>{body}"
        f"<script>{SCRIPT}</script></body></html>"
    )


def agent_url(agent: str, tail: str = "") -> str:
    return f"/agents/{quote(agent, safe='')}{tail}"


def agents_page(principal: str, agents: Sequence[tuple[str, Sequence[str], str | None]]) -> str:
    """The agents ``principal`` may see, each with its branches (the current one first)."""
    rows = []
    for agent, branches, current in agents:
        links = ", ".join(
            f'<a href="{agent_url(agent)}?branch={quote(b, safe="")}">{text(b)}</a>'
            + (" (current)" if b == current else "")
            for b in branches
        )
        rows.append(f'<li><a href="{agent_url(agent)}">{text(agent)}</a>: {links}</li>')
    listing = "".join(rows) or '<li class="muted">No agents you may see.</li>'
    return page(
        "Agents",
        f"<h1>Agents</h1><p class=muted>signed in as {text(principal)}</p><ul>{listing}</ul>",
    )


def marker_html(found: Marker) -> str:
    words = [found.kind, f"signed …{found.tail}" if found.signed else "unsigned"]
    if found.omitted:
        words.append("omitted")
    if found.dropped:
        words.append(f"dropped ({found.dropped})")
    if found.state:
        words.append(found.state)
    state = f' data-state="{text(found.state)}"' if found.state else ""
    return f'<span class="marker"{state}>⟨{text(", ".join(words))}⟩</span>'


def part_html(part: Part) -> str:
    if part.marker is not None:
        return marker_html(part.marker)
    if part.what == "call":
        return f'<span class="call">→ {text(part.text)}</span>'
    if part.what == "result":
        error = " error" if part.error else ""
        label = "error: " if part.error else ""
        return f'<span class="result{error}">← {label}{text(part.text)}</span>'
    if part.what in ("change", "other"):
        return f'<span class="marker">⟨{text(part.text)}⟩</span>'
    return f"<span>{text(part.text)}</span>"


FORM_LABELS = {
    "reasoning": "[reasoning] notice",
    "head-change": "head change",
    "summary": "fold summary",
    "compaction": "compaction",
    "results": "tool results",
}


def line_html(line: Line, agent: str, may_read: Callable[[str | None], bool]) -> str:
    label = FORM_LABELS.get(line.form, line.form)
    about = []
    if line.notice_form:
        about.append(f"{line.notice_form} form")
    if line.cause:
        about.append(f"strip cause: {line.cause}")
    if line.asker:
        about.append(f"asked by {line.asker}")
    extra = f' <span class="muted">({text("; ".join(about))})</span>' if about else ""
    if line.strip:
        extra = f'<div class="strip">strip before this call: {text(line.strip)}</div>' + extra
    body = " ".join(part_html(p) for p in line.parts) or '<span class="muted">⟨empty⟩</span>'
    reasoning = ""
    if line.readable and may_read(line.asker):
        url = agent_url(agent, f"/reasoning?cursor={quote(line.id, safe='')}")
        reasoning = (
            f'<div><button class="show-reasoning" data-url="{text(url)}">show reasoning'
            '</button> <span class="untrusted">untrusted model output</span>'
            '<pre class="reasoning" hidden></pre></div>'
        )
    return (
        f'<div class="line {text(line.form)}" id="m-{line.sequence}">'
        f'<span class="seq">#{line.sequence}</span><span class="form">{text(label)}</span>'
        f"{extra} {body}{reasoning}</div>"
    )


def entry_html(entry: Entry, agent: str, may_read: Callable[[str | None], bool]) -> str:
    if isinstance(entry, Line):
        return line_html(entry, agent, may_read)
    calls = sum(1 for p in entry.call.parts if p.what == "call")
    state = "open: waiting for results" if entry.open else "closed"
    inner = line_html(entry.call, agent, may_read)
    if isinstance(entry, Round) and entry.results is not None:
        inner += line_html(entry.results, agent, may_read)
    return (
        f'<details class="round"{" open" if entry.open else ""}>'
        f"<summary>tool round #{entry.call.sequence}: {calls} call(s), {state}</summary>"
        f"{inner}</details>"
    )


def transcript_page(
    agent: str,
    branch: str,
    branches: Sequence[str],
    view: TranscriptView,
    may_read: Callable[[str | None], bool],
    *,
    live: bool,
    principal: str,
) -> str:
    """An agent's transcript on ``branch``: lines, rounds, the usage chart, the live panel."""
    others = " ".join(
        f'<a href="{agent_url(agent)}?branch={quote(b, safe="")}">{text(b)}</a>'
        for b in branches
        if b != branch
    )
    live_html = ""
    if live:
        live_html = (
            f'<section id="live" data-stream="{text(agent_url(agent, "/live"))}">'
            '<h2>Live reasoning</h2><p><span id="live-status" class="muted">idle</span> '
            '<span class="untrusted">untrusted model output</span></p>'
            '<pre id="live-text"></pre></section>'
        )
    entries = "".join(entry_html(e, agent, may_read) for e in view.entries)
    return page(
        f"{agent} / {branch}",
        f'<p><a href="/">agents</a> · signed in as {text(principal)}</p>'
        f"<h1>{text(agent)} <small class=muted>branch {text(branch)}</small></h1>"
        f"<p>other branches: {others or '<span class=muted>none</span>'}</p>"
        f"<h2>Tokens per turn</h2>{usage_chart(view.turns)}{live_html}"
        f'<h2>Transcript</h2><div id="transcript">'
        f"{entries or '<p class=muted>No messages.</p>'}</div>",
    )


def message_page(title: str, words: str) -> str:
    """A short page for 401 and 404 answers (the same words for every hidden thing)."""
    return page(title, f"<h1>{text(title)}</h1><p>{text(words)}</p>")
