"""The dashboard's charts drawn as SVG in the page itself: accuracy and speed down the ladder, output lengths.

Vega-Lite charts (`st.vega_lite_chart`) made the browser load and compile
0.8 MB of Vega on a page's first view and draw each chart after the page had
finished: 0.3 to 0.4 s of a cold Ladder view on a 2-core machine
(bench/dashboard_render.py). These charts are a few hundred SVG elements the
page's Markdown shows as they arrive; each point carries its figures in a
tooltip (`<title>`).

Every text from the store (step, task and item names) is XML-escaped: model
and endpoint names are text, never markup. Axes, grid and labels use
`currentColor`, so the charts read on a light and a dark theme.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

FONT = "font-family: 'Source Sans', sans-serif; font-size: 11px"
LABEL_CHARS = 14  # a longer step name is cut on the axis (whole in the tooltip)


@dataclass(frozen=True)
class Plot:
    """A plot area inside its SVG: `left`/`top` from the SVG's corner, `width`/`height` of the area."""

    left: float
    top: float
    width: float
    height: float

    def y(self, value: float, top_value: float) -> float:
        """The SVG y of `value` on an axis from 0 (bottom) to `top_value` (top)."""
        return self.top + self.height * (1 - value / top_value) if top_value > 0 else self.top + self.height

    def x(self, value: float, right_value: float, left_value: float = 0.0) -> float:
        """The SVG x of `value` on an axis from `left_value` (left) to `right_value`."""
        span = right_value - left_value
        return self.left + self.width * (value - left_value) / span if span > 0 else self.left


def nice_step(span: float, count: int) -> float:
    """The round step (1, 2 or 5 x 10^k) that cuts `span` into at most `count` parts."""
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def nice_ticks(top: float, count: int = 5, bottom: float = 0.0) -> list[float]:
    """Round tick values from `bottom` (rounded down to a step) to at least `top`, about `count` of them."""
    if top <= bottom:
        return [bottom, bottom + 1.0]
    step = nice_step(top - bottom, count)
    first = math.floor(bottom / step + 1e-9)
    return [round(i * step, 12) for i in range(first, math.ceil(top / step - 1e-9) + 1)]


def text(value: object) -> str:
    """Store text for SVG or HTML markup (charts here, `widgets.table_html`): escaped, whitespace runs made
    one space (a blank line would end a chart's HTML block in Markdown; a table cell wraps as one line)."""
    return escape(" ".join(str(value).split()))


def short(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1] + "…"


def svg(width: float, height: float, body: Sequence[str], name: str, label: str) -> str:
    """One chart: `name` is its class (tests and styles find it by that), `label` its accessible name."""
    # The opening tag alone on the first line makes the whole chart one HTML block for st.markdown: nothing
    # inside it is read as Markdown (a "_" or "*" in a step name stays a character).
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {name}" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{text(label)}" '
            f'style="{FONT}; overflow: visible">\n{"".join(body)}</svg>')


def title(heading: str, subtitle: str = "") -> list[str]:
    parts = [f'<text x="0" y="13" font-size="13" font-weight="600" fill="currentColor">{text(heading)}</text>']
    if subtitle:
        parts.append(f'<text x="0" y="28" fill="currentColor" opacity="0.7">{text(subtitle)}</text>')
    return parts


def y_axis(plot: Plot, ticks: Sequence[float], label: str, fmt: str = "{:g}") -> list[str]:
    """Grid lines and labels at `ticks` (0 at the bottom, the last tick at the top), the axis title turned."""
    top = ticks[-1]
    parts = []
    for tick in ticks:
        y = plot.y(tick, top)
        parts.append(f'<line class="grid" x1="{plot.left:.1f}" x2="{plot.left + plot.width:.1f}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="currentColor" stroke-opacity="0.15"/>')
        parts.append(f'<text class="tick" x="{plot.left - 4:.1f}" y="{y + 3.5:.1f}" text-anchor="end" '
                     f'fill="currentColor">{text(fmt.format(tick))}</text>')
    middle = plot.top + plot.height / 2
    parts.append(f'<text x="12" y="{middle:.1f}" transform="rotate(-90 12 {middle:.1f})" text-anchor="middle" '
                 f'fill="currentColor">{text(label)}</text>')
    return parts


