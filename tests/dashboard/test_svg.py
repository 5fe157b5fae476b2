"""The dashboard's SVG charts (`dashboard.svg`): tick values, positions, bins, and store text kept as text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from dashboard import svg

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("top", "count", "expected", "bottom"), [
    (262, 40, [200 + 2 * i for i in range(32)], 200),  # 1.55 a step -> 2, from the values' low end
    (262, 40, [200 + 2 * i for i in range(32)], 201.5),  # the low end rounded down to a step

    (0.93, 5, [0, 0.2, 0.4, 0.6, 0.8, 1.0], 0),  # 0.186 a step -> 0.2
    (420, 5, [0, 100, 200, 300, 400, 500], 0),  # 84 -> 100
    (400, 5, [0, 100, 200, 300, 400], 0),  # a top on a tick ends there
    (563, 40, [20 * i for i in range(30)], 0),  # 14.1 -> 20, up to 580
    (7, 3, [0, 5, 10], 0),  # 2.33 -> 5
    (0, 5, [0, 1], 0),
])
def test_nice_ticks(top: float, count: int, expected: list[float], bottom: float) -> None:
    assert svg.nice_ticks(top, count, bottom) == pytest.approx(expected)


def test_a_plot_maps_values_into_its_area() -> None:
    plot = svg.Plot(left=40, top=30, width=200, height=100)
    assert (plot.y(0, 1), plot.y(1, 1), plot.y(0.25, 1)) == (130, 30, 105)
    assert (plot.x(0, 500), plot.x(500, 500), plot.x(100, 500)) == (40, 240, 80)


def test_store_text_stays_text() -> None:
    """A step or item named like markup shows as its characters: no element, no Markdown, no blank line."""
    hostile = '<script>alert(1)</script> "q" & *bold* _x_\n\nnext'
    drawings = [
        svg.accuracy_chart([svg.AccuracyPoint(hostile, "gsm8k", 0.5, 0.4, 0.6, 10)], [hostile, "b"], {"gsm8k": "#123456"}),
        svg.speed_chart({hostile: {"math": 10.0}}, [hostile], {"math": "#123456"}),
        svg.histogram_chart({hostile: [1.0, 2.0], "b": [3.0]}, {hostile: "#123456"}),
        svg.scatter_chart([svg.PairedPoint(hostile, 1, 2, "both right")], {"both right": ("#bbbbbb", 2)}, hostile, "b"),
    ]
    for drawing in drawings:
        assert "\n\n" not in drawing
        root = ET.fromstring(drawing)  # well-formed
        tags = {element.tag.removeprefix(SVG) for element in root.iter()}
        assert tags <= {"svg", "g", "text", "title", "line", "circle", "rect"}, tags
        assert any('<script>alert(1)</script> "q" & *bold* _x_ next' in (e.text or "") for e in root.iter())


def test_histogram_puts_each_value_in_one_bin_on_shared_bins() -> None:
    drawing = ET.fromstring(svg.histogram_chart({"a": [0, 19.9, 20, 100], "b": [100, 100]}, {"a": "red", "b": "blue"}))
    bars = {g.get("data-step"): g for g in drawing.iter(f"{SVG}g") if g.get("class") == "bars"}
    titles = {step: [r.find(f"{SVG}title").text for r in g] for step, g in bars.items()}
    # Top 100 over 40 bins: bins of 5 tokens; 100 sits in the last bin, 95 to 100.
    assert titles == {"a": ["a: 1 item of 0 to 5 tokens", "a: 1 item of 15 to 20 tokens", "a: 1 item of 20 to 25 tokens",
                            "a: 1 item of 95 to 100 tokens"], "b": ["b: 2 items of 95 to 100 tokens"]}
    widths = {float(r.get("width")) for g in bars.values() for r in g}
    assert len(widths) == 1  # one bin width for both steps
    heights = {step: [float(r.get("height")) for r in g] for step, g in bars.items()}
    assert heights["b"] == [pytest.approx(2 * heights["a"][-1])]  # 2 items against 1 in the same bin


def test_histogram_bins_cover_the_values_range() -> None:
    """Lengths of 200 to 262 tokens fill the panel's width: the first bin starts at the plot's left edge."""
    drawing = ET.fromstring(svg.histogram_chart({"a": [200, 231, 262]}, {"a": "red"}))
    rects = list(drawing.iter(f"{SVG}rect"))
    assert [r.find(f"{SVG}title").text for r in rects] == [
        "a: 1 item of 200 to 202 tokens", "a: 1 item of 230 to 232 tokens", "a: 1 item of 260 to 262 tokens"]
    assert float(rects[0].get("x")) == 44 and float(rects[-1].get("x")) + float(rects[-1].get("width")) == pytest.approx(343)
    ticks = [t.text for t in drawing.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert ticks[-4:] == ["200", "220", "240", "260"]  # the token axis, under the last panel
