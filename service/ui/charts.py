"""Small server-rendered SVG charts (no script, no external library). Each carries
a title and description for screen readers, a legend when it has more than one
series, and axis labels; each page shows the same numbers in a table, so nothing
is told by colour alone: stacked series differ by pattern, lines by dash and marker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 160
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 44, 22, 8
LEGEND_H, X_LABEL_H, Y_LABEL_W = 16, 14, 14

# Fill per series: the first solid, the second hatched, the third dotted.
PATTERNS = ("url(#solid)", "url(#hatch)", "url(#dots)")
DEFS = (
    '<defs><pattern id="solid" width="4" height="4" patternUnits="userSpaceOnUse">'
    '<rect width="4" height="4" class="s0"/></pattern>'
    '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
    '<rect width="6" height="6" class="bg"/><rect width="3" height="6" class="s1"/></pattern>'
    '<pattern id="dots" width="5" height="5" patternUnits="userSpaceOnUse">'
    '<rect width="5" height="5" class="bg"/><circle cx="2.5" cy="2.5" r="1.5" class="s2"/></pattern></defs>'
)
LINE_STYLES = 3  # l0 solid with circles, l1 dashed with squares, l2 dotted with diamonds (ui.css)


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000):
        if value <= step:
            return float(step)
    return float(value)


@dataclass(frozen=True)
class _Box:
    """Where the plot sits inside the SVG, after room for a legend and axis labels."""

    left: float
    top: float
    width: float
    height: float

    @classmethod
    def of(cls, legend: bool, y_label: str | None) -> _Box:
        # The plot keeps its height; a legend and an x-axis label add to the SVG's.
        left = PAD_LEFT + (Y_LABEL_W if y_label else 0)
        return cls(left, PAD_TOP + (LEGEND_H if legend else 0), WIDTH - left, HEIGHT - PAD_TOP - PAD_BOTTOM)

    def y(self, value: float, lo: float, hi: float) -> float:
        return self.top + self.height * (1 - (value - lo) / (hi - lo))


def _legend(box: _Box, entries: Sequence[tuple[str, str]]) -> list[str]:
    """`entries`: (name, sample SVG drawn in a 14×10 box at the origin)."""
    out, x = [], box.left
    for name, sample in entries:
        out.append(
            f'<g class="legend" transform="translate({x:.1f},{PAD_TOP})">{sample}'
            f'<text x="18" y="9" class="tick">{escape(name)}</text></g>'
        )
        x += 30 + 6.5 * len(name)
    return out


def _frame(
    title: str,
    desc: str,
    body: list[str],
    box: _Box,
    y_ticks: Sequence[tuple[float, str]],
    labels: Sequence[str],
    *,
    x_label: str | None = None,
    y_label: str | None = None,
    legend: Sequence[tuple[str, str]] = (),
) -> Markup:
    """The chart around `body`: axes, ticks, the x labels, the axis titles and the
    legend, drawn only with more than one entry (one series needs no legend)."""
    bottom = box.top + box.height
    svg_h = bottom + PAD_BOTTOM + (X_LABEL_H if x_label else 0)
    axis = [
        f'<line x1="{box.left}" y1="{box.top}" x2="{box.left}" y2="{bottom}" class="axis"/>',
        f'<line x1="{box.left}" y1="{bottom}" x2="{WIDTH}" y2="{bottom}" class="axis"/>',
    ]
    for y, text in y_ticks:
        axis.append(f'<text x="{box.left - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{escape(text)}</text>')
    if x_label:
        axis.append(
            f'<text x="{box.left + box.width / 2:.1f}" y="{svg_h - 3}" class="tick axis-label" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    if y_label:
        mid = box.top + box.height / 2
        axis.append(
            f'<text x="10" y="{mid:.1f}" class="tick axis-label" text-anchor="middle" '
            f'transform="rotate(-90 10 {mid:.1f})">{escape(y_label)}</text>'
        )
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {svg_h:.0f}" role="img">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>{DEFS}"
        + "".join(axis + (_legend(box, legend) if len(legend) > 1 else []) + body + _x_labels(labels, box))
        + "</svg>"
    )


def _x_labels(labels: Sequence[str], box: _Box) -> list[str]:
    slot = box.width / max(1, len(labels))
    every = max(1, len(labels) // 6)
    out = []
    baseline = box.top + box.height + 16
    for i, label in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1:
            x = box.left + slot * (i + 0.5)
            anchor = "end" if x > WIDTH - 20 else "middle"  # the last label stays inside
            out.append(
                f'<text x="{x:.1f}" y="{baseline:.1f}" class="tick" text-anchor="{anchor}">{escape(label)}</text>'
            )
    return out


def stacked_bars(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    x_label: str | None = None,
    y_label: str | None = None,
) -> Markup:
    """One bar per label, the series stacked bottom to top."""
    totals = [sum(values[i] for _, values in series) for i in range(len(labels))]
    y_max = _nice_max(max(totals, default=0))
    box = _Box.of(len(series) > 1, y_label)
    slot = box.width / max(1, len(labels))
    body = []
    for i, label in enumerate(labels):
        base = 0.0
        for s, (name, values) in enumerate(series):
            v = values[i]
            if v <= 0:
                continue
            top, bottom = box.y(base + v, 0, y_max), box.y(base, 0, y_max)
            body.append(
                f'<rect x="{box.left + slot * i + slot * 0.12:.1f}" y="{top:.1f}" width="{slot * 0.76:.1f}" '
                f'height="{bottom - top:.1f}" fill="{PATTERNS[s % len(PATTERNS)]}" class="bar">'
                f"<title>{escape(label)}: {escape(name)} {v:g}</title></rect>"
            )
            base += v
    desc = "; ".join(f"{name}: {sum(values):g} in all" for name, values in series)
    legend = [
        (name, f'<rect width="14" height="10" fill="{PATTERNS[s % len(PATTERNS)]}" class="bar"/>')
        for s, (name, _) in enumerate(series)
    ]
    ticks = [(box.y(y_max, 0, y_max), f"{y_max:g}"), (box.y(0, 0, y_max), "0")]
    return _frame(title, desc, body, box, ticks, labels, x_label=x_label, y_label=y_label, legend=legend)


def _marker(style: int, x: float, y: float) -> str:
    if style == 1:
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" class="point p1"'
    if style == 2:
        return f'<path d="M{x:.1f} {y - 4:.1f}l4 4l-4 4l-4 -4z" class="point p2"'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="point p0"'


def lines(
    title: str,
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    x_label: str | None = None,
    y_label: str | None = None,
    percent: bool = False,
    y_range: tuple[float, float] | None = None,
    references: Sequence[tuple[str, float]] = (),
) -> Markup:
    """One line per series over the same labels (None leaves a gap); `references`
    are horizontal dashed lines (a baseline, an overall rate), named in the legend.
    `percent`: values are rates in 0–1, drawn on a 0–100 % axis."""
    known = [v for _, values in series for v in values if v is not None] + [v for _, v in references]
    if percent:
        lo, hi = 0.0, 1.0
    elif y_range is not None:
        lo, hi = y_range
    else:
        # Rounded out to 1 (rewards in 0–1 keep that scale) or the next nice number.
        lo, hi = min([0.0, *known]), max([0.0, *known])
        hi = 1.0 if hi <= 1.0 else _nice_max(hi)
        lo = 0.0 if lo >= 0.0 else -(1.0 if lo >= -1.0 else _nice_max(-lo))
    fmt = (lambda v: f"{100 * v:.0f}%") if percent else (lambda v: f"{v:.3g}")
    box = _Box.of(len(series) + len(references) > 1, y_label)
    slot = box.width / max(1, len(labels))
    body: list[str] = []
    for name, value in references:
        y = box.y(value, lo, hi)
        body.append(
            f'<line x1="{box.left}" y1="{y:.1f}" x2="{WIDTH}" y2="{y:.1f}" class="ref">'
            f"<title>{escape(name)}: {fmt(value)}</title></line>"
        )
    for s, (name, values) in enumerate(series):
        style = s % LINE_STYLES
        run: list[str] = []
        runs: list[list[str]] = []
        for i, value in enumerate(values):
            if value is None:
                runs.append(run)
                run = []
                continue
            x, y = box.left + slot * (i + 0.5), box.y(value, lo, hi)
            run.append(f"{x:.1f},{y:.1f}")
            body.append(
                _marker(style, x, y) + f"><title>{escape(labels[i])}: {escape(name)} {fmt(value)}</title>"
                f"{'</circle>' if style == 0 else '</rect>' if style == 1 else '</path>'}"
            )
        runs.append(run)
        body.extend(f'<polyline points="{" ".join(r)}" class="line l{style}"/>' for r in runs if len(r) > 1)
    legend = [
        (name, f'<line x1="0" y1="5" x2="14" y2="5" class="line l{s % LINE_STYLES}"/>')
        for s, (name, _) in enumerate(series)
    ] + [(name, '<line x1="0" y1="5" x2="14" y2="5" class="ref"/>') for name, _ in references]
    parts = []
    for name, values in series:
        have = [v for v in values if v is not None]
        parts.append(
            f"{name}: from {fmt(have[0])} to {fmt(have[-1])} over {len(have)} points" if have else f"{name}: no data"
        )
    parts += [f"{name}: {fmt(value)}" for name, value in references]
    ticks = [(box.y(v, lo, hi), fmt(v)) for v in (hi, (lo + hi) / 2, lo)]
    return _frame(title, "; ".join(parts), body, box, ticks, labels, x_label=x_label, y_label=y_label, legend=legend)


def rate_line(
    title: str,
    labels: Sequence[str],
    rates: Sequence[float | None],
    *,
    x_label: str | None = None,
    y_label: str | None = None,
    references: Sequence[tuple[str, float]] = (),
) -> Markup:
    """A 0–100 % line; days without data leave a gap, marked by no point."""
    return lines(
        title,
        labels,
        [("success rate", rates)],
        percent=True,
        x_label=x_label,
        y_label=y_label,
        references=references,
    )
