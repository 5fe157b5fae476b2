"""Disagreements: the items where two steps differ, and one item side by side.

Model output is data: it is shown with st.text and `widgets.mono` (a monospace
block, every character HTML-escaped), never as Markdown or HTML. Not st.code or
st.json: the browser code they load costs the page's first view almost half a
second. A row of the list opens its item (click it); the open item is kept in
the URL (`item=`), and a link to an item neither run has says so.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, data, widgets
from evalsvc.statistics import pairing

FORCE_KEY = "force"
FILTER_PROBLEMS = "errors and cut answers"
LIST_COLUMNS = {
    "item_id": "item", "outcome_a": "A", "outcome_b": "B", "extracted_a": "answer A", "extracted_b": "answer B",
    "reference": "gold", "completion_tokens_a": "tokens A", "completion_tokens_b": "tokens B",
    "B/A tokens": "B/A tokens",
}


def render_counts(result: data.PairResult, pair: widgets.Pair) -> None:
    """The 2x2 counts as four numbers, the disagreements first."""
    table = result.comparison.table
    cols = st.columns(4)
    cols[0].metric(f"only A right ({pair.a})", table.a_only)
    cols[1].metric(f"only B right ({pair.b})", table.b_only)
    cols[2].metric("both wrong", table.neither)
    cols[3].metric("both right", table.both_correct)


def force_toggle() -> None:
    """The override for runs whose prompt or decoding settings differ, offered beside a refusal (or while it is
    on): drawn on every view, its code cost each first view of the page 0.06 s (bench/dashboard_render.py)."""
    st.toggle("Compare even if prompt or decoding settings differ", key=FORCE_KEY)


def pick_filter() -> tuple[str, float]:
    """The filter radio (and length threshold), kept in the URL (`show=`)."""
    kinds = [*analysis.FILTERS, FILTER_PROBLEMS]
    incoming = st.query_params.get("show")
    if incoming in kinds and incoming != st.session_state.get("seen_show"):
        st.session_state["filter"] = incoming
    kind = st.radio("Show", kinds, horizontal=True, key="filter")
    st.session_state["seen_show"] = kind
    widgets.keep_param("show", kind)
    threshold = 1.5
    if kind == analysis.FILTER_LENGTH:
        threshold = st.slider("B/A output tokens at least (or at most its inverse)", 1.1, 5.0, 1.5, 0.1,
                              key="length_ratio")
    return kind, threshold


def list_frame(matching: pd.DataFrame, task: str) -> pd.DataFrame:
    """The rows shown: outcomes labelled (errors, cut answers), answers only where the task extracts one."""
    frame = matching.assign(
        outcome_a=[analysis.outcome_label(c, "ok", f) for c, f in zip(matching["correct_a"], matching["finish_reason_a"])],
        outcome_b=[analysis.outcome_label(c, "ok", f) for c, f in zip(matching["correct_b"], matching["finish_reason_b"])],
    )
    columns = [c for c in LIST_COLUMNS if c in frame.columns]
    if task == "humaneval":  # the answer is the whole program: shown in the item, not in a cell
        columns = [c for c in columns if c not in ("extracted_a", "extracted_b", "reference")]
    return frame[columns].rename(columns=LIST_COLUMNS)


def render_list(shown: pd.DataFrame, key: str) -> str | None:
    """The items as a table; a click on a row returns its item id."""
    event = st.dataframe(
        shown, hide_index=True, height=min(400, 38 + 35 * len(shown)), on_select="rerun",
        selection_mode="single-row", key=key,
        column_config={"item": st.column_config.TextColumn(pinned=True),
                       "B/A tokens": st.column_config.NumberColumn(format="%.2f")})
    rows = event.selection.rows if event is not None else []
    return str(shown.iloc[rows[0]]["item"]) if rows else None


def render_side(label: str, item: dict[str, Any] | None, task: str) -> None:
    """One side of the comparison: outcome, counts, the completion text and, for code, the test outcome."""
    st.markdown(f"**{widgets.esc(label)}**")
    if item is None:
        st.warning("this run has no row for the item")
        return
    outcome = analysis.outcome_label(item["correct"], item["status"], item["finish_reason"])
    lines = [f"outcome: {outcome}"]
    if task != "humaneval":
        lines.append(f"extracted: {item['extracted']}")
    lines.append(f"tokens: {item['completion_tokens']}  finish: {item['finish_reason']}")
    st.text("\n".join(lines))
    if item["error"]:
        st.caption("the request failed; this item is left out of the comparison")
        widgets.mono(str(item["error"]))
    if item.get("finish_reason") == "length":
        st.caption(f"the answer was cut at the token limit after {item['completion_tokens']} tokens")
    if task == "humaneval" or item.get("detail"):
        st.caption("test outcome" if task == "humaneval" else "scoring detail")
        widgets.mono(json.dumps(item.get("detail") or {}, indent=2, sort_keys=True))
    if item.get("reasoning"):
        with st.expander("reasoning"):
            widgets.mono(item["reasoning"])
    widgets.mono(item["completion"] or "(empty)")


def render_item(url: str, pair: widgets.Pair, keys: dict[str, analysis.RunKey], item_id: str) -> None:
    """Question, gold answer, both completions side by side and their differences."""
    item_a = data.load_item(url, keys[pair.a].run_id, item_id)
    item_b = data.load_item(url, keys[pair.b].run_id, item_id)
    if item_a is None and item_b is None:
        st.warning(f"No item {item_id!r} in the {pair.task} runs of {pair.a} and {pair.b}: the link names an "
                   "item these runs do not have, so none is opened.")
        return
    first = item_a or item_b
    st.subheader(f"Item {item_id}")
    st.caption("question")
    widgets.mono(analysis.question_text(first["request"]))
    if pair.task != "humaneval":
        st.text(f"gold answer: {first['reference']}")
    left, right = st.columns(2)
    with left:
        render_side(f"A: {pair.a}", item_a, pair.task)
    with right:
        render_side(f"B: {pair.b}", item_b, pair.task)
    diff = analysis.completion_diff(
        (item_a or {}).get("completion", ""), (item_b or {}).get("completion", ""), pair.a, pair.b
    )
    st.caption("differences (lines starting - are only in A, + only in B)")
    widgets.mono(diff or "the two completions are identical", diff=bool(diff))


def matching_items(url: str, result: data.PairResult, keys: dict[str, analysis.RunKey], pair: widgets.Pair,
                   kind: str, threshold: float) -> pd.DataFrame:
    """The rows of the list for the filter: paired disagreements, or items that failed or were cut."""
    if kind == FILTER_PROBLEMS:
        problems = analysis.problem_items(data.load_items(url, keys[pair.a]), data.load_items(url, keys[pair.b]))
        return problems.rename(columns=LIST_COLUMNS)
    return list_frame(analysis.filter_pairs(result.items, kind, threshold), pair.task)


def main() -> None:
    url = data.db_url()
    st.title("Disagreements")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    pair = widgets.pair_picker(runs, steps)
    if pair is None:
        return
    keys = data.step_runs(runs, steps, url)[pair.task]
    force = bool(st.session_state.get(FORCE_KEY))
    result = data.pair(url, keys[pair.a], keys[pair.b], force)
    if result.comparison is None:
        st.error(result.error)
        force_toggle()
        return
    if force:
        force_toggle()  # while it is on, to turn it off
    render_counts(result, pair)
    dropped = result.comparison.dropped
    if dropped.total:
        were = "item was" if dropped.total == 1 else "items were"
        st.caption(f"{dropped.total} {were} left out of the comparison ({pairing.format_drops(dropped)}); "
                   f"see \"{FILTER_PROBLEMS}\".")
    kind, threshold = pick_filter()
    shown = matching_items(url, result, keys, pair, kind, threshold)
    total = len(result.items)
    st.caption(f"{len(shown)} of {total} paired items match" if kind != FILTER_PROBLEMS
               else f"{widgets.plural(len(shown), 'item')} failed or cut in either run")
    clicked = render_list(shown, key=f"rows_{pair.task}_{pair.a}_{pair.b}_{kind}") if len(shown) else None
    incoming = st.query_params.get("item")
    fresh = incoming if incoming and incoming != st.session_state.get("seen_item") else None  # a link, a reload
    item_id = clicked or fresh or (str(shown.iloc[0]["item"]) if len(shown) else None)
    if item_id is None:
        return
    st.session_state["seen_item"] = item_id
    widgets.keep_param("item", item_id)
    if clicked is None and len(shown) and item_id not in set(shown["item"]):
        st.caption(f"Item {item_id} (from the link) is not in this list.")
    render_item(url, pair, keys, item_id)


main()
