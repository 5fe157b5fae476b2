"""Ladder: which step to ship per workload, and every step's accuracy, length and speed."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import analysis, data, widgets
from evalsvc import compare, reports, timing
from evalsvc.decision import build
from evalsvc.decision.workload import Choice, WorkloadDecision


# What a ladder-table row reads of the runs table.
SUMMARY_COLUMNS = ("run_id", "n", "errors", "correct", "accuracy", "truncated")


def decision_line(d: WorkloadDecision) -> str:
    """One decision in words, led by what to do (words from `evalsvc.reports`, as the CLI prints them)."""
    reasons = "; ".join(reports.explain_reason(d, r) for r in d.reasons)
    head = widgets.esc(reports.headline(d))
    color = {Choice.TAKE_B: "green", Choice.STOP_AT_A: "red", Choice.CANT_TELL: "orange"}[d.choice]
    return f":{color}[**{head}**]: {widgets.esc(reasons)}"


def chain_table(chain: Sequence[WorkloadDecision], stop: WorkloadDecision | None) -> pd.DataFrame:
    """Every step-to-step decision of one workload; those after the stop are marked."""
    rows, beyond = [], False
    for d in chain:
        rows.append({
            "step N": d.step_a, "step N+1": d.step_b, "decision": reports.choice_words(d),
            "on the path": "no, beyond the stop" if beyond else "yes",
            "accuracy": compare.verdict_label(d.accuracy) if d.accuracy else widgets.MISSING,
            "tokens B/A": widgets.num(d.token_ratio, 2), "speed B/A": widgets.num(d.time.speed_ratio if d.time else None, 2),
            "task time B/A": widgets.num(d.time.ratio if d.time else None, 3),
        })
        beyond = beyond or d is stop
    return pd.DataFrame(rows).set_index("step N")


def _evidence_task(d: WorkloadDecision) -> str | None:
    return d.accuracy.task if d.accuracy else d.accuracy_from


def render_ship(steps: Sequence[str], decisions: Sequence[WorkloadDecision]) -> None:
    """Per workload: the step to ship, the decisions that settle it with links to their evidence, the whole chain."""
    st.subheader("Which step to ship")
    for workload in dict.fromkeys(d.workload for d in decisions):
        chain = [d for d in decisions if d.workload == workload]
        ship, stop = analysis.ship_step(list(steps), chain)
        taken = next((d for d in chain if d.step_b == ship and d.take_b), None)
        with st.container(border=True, key=f"ship_{workload}"):
            task = next((t for t, w in build.TASK_WORKLOAD.items() if w == workload), None)
            st.markdown(f"#### {workload}{f' ({task})' if task else ''}: ship **{widgets.esc(ship)}**")
            for d in (taken, stop):
                if d is not None:
                    st.markdown(decision_line(d))
                    task = _evidence_task(d)
                    if task is not None:
                        widgets.evidence_links(widgets.Pair(task, d.step_a, d.step_b))
            if stop is None:
                st.markdown("Every step of the ladder was taken.")
            with st.expander(f"All {len(chain)} step-to-step decisions for {workload}"):
                st.dataframe(chain_table(chain, stop))


def render_aside(found: build.LadderDecision) -> None:
    """Runs the ladder does not use, and why; only their task and steps lose decisions."""
    if not found.picked.aside:
        return
    rows = [{"step": a.step, "task": a.task, "run": str(a.run_id), "set aside": a.reason.value, "why": a.detail}
            for a in found.picked.aside]
    with st.expander(f"{len(rows)} runs set aside (other settings, unfinished, or fewer items)"):
        st.dataframe(pd.DataFrame(rows), hide_index=True)


def task_table(
    url: str, runs: pd.DataFrame, task: str, per_step: dict[str, analysis.RunKey],
    ladder_keys: tuple[analysis.RunKey, ...], decisions: Sequence[WorkloadDecision],
    speeds: dict[str, dict[str, timing.EndpointSpeed]],
) -> pd.DataFrame:
    """The ladder table of one task, as display strings."""
    workload = analysis.workload_of(task)
    by_b = {d.step_b: d for d in decisions if d.workload == workload}
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


def _time_cell(d: WorkloadDecision | None) -> str:
    if d is None or d.time is None:
        return widgets.MISSING
    return f"{d.time.ratio:.3f}x ({d.time.ci[0]:.3f} to {d.time.ci[1]:.3f})"


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
    st.caption(f"{len(steps)} steps: {' -> '.join(steps)}. Each step uses its latest complete run per task with "
               "the ladder's settings and item count.")
    found = data.ladder(url, runs, steps)
    decisions: list[WorkloadDecision] = []
    if isinstance(found, build.LadderDecision):
        decisions = [w for pair in found.decisions for w in pair.workloads]
        render_ship(steps, decisions)
        render_aside(found)
    else:
        st.warning(found)
    speeds = data.endpoint_speeds(url, tuple(steps))
    per_task = data.step_runs(runs, steps, url)
    for task, per_step in per_task.items():
        st.subheader(f"{task} ({analysis.workload_of(task)})")
        st.dataframe(task_table(url, runs, task, per_step, data.ladder_keys(per_task), decisions, speeds))
    st.caption("Accuracy intervals are Wilson 95%. " + timing.TASK_TIME_MODEL)
    if per_task:
        widgets.chart(ladder_chart(runs, per_task, steps, speeds))


main()
