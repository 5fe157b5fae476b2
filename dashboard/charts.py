"""The Length and time page's charts, built once per pair of runs and kept in the server's cache.

The server's warm-up (`dashboard.serve`) builds the default pair's charts, so
the first view of the page finds them ready.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from dashboard import analysis, data, svg, widgets
from evalsvc.decision import build


OUTCOME_STYLE = {  # (colour, radius): the disagreements stand out, drawn on top; agreement is grey and small
    "A only right": ("#d62728", 4.5), "B only right": ("#1f77b4", 4.5), "both right": ("#bbbbbb", 2.5),
    "both wrong": ("#777777", 2.5),
}


def length_charts(items: pd.DataFrame, pair: widgets.Pair, order: Sequence[str]) -> tuple[str, str]:
    """Output tokens of both steps one above the other (one colour per step, as on every chart), and the
    paired scatter with the y = x line, the items the steps disagree on drawn large and in colour: two charts
    for two columns."""
    tokens = {step: pd.to_numeric(items[column], errors="coerce").dropna().astype(float).tolist()
              for step, column in ((pair.a, "completion_tokens_a"), (pair.b, "completion_tokens_b"))}
    colours = widgets.step_colors(order)
    histogram = svg.histogram_chart(tokens, {step: colours.get(step, "gray") for step in tokens})
    both = items[["item_id", "completion_tokens_a", "completion_tokens_b", "correct_a", "correct_b"]].dropna()
    points = [svg.PairedPoint(str(item), float(a), float(b), outcome) for item, a, b, outcome in zip(
        both["item_id"], both["completion_tokens_a"], both["completion_tokens_b"],
        _outcomes(both["correct_a"], both["correct_b"]))]
    return histogram, svg.scatter_chart(points, OUTCOME_STYLE, pair.a, pair.b)


def _outcomes(correct_a: pd.Series, correct_b: pd.Series) -> list[str]:
    labels = {(True, True): "both right", (True, False): "A only right", (False, True): "B only right"}
    return [labels.get((bool(a), bool(b)), "both wrong") for a, b in zip(correct_a, correct_b)]


@st.cache_data(show_spinner=False, max_entries=32)
def length_drawings(url: str, key_a: analysis.RunKey, key_b: analysis.RunKey, pair: widgets.Pair,
                    order: tuple[str, ...]) -> tuple[str, str]:
    """`length_charts` of two runs' paired items, for `widgets.chart`. Keyed on the runs, not their items:
    hashing the items took longer than reading the cached charts."""
    items = data.pair(url, key_a, key_b, True, data.LADDER_ITEM_COLUMNS, margins_=build.DEFAULT_MARGINS).items
    return length_charts(items, pair, order)
