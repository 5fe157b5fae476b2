"""The dashboard's charts, built as Vega-Lite specs once per input and kept in the server's cache.

Building a chart with Altair and turning it into its spec took a page's script
0.2 to 0.4 s on every view (most of it in checking the spec against the
Vega-Lite schema as each part was made); the page then shows the cached spec.
The server's warm-up (`dashboard.serve`) builds the default pair's charts, so
the first view of a page finds them ready. Each spec is checked against the
schema by the tests instead (tests/dashboard/test_app.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import analysis, data, widgets
from evalsvc.decision import build


OUTCOME_STYLE = {  # the disagreements stand out; agreement is grey and small
    "A only right": ("#d62728", 70), "B only right": ("#1f77b4", 70), "both right": ("#bbbbbb", 18),
    "both wrong": ("#777777", 18),
}


def length_charts(items: pd.DataFrame, pair: widgets.Pair, order: Sequence[str]) -> tuple[alt.FacetChart, alt.LayerChart]:
    """Output tokens of both steps one above the other (one colour per step, as on every chart), and the
    paired scatter with the y = x line, the items the steps disagree on drawn large and in colour: two charts
    for two columns."""
    long = analysis.tokens_long(items, pair.a, pair.b)
    histogram = alt.Chart(alt.Data(values=long.to_dict("records")), title="Output tokens per item").mark_bar().encode(
        x=alt.X("tokens:Q", bin=alt.Bin(maxbins=40), title="output tokens"),
        y=alt.Y("count():Q", title="items"),
        color=alt.Color("endpoint:N", scale=widgets.step_scale(order), title="step", legend=alt.Legend(orient="top")),
        row=alt.Row("endpoint:N", title=None, sort=[pair.a, pair.b]))
    points = items[["item_id", "completion_tokens_a", "completion_tokens_b", "correct_a", "correct_b"]].dropna()
    points = points.assign(outcome=_outcomes(points["correct_a"], points["correct_b"]))
    # Agreement first, so the disagreements are drawn on top.
    points = points.sort_values("outcome", key=lambda o: o.str.startswith("both"), ascending=False, kind="stable")
    top = float(max(points["completion_tokens_a"].max(), points["completion_tokens_b"].max(), 1)) if len(points) else 1.0
    style = alt.Scale(domain=list(OUTCOME_STYLE), range=[c for c, _ in OUTCOME_STYLE.values()])
    sizes = alt.Scale(domain=list(OUTCOME_STYLE), range=[s for _, s in OUTCOME_STYLE.values()])
    scatter = alt.Chart(alt.Data(values=points.to_dict("records")),
                        title="Paired: tokens B against tokens A").mark_circle(opacity=0.9).encode(
        x=alt.X("completion_tokens_a:Q", title=f"A: {pair.a} tokens"),
        y=alt.Y("completion_tokens_b:Q", title=f"B: {pair.b} tokens"),
        color=alt.Color("outcome:N", scale=style, title="correct", legend=alt.Legend(orient="bottom", columns=2)), size=alt.Size("outcome:N", scale=sizes, legend=None),
        tooltip=["item_id:N", "outcome:N"])
    diagonal = alt.Chart(alt.Data(values=[{"x": 0.0, "y": 0.0}, {"x": top, "y": top}])).mark_line(
        color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="y:Q")
    # Sized to fit half the page at 1,280 px with axis titles and legends (the scatter's below it).
    return histogram.properties(width=280, height=110), (scatter + diagonal).properties(width=300, height=260)


def _outcomes(correct_a: pd.Series, correct_b: pd.Series) -> list[str]:
    labels = {(True, True): "both right", (True, False): "A only right", (False, True): "B only right"}
    return [labels.get((bool(a), bool(b)), "both wrong") for a, b in zip(correct_a, correct_b)]


@st.cache_data(show_spinner=False, max_entries=32)
def length_specs(url: str, key_a: analysis.RunKey, key_b: analysis.RunKey, pair: widgets.Pair,
                 order: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """`length_charts` of two runs' paired items as Vega-Lite specs, for `widgets.show_spec`. Keyed on the
    runs, not their items: hashing the items took longer than reading the cached specs."""
    items = data.pair(url, key_a, key_b, True, data.LADDER_ITEM_COLUMNS, margins_=build.DEFAULT_MARGINS).items
    return tuple(widgets.spec(figure) for figure in length_charts(items, pair, order))
