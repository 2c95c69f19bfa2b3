"""Small server-rendered SVG charts (no script, no external library). Each carries
a title and description for screen readers, and each page shows the same numbers
in a table, so nothing is told by colour alone; stacked series differ by pattern."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 640, 160, 44, 22, 8

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


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000):
        if value <= step:
            return float(step)
    return float(value)


def _frame(title: str, desc: str, body: list[str], y_max: float, y_label: str) -> Markup:
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    axis = [
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" y2="{PAD_TOP + plot_h}" class="axis"/>',
        f'<line x1="{PAD_LEFT}" y1="{PAD_TOP + plot_h}" x2="{WIDTH}" y2="{PAD_TOP + plot_h}" class="axis"/>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" class="tick" text-anchor="end">{escape(y_label)}</text>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" class="tick" text-anchor="end">0</text>',
    ]
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
        f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>{DEFS}" + "".join(axis + body) + "</svg>"
    )


def _x_labels(labels: Sequence[str], slot: float) -> list[str]:
    every = max(1, len(labels) // 6)
    out = []
    for i, label in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1:
            x = PAD_LEFT + slot * (i + 0.5)
            anchor = "end" if x > WIDTH - 20 else "middle"  # the last label stays inside
            out.append(f'<text x="{x:.1f}" y="{HEIGHT - 6}" class="tick" text-anchor="{anchor}">{escape(label)}</text>')
    return out


def stacked_bars(title: str, labels: Sequence[str], series: Sequence[tuple[str, Sequence[float]]]) -> Markup:
    """One bar per label, the series stacked bottom to top."""
    totals = [sum(values[i] for _, values in series) for i in range(len(labels))]
    y_max = _nice_max(max(totals, default=0))
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = (WIDTH - PAD_LEFT) / max(1, len(labels))
    body = []
    for i, label in enumerate(labels):
        base = 0.0
        for s, (name, values) in enumerate(series):
            v = values[i]
            if v <= 0:
                continue
            h = plot_h * v / y_max
            y = PAD_TOP + plot_h - plot_h * base / y_max - h
            body.append(
                f'<rect x="{PAD_LEFT + slot * i + slot * 0.12:.1f}" y="{y:.1f}" width="{slot * 0.76:.1f}" '
                f'height="{h:.1f}" fill="{PATTERNS[s % len(PATTERNS)]}" class="bar">'
                f"<title>{escape(label)}: {escape(name)} {v:g}</title></rect>"
            )
            base += v
    desc = "; ".join(f"{name}: {sum(values):g} in all" for name, values in series)
    return _frame(title, desc, body + _x_labels(labels, slot), y_max, f"{y_max:g}")


def rate_line(title: str, labels: Sequence[str], rates: Sequence[float | None]) -> Markup:
    """A 0–100 % line; days without data leave a gap, marked by no point."""
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = (WIDTH - PAD_LEFT) / max(1, len(labels))
    body, run = [], []
    for i, rate in enumerate(rates):
        if rate is None:
            if len(run) > 1:
                body.append(f'<polyline points="{" ".join(run)}" class="line"/>')
            run = []
            continue
        x = PAD_LEFT + slot * (i + 0.5)
        y = PAD_TOP + plot_h * (1 - rate)
        run.append(f"{x:.1f},{y:.1f}")
        body.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" class="point"><title>{escape(labels[i])}: '
            f"{100 * rate:.0f}%</title></circle>"
        )
    if len(run) > 1:
        body.append(f'<polyline points="{" ".join(run)}" class="line"/>')
    known = [r for r in rates if r is not None]
    desc = f"mean {100 * sum(known) / len(known):.0f}% over {len(known)} days with data" if known else "no data"
    return _frame(title, desc, body + _x_labels(labels, slot), 1.0, "100%")