def baseline(plot: Plot) -> str:
    """The line under a plot area."""
    bottom = plot.top + plot.height
    return (f'<line x1="{plot.left:.1f}" x2="{plot.left + plot.width:.1f}" y1="{bottom:.1f}" y2="{bottom:.1f}" '
            f'stroke="currentColor" stroke-opacity="0.5"/>')


def x_axis(plot: Plot, ticks: Sequence[float], label: str, span: tuple[float, float] | None = None) -> list[str]:
    """Ticks along the bottom of a number axis over `span` (else the first to the last tick), its title under
    them."""
    bottom, (left, right) = plot.top + plot.height, span or (ticks[0], ticks[-1])
    parts = [baseline(plot)]
    for tick in ticks:
        x = plot.x(tick, right, left)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{bottom + 13:.1f}" text-anchor="middle" '
                     f'fill="currentColor">{tick:g}</text>')
    parts.append(f'<text x="{plot.left + plot.width / 2:.1f}" y="{bottom + 28:.1f}" text-anchor="middle" '
                 f'fill="currentColor">{text(label)}</text>')
    return parts


def step_axis(plot: Plot, steps: Sequence[str]) -> list[str]:
    """Step names under their bands, turned 45 degrees so many steps fit; cut names whole in a tooltip."""
    bottom, band = plot.top + plot.height, plot.width / max(len(steps), 1)
    parts = [baseline(plot)]
    for i, step in enumerate(steps):
        x, y = plot.left + band * (i + 0.5), bottom + 10
        parts.append(f'<text class="step" x="{x:.1f}" y="{y:.1f}" transform="rotate(-45 {x:.1f} {y:.1f})" '
                     f'text-anchor="end" fill="currentColor"><title>{text(step)}</title>{text(short(step))}</text>')
    return parts


def legend(x: float, y: float, entries: Mapping[str, str], title_text: str) -> list[str]:
    """A column of coloured dots with their names."""
    parts = [f'<text x="{x:.1f}" y="{y:.1f}" font-weight="600" fill="currentColor">{text(title_text)}</text>']
    for i, (name, colour) in enumerate(entries.items()):
        row = y + 15 * (i + 1)
        parts.append(f'<g class="key" data-name="{text(name)}"><circle cx="{x + 4:.1f}" cy="{row - 4:.1f}" r="4" '
                     f'fill="{colour}"/><text x="{x + 12:.1f}" y="{row:.1f}" fill="currentColor">'
                     f'{text(short(name))}</text></g>')
    return parts


def step_plot(steps: Sequence[str], width: float = 250, height: float = 180) -> tuple[Plot, float, float]:
    """The plot area of a chart over the ladder's steps with a legend at its right: (plot, svg width, svg
    height), the width fitting one of two columns at 1,280 px, room left below for the step names turned 45 degrees (about 5.5 px a character)."""
    label_room = 14 + 5.5 * min(max((len(s) for s in steps), default=1), LABEL_CHARS) * 0.71
    plot = Plot(left=44, top=40, width=width, height=height)
    return plot, plot.left + width + 96, plot.top + height + label_room


@dataclass(frozen=True)
class AccuracyPoint:
    """One step's accuracy on one task, with its 95% interval and the number of items it scored."""

    step: str
    task: str
    accuracy: float
    low: float
    high: float
    scored: int


