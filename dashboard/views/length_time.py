"""Length and time: output tokens of two steps, the inflation ratio, task time, the decision."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, data, widgets
from evalsvc.decision import build
from evalsvc.report import accuracy_report
from evalsvc.statistics import output_length
from evalsvc.statistics import task_time


def length_table(length: output_length.LengthInflation) -> pd.DataFrame:
    """Ratio of means with its interval, median per-item ratio and Wilcoxon p; all items and both-correct."""
    rows = []
    for label, part in (("all paired items", length.all_items), ("both correct", length.both_correct)):
        if part is None:
            continue
        rows.append({
            "items": label, "n": str(part.n), "mean A": f"{part.mean_a:.1f}", "mean B": f"{part.mean_b:.1f}",
            "B/A (ratio of means)": f"{part.ratio_of_means:.3f}",
            f"{length.confidence:.0%} CI": f"{part.ci[0]:.3f} to {part.ci[1]:.3f}",
            "median item ratio": widgets.num(part.median_item_ratio, 3),
            "Wilcoxon p": accuracy_report.format_p(part.wilcoxon_p) if part.wilcoxon_p is not None else widgets.MISSING,
        })
    return pd.DataFrame(rows)


def render_time(time: task_time.TaskTimeChange | None, workload: str, pair: widgets.Pair) -> None:
    """Task time of B against A, or what is missing to compute it."""
    if time is None:
        st.info(f"No {workload} decode speed stored for both steps; measure it with "
                f"`evalsvc speed --endpoint NAME --workload {workload}` to get the task-time change.")
        return
    cols = st.columns(3)
    cols[0].metric("task time B/A", f"{time.ratio:.3f}", help=f"{time.confidence:.0%} CI {time.ci[0]:.3f} to {time.ci[1]:.3f}")
    cols[1].metric("decode speed B/A", f"{time.speed_ratio:.2f}x")
    cols[2].metric("output tokens B/A", f"{time.token_ratio:.2f}x")
    st.text(f"task time B/A {time.ratio:.3f} ({time.confidence:.0%} CI {time.ci[0]:.3f} to {time.ci[1]:.3f}); "
            f"mean task time {time.mean_time_a_s:.2f} s ({pair.a}) vs {time.mean_time_b_s:.2f} s ({pair.b})\n"
            f"A: {time.speed_a}\nB: {time.speed_b}")
    st.caption(time.model)


def render_decisions(url: str, runs: pd.DataFrame, steps: list[str]) -> None:
    """Step N against N+1 on every workload of the ladder, chat included."""
    found = data.ladder(url, runs, steps)
    if not isinstance(found, build.LadderDecision):
        return
    decisions = [d for pair in found.decisions for d in pair.workloads]
    st.subheader("Step N or N+1, per workload")
    widgets.table(widgets.decisions_frame(decisions))
    st.caption("Chat output lengths come from the chat speed probes of both steps, paired by prompt; a chat "
               "decision is refused while any paired answer was cut by the probe's cap.")


def main() -> None:
    url = data.db_url()
    st.title("Length and time")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    pair = widgets.pair_picker(runs, steps)
    if pair is None:
        return
    workload = analysis.workload_of(pair.task)
    keys = data.step_runs(runs, steps, url)[pair.task]
    speeds = data.endpoint_speeds(url, (pair.a, pair.b))
    length, time, problem = data.pair_length_and_time(
        url, keys[pair.a], keys[pair.b], speeds[pair.a].get(workload), speeds[pair.b].get(workload))
    if problem:
        st.warning(problem)
    if length is not None:
        st.subheader(f"Output length, {pair.b} against {pair.a} ({pair.task})")
        widgets.table(length_table(length))
        st.caption(f"Truncated (finish_reason length): {length.truncated_a} in A, {length.truncated_b} in B; "
                   f"{length.n_missing} pairs without token counts left out. Bootstrap {length.n_boot} resamples.")
        drawings = charts.length_drawings(url, keys[pair.a], keys[pair.b], pair, tuple(analysis.ladder_order(runs)))
        for column, drawing in zip(st.columns(2), drawings):
            with column:
                widgets.chart(drawing)
        st.subheader("Task time")
        render_time(time, workload, pair)
    render_decisions(url, runs, steps)


main()
