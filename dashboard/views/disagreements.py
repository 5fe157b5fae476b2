"""Disagreements: the items where two steps differ, and one item side by side.

Model output is data: it is shown with st.code and st.text, never as Markdown
or HTML.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, data, widgets

LIST_COLUMNS = {
    "item_id": "item", "extracted_a": "answer A", "extracted_b": "answer B", "reference": "gold",
    "completion_tokens_a": "tokens A", "completion_tokens_b": "tokens B", "B/A tokens": "B/A tokens",
    "finish_reason_a": "finish A", "finish_reason_b": "finish B",
}


def render_counts(result: data.PairResult, pair: widgets.Pair) -> None:
    """The 2x2 counts as four numbers."""
    table = result.comparison.table
    cols = st.columns(4)
    cols[0].metric(f"only A right ({pair.a})", table.a_only)
    cols[1].metric(f"only B right ({pair.b})", table.b_only)
    cols[2].metric("both right", table.both_correct)
    cols[3].metric("both wrong", table.neither)


def pick_filter(items: pd.DataFrame) -> pd.DataFrame:
    """The filter radio (and length threshold); the matching paired items."""
    kind = st.radio("Show", analysis.FILTERS, horizontal=True, key="filter")
    threshold = 1.5
    if kind == analysis.FILTER_LENGTH:
        threshold = st.slider("B/A output tokens at least (or at most its inverse)", 1.1, 5.0, 1.5, 0.1,
                              key="length_ratio")
    return analysis.filter_pairs(items, kind, threshold)


def render_list(matching: pd.DataFrame) -> None:
    """The matching items as a table."""
    shown = matching[[c for c in LIST_COLUMNS if c in matching.columns]].rename(columns=LIST_COLUMNS)
    st.dataframe(shown, hide_index=True, height=min(400, 38 + 35 * len(shown)),
                 column_config={"B/A tokens": st.column_config.NumberColumn(format="%.2f")})


def render_side(label: str, item: dict[str, Any] | None, task: str) -> None:
    """One side of the comparison: answer, counts, outcome and the completion text."""
    st.markdown(f"**{widgets.esc(label)}**")
    if item is None:
        st.warning("this run has no row for the item")
        return
    outcome = "right" if item["correct"] else ("error" if item["status"] != "ok" else "wrong")
    st.text(f"outcome: {outcome}\nextracted: {item['extracted']}\n"
            f"tokens: {item['completion_tokens']}  finish: {item['finish_reason']}")
    if item["error"]:
        st.text(f"error: {item['error']}")
    if task == "humaneval" or item.get("detail"):
        st.caption("test outcome" if task == "humaneval" else "scoring detail")
        st.json(item.get("detail") or {}, expanded=True)
    if item.get("reasoning"):
        with st.expander("reasoning"):
            st.code(item["reasoning"], language=None, wrap_lines=True)
    st.code(item["completion"] or "(empty)", language=None, wrap_lines=True)


def render_item(url: str, pair: widgets.Pair, keys: dict[str, analysis.RunKey], item_id: str) -> None:
    """Question, gold answer, both completions and their differences."""
    item_a = data.load_item(url, keys[pair.a].run_id, item_id)
    item_b = data.load_item(url, keys[pair.b].run_id, item_id)
    first = item_a or item_b
    st.subheader(f"Item {item_id}")
    st.caption("question")
    st.code(analysis.question_text(first["request"]) if first else "", language=None, wrap_lines=True)
    st.text(f"gold answer: {first['reference'] if first else '-'}")
    left, right = st.columns(2)
    with left:
        render_side(f"A: {pair.a}", item_a, pair.task)
    with right:
        render_side(f"B: {pair.b}", item_b, pair.task)
    diff = analysis.completion_diff(
        (item_a or {}).get("completion", ""), (item_b or {}).get("completion", ""), pair.a, pair.b
    )
    st.caption("differences (lines starting - are only in A, + only in B)")
    st.code(diff or "the two completions are identical", language="diff")


def main() -> None:
    url = data.db_url()
    st.title("Disagreements")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    pair = widgets.pair_picker(runs, steps)
    if pair is None:
        return
    keys = data.step_runs(runs, steps, url)[pair.task]
    force = st.toggle("Compare even if prompt or decoding settings differ", key="force")
    result = data.pair(url, keys[pair.a], keys[pair.b], force)
    if result.comparison is None:
        st.error(result.error)
        return
    render_counts(result, pair)
    matching = pick_filter(result.items)
    st.caption(f"{len(matching)} of {len(result.items)} paired items match")
    if matching.empty:
        return
    render_list(matching)
    item_id = widgets.pick("Item", list(matching["item_id"]), "item")
    render_item(url, pair, keys, item_id)


main()
