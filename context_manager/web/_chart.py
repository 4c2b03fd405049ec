"""The per-turn usage chart: a small SVG drawn on the server, no script.

Pure functions. One stacked bar per turn (cache read, cache write, uncached input; output beside
it), scaled to the largest turn, and the cache read share of each turn's input as a label; every
number also in a ``<title>`` so it reads without the picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ._view import TurnUsage

BAR = 18
GAP = 10
HEIGHT = 120
TOP = 18
BOTTOM = 22
COLORS = {
    "cache read": "#4c9a2a",
    "cache write": "#d9a21b",
    "uncached input": "#6b7fa8",
    "output": "#b05a7a",
}


def cache_share(turn: TurnUsage) -> float:
    """Cache reads over the turn's whole input (0 when it had none)."""
    total = turn.usage.total_input
    return turn.usage.cache_read_input_tokens / total if total else 0.0


def _bar(x: int, scale: float, turn: TurnUsage) -> list[str]:
    usage = turn.usage
    stack = (
        ("cache read", usage.cache_read_input_tokens),
        ("cache write", usage.cache_creation_input_tokens),
        ("uncached input", usage.input_tokens),
    )
    out: list[str] = []
    y = float(TOP + HEIGHT)
    for name, value in stack:
        height = value * scale
        y -= height
        out.append(
            f'<rect class="{name.replace(" ", "-")}" x="{x}" y="{y:.1f}" width="{BAR}" '
            f'height="{height:.1f}" fill="{COLORS[name]}"><title>turn {turn.number}: '
            f"{value} {name} tokens</title></rect>"
        )
    height = usage.output_tokens * scale
    out.append(
        f'<rect class="output" x="{x + BAR}" y="{TOP + HEIGHT - height:.1f}" width="4" '
        f'height="{height:.1f}" fill="{COLORS["output"]}"><title>turn {turn.number}: '
        f"{usage.output_tokens} output tokens</title></rect>"
    )
    share = f"{cache_share(turn):.0%}"
    out.append(
        f'<text x="{x + BAR / 2}" y="{TOP - 4}" text-anchor="middle" font-size="9">{share}</text>'
        f'<text x="{x + BAR / 2}" y="{TOP + HEIGHT + 14}" text-anchor="middle" '
        f'font-size="9">{turn.number}</text>'
    )
    return out


def usage_chart(turns: Sequence[TurnUsage]) -> str:
    """The SVG (inline markup) for ``turns``; a short note when there are none."""
    if not turns:
        return '<p class="muted">No turns yet.</p>'
    peak = max(max(t.usage.total_input, t.usage.output_tokens) for t in turns) or 1
    scale = HEIGHT / peak
    width = GAP + len(turns) * (BAR + 4 + GAP)
    body: list[str] = []
    for k, turn in enumerate(turns):
        body.extend(_bar(GAP + k * (BAR + 4 + GAP), scale, turn))
    legend = " ".join(
        f'<tspan fill="{color}">■</tspan> {escape(name)}' for name, color in COLORS.items()
    )
    total = sum(t.usage.total_input for t in turns)
    read = sum(t.usage.cache_read_input_tokens for t in turns)
    overall = f"{read / total:.0%}" if total else "0%"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="usage" role="img" '
        f'width="{max(width, 560)}" height="{TOP + HEIGHT + BOTTOM + 16}" '
        f'aria-label="tokens per turn; cache read share {overall}">'
        f"<title>tokens per turn; cache read share of all input: {overall}</title>"
        f"{''.join(body)}"
        f'<text x="{GAP}" y="{TOP + HEIGHT + BOTTOM + 12}" font-size="9">{legend}; '
        f"top labels: cache read share</text></svg>"
    )
