"""Ladder: which step to ship per workload, and every step's accuracy, length and speed."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import analysis, data, widgets
from dashboard.analysis import StepDecision
from evalsvc import compare, timing


# What a ladder-table row reads of the runs table.
SUMMARY_COLUMNS = ("run_id", "n", "errors", "correct", "accuracy", "truncated")


def decision_line(d: StepDecision) -> str:
    """One decision in words, led by what to do."""
    reason = d.reason
    for prefix in (f"take B for {d.workload}: ", f"stop at A for {d.workload}: "):
        reason = reason.removeprefix(prefix)
    if d.take_b is None:
        head = f"? {widgets.esc(d.step_b)} after {widgets.esc(d.step_a)}: no decision"
    elif d.take_b:
        head = f":green[take **{widgets.esc(d.step_b)}**] after {widgets.esc(d.step_a)}"
    else:
        head = f":red[stop at **{widgets.esc(d.step_a)}**], not {widgets.esc(d.step_b)}"
    return f"{head}: {widgets.esc(reason)}"


def decision_word(d: StepDecision) -> str:
    """take B, stop at A, or no decision."""
    return {True: f"take {d.step_b}", False: f"stop at {d.step_a}", None: "no decision"}[d.take_b]


def chain_table(chain: Sequence[StepDecision], stop: StepDecision | None) -> pd.DataFrame:
    """Every step-to-step decision of one workload; those after the stop are marked."""
    rows, beyond = [], False
    for d in chain:
        rows.append({
            "step N": d.step_a, "step N+1": d.step_b, "decision": decision_word(d),
            "on the path": "no, beyond the stop" if beyond else "yes", "accuracy": d.verdict,
            "tokens B/A": widgets.num(d.token_ratio, 2), "speed B/A": widgets.num(d.speed_ratio, 2),
            "task time B/A": widgets.num(d.time_ratio, 3),
        })
        beyond = beyond or d is stop
    return pd.DataFrame(rows).set_index("step N")


def render_ship(steps: Sequence[str], decisions: Sequence[StepDecision]) -> None:
    """Per workload: the step to ship, the decisions that settle it with links to their evidence, the whole chain."""
    st.subheader("Which step to ship")
    workloads = list(dict.fromkeys(d.workload for d in decisions))
    if not workloads:
        st.info("No two consecutive steps share a complete run on any task yet.")
    for workload in workloads:
        chain = [d for d in decisions if d.workload == workload]
        task_steps = [s for s in steps if any(s in (d.step_a, d.step_b) for d in chain)]
        ship, stop = analysis.ship_step(task_steps, chain)
        taken = next((d for d in chain if d.step_b == ship and d.take_b), None)
        with st.container(border=True, key=f"ship_{workload}"):
            st.markdown(f"#### {workload} ({chain[0].task}): ship **{widgets.esc(ship)}**")
            for d in (taken, stop):
                if d is not None:
                    st.markdown(decision_line(d))
                    widgets.evidence_links(widgets.Pair(d.task, d.step_a, d.step_b))
            if stop is None:
                st.markdown("Every step of the ladder was taken.")
            with st.expander(f"All {len(chain)} step-to-step decisions for {workload}"):
                st.dataframe(chain_table(chain, stop))


def task_table(
    url: str, runs: pd.DataFrame, task: str, per_step: dict[str, analysis.RunKey],
    ladder_keys: tuple[analysis.RunKey, ...], decisions: Sequence[StepDecision],
    speeds: dict[str, dict[str, timing.EndpointSpeed]],
) -> pd.DataFrame:
    """The ladder table of one task, as display strings."""
    workload = analysis.workload_of(task)
    by_b = {d.step_b: d for d in decisions if d.task == task}
    summaries = runs.set_index("run_id", drop=False)[list(SUMMARY_COLUMNS)].to_dict("index")
    loaded = data.load_ladder(url, ladder_keys)
    rows = []
    for step, key in per_step.items():
        summary = summaries[key.run_id]
        items = loaded[key.run_id].items if key.run_id in loaded else data.load_items(url, key)
        row = analysis.step_row(step, summary, items)
        speed = speeds.get(step, {}).get(workload)
        d = by_b.get(step)
        rows.append({
            "step": step, "run": str(row["run"]), "accuracy": widgets.pct(row["accuracy"]), "95% CI": row["95% CI"],
            "scored": str(row["scored"]), "mean tokens": widgets.num(row["mean tokens"]),
            "median tokens": widgets.num(row["median tokens"]),
            "tokens vs prev": f"{d.token_ratio:.2f}x" if d and d.token_ratio else widgets.MISSING,
            f"{workload} tok/s": f"{speed.effective_tps:.0f}" if speed else widgets.MISSING,
            "task time vs prev": _time_cell(d), "truncated": str(row["truncated"]), "errors": str(row["errors"]),
        })
    return pd.DataFrame(rows).set_index("step")


def _time_cell(d: StepDecision | None) -> str:
    if d is None or d.time_ratio is None or d.time_ci is None:
        return widgets.MISSING
    return f"{d.time_ratio:.3f}x ({d.time_ci[0]:.3f} to {d.time_ci[1]:.3f})"


def ladder_chart(
    runs: pd.DataFrame, per_task: dict[str, dict[str, analysis.RunKey]], steps: Sequence[str],
    speeds: dict[str, dict[str, timing.EndpointSpeed]],
) -> alt.HConcatChart:
    """Accuracy per task and decode speed per workload, down the ladder."""
    accuracy = runs.set_index("run_id")["accuracy"]
    acc = pd.DataFrame([
        {"step": step, "task": task, "accuracy": accuracy[key.run_id]}
        for task, per_step in per_task.items() for step, key in per_step.items()
        if pd.notna(accuracy[key.run_id])
    ], columns=["step", "task", "accuracy"])
    tps = pd.DataFrame([
        {"step": step, "workload": workload, "tok/s": speed.effective_tps}
        for step in steps for workload, speed in speeds.get(step, {}).items()
    ], columns=["step", "workload", "tok/s"])
    x = alt.X("step:N", sort=list(steps), title=None)
    # Plain records: handing Altair a DataFrame routes it through narwhals, whose first use costs a tenth of a second.
    left = alt.Chart(alt.Data(values=acc.to_dict("records")), title="Accuracy").mark_line(point=True).encode(
        x=x, y=alt.Y("accuracy:Q", axis=alt.Axis(format="%"), scale=alt.Scale(zero=False)), color="task:N")
    right = alt.Chart(alt.Data(values=tps.to_dict("records")), title="Decode tokens per second")
    right = right.mark_line(point=True).encode(x=x, y=alt.Y("tok/s:Q"), color="workload:N")
    charts = alt.hconcat(left.properties(width=380, height=240), right.properties(width=380, height=240))
    return charts.resolve_scale(color="independent")


def main() -> None:
    url = data.db_url()
    st.title("Ladder")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    st.caption(f"{len(steps)} steps: {' -> '.join(steps)}. Each step uses its latest complete run per task.")
    report = data.report_for(url, runs, steps)
    if isinstance(report, compare.LadderReport):
        decisions = data.step_decisions(url, runs, steps, report)
        render_ship(steps, decisions)
    else:
        decisions = []
        st.warning(report)
    speeds = data.endpoint_speeds(url, tuple(steps))
    per_task = data.step_runs(runs, steps)
    for task, per_step in per_task.items():
        st.subheader(f"{task} ({analysis.workload_of(task)})")
        st.dataframe(task_table(url, runs, task, per_step, data.ladder_keys(per_task), decisions, speeds))
    st.caption("Accuracy intervals are Wilson 95%. " + timing.TASK_TIME_MODEL)
    if per_task:
        widgets.chart(ladder_chart(runs, per_task, steps, speeds))


main()