def accuracy_chart(points: Sequence[AccuracyPoint], steps: Sequence[str], colours: Mapping[str, str]) -> str:
    """Accuracy per step and task, a dot with its interval as a vertical line, on an axis from 0 to 100%.

    Dots are not joined: steps may score different item sets (errors are left out), and a line would suggest
    a trend between them. Tasks sit side by side within a step's band, each in its workload's colour.
    """
    tasks = list(dict.fromkeys(p.task for p in points))
    plot, width, height = step_plot(steps)
    band = plot.width / max(len(steps), 1)
    ticks = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    body = [*title("Accuracy (95% interval)", "items scored per step in the tooltip"),
            *y_axis(plot, ticks, "accuracy", "{:.0%}"), *step_axis(plot, steps)]
    index = {step: i for i, step in enumerate(steps)}
    for p in points:
        if p.step not in index:
            continue
        slot = (tasks.index(p.task) + 0.5) / len(tasks) - 0.5
        x = plot.left + band * (index[p.step] + 0.5 + 0.5 * slot)
        colour = colours.get(p.task, "gray")
        tip = (f"{p.step} · {p.task}: {p.accuracy:.1%} (95% interval {p.low:.1%} to {p.high:.1%}), "
               f"{p.scored} items scored")
        body.append(
            f'<g class="point" data-task="{text(p.task)}" data-step="{text(p.step)}"><title>{text(tip)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{plot.y(p.low, 1):.1f}" y2="{plot.y(p.high, 1):.1f}" '
            f'stroke="{colour}" stroke-width="1.5"/>'
            f'<circle cx="{x:.1f}" cy="{plot.y(p.accuracy, 1):.1f}" r="4" fill="{colour}"/></g>')
    body += legend(plot.left + plot.width + 14, plot.top, {t: colours.get(t, "gray") for t in tasks}, "task")
    return svg(width, height, body, "accuracy-chart", "Accuracy per step and task with 95% intervals")


def speed_chart(speeds: Mapping[str, Mapping[str, float]], steps: Sequence[str], colours: Mapping[str, str]) -> str:
    """Decode tokens per second per step, one line per workload (`speeds[step][workload]`), from 0 up.

    A line joins only steps next to each other in the ladder that both have the workload's speed.
    """
    workloads = [w for w in colours if any(w in speeds.get(s, {}) for s in steps)]
    plot, width, height = step_plot(steps)
    band = plot.width / max(len(steps), 1)
    top = max((v for s in steps for v in speeds.get(s, {}).values()), default=1.0)
    ticks = nice_ticks(top)
    body = [*title("Decode tokens per second"), *y_axis(plot, ticks, "tok/s"), *step_axis(plot, steps)]
    for workload in workloads:
        colour = colours[workload]
        marks, previous = [], None
        for i, step in enumerate(steps):
            value = speeds.get(step, {}).get(workload)
            if value is None:
                previous = None
                continue
            x, y = plot.left + band * (i + 0.5), plot.y(value, ticks[-1])
            if previous is not None:
                marks.append(f'<line x1="{previous[0]:.1f}" y1="{previous[1]:.1f}" x2="{x:.1f}" y2="{y:.1f}" '
                             f'stroke="{colour}" stroke-width="2"/>')
            marks.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"><title>'
                         f'{text(f"{step} · {workload}: {value:.0f} tok/s")}</title></circle>')
            previous = (x, y)
        body.append(f'<g class="series" data-workload="{text(workload)}">{"".join(marks)}</g>')
    body += legend(plot.left + plot.width + 14, plot.top, {w: colours[w] for w in workloads}, "workload")
    return svg(width, height, body, "speed-chart", "Decode tokens per second per step and workload")


def histogram_chart(tokens: Mapping[str, Sequence[float]], colours: Mapping[str, str], max_bins: int = 40) -> str:
    """Output tokens per item of each step (`tokens[step]`), one panel per step, one above the other, on the
    same bins and the same count axis so they compare at a glance; each step in its own colour. The bins
    cover the values' range (round edges), as Vega-Lite's do: a shift between steps shows at full width."""
    values = [v for vs in tokens.values() for v in vs]
    edges = nice_ticks(max(values, default=1.0), max_bins, min(values, default=0.0))
    counts = {step: [0] * (len(edges) - 1) for step in tokens}
    for step, vs in tokens.items():
        for v in vs:
            counts[step][min(int((v - edges[0]) // (edges[1] - edges[0])), len(edges) - 2)] += 1
    top_count = nice_ticks(max((c for cs in counts.values() for c in cs), default=1), 3)
    panel, gap, left = 90.0, 22.0, 44.0
    body = [*title("Output tokens per item")]
    for row, (step, bins) in enumerate(counts.items()):
        plot = Plot(left=left, top=36 + row * (panel + gap), width=300, height=panel)
        colour = colours.get(step, "gray")
        body += y_axis(plot, top_count, "items")
        body.append(f'<text x="{plot.left:.1f}" y="{plot.top - 4:.1f}" font-weight="600" fill="{colour}">'
                    f'{text(step)}</text>')
        bars = []
        for i, count in enumerate(bins):
            if not count:
                continue
            x0, x1 = plot.x(edges[i], edges[-1], edges[0]), plot.x(edges[i + 1], edges[-1], edges[0])
            y, noun = plot.y(count, top_count[-1]), "item" if count == 1 else "items"
            bars.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" '
                        f'height="{plot.top + plot.height - y:.1f}" fill="{colour}"><title>'
                        f'{text(f"{step}: {count} {noun} of {edges[i]:g} to {edges[i + 1]:g} tokens")}</title></rect>')
        body.append(f'<g class="bars" data-step="{text(step)}">{"".join(bars)}</g>')
    bottom = Plot(left=left, top=36 + (len(counts) - 1) * (panel + gap), width=300, height=panel)
    ticks = [t for t in nice_ticks(edges[-1], 6, edges[0]) if edges[0] <= t <= edges[-1]]
    body += x_axis(bottom, ticks, "output tokens", (edges[0], edges[-1]))
    return svg(left + 300 + 10, bottom.top + panel + 36, body, "histogram-chart", "Output tokens per item of each step")


@dataclass(frozen=True)
class PairedPoint:
    """One item's output tokens on steps A and B, and which of them answered it right."""

    item_id: str
    tokens_a: float
    tokens_b: float
    outcome: str  # a key of the chart's styles: "both right", "A only right", ...


def scatter_chart(points: Sequence[PairedPoint], styles: Mapping[str, tuple[str, float]], a: str, b: str) -> str:
    """Tokens on B against tokens on A per item, the y = x line dashed; `styles[outcome]` is (colour, radius).
    Points are drawn in the order of `styles` reversed, so the first outcomes (the disagreements) are on top."""
    plot = Plot(left=48, top=36, width=260, height=240)
    top = max((max(p.tokens_a, p.tokens_b) for p in points), default=1.0)
    ticks = nice_ticks(top, 5)
    body = [*title("Paired: tokens B against tokens A"), *y_axis(plot, ticks, f"B: {short(b)} tokens"),
            *x_axis(plot, ticks, f"A: {a} tokens"),
            f'<line class="diagonal" x1="{plot.x(0, ticks[-1]):.1f}" y1="{plot.y(0, ticks[-1]):.1f}" '
            f'x2="{plot.x(ticks[-1], ticks[-1]):.1f}" y2="{plot.y(ticks[-1], ticks[-1]):.1f}" stroke="gray" '
            f'stroke-dasharray="4 4"><title>y = x: the same length on both steps</title></line>']
    for outcome in reversed(list(styles)):
        colour, radius = styles[outcome]
        marks = [f'<circle cx="{plot.x(p.tokens_a, ticks[-1]):.1f}" cy="{plot.y(p.tokens_b, ticks[-1]):.1f}" '
                 f'r="{radius:g}"><title>'
                 f'{text(f"{p.item_id}: {outcome}, {p.tokens_a:g} tokens on A, {p.tokens_b:g} on B")}</title></circle>'
                 for p in points if p.outcome == outcome]
        body.append(f'<g class="outcome" data-outcome="{text(outcome)}" fill="{colour}" fill-opacity="0.9">'
                    f'{"".join(marks)}</g>')
    keys = legend(0, plot.top + plot.height + 48, {o: c for o, (c, _) in styles.items()}, "correct")
    return svg(plot.left + plot.width + 20, plot.top + plot.height + 48 + 15 * len(styles) + 8,
               [*body, *keys], "scatter-chart", f"Output tokens per item, {b} against {a}")
