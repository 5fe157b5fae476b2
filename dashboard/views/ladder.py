"""Ladder: which step to ship per workload, and every step's accuracy, length and speed."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from dashboard import analysis, data, svg, widgets
from evalsvc.decision import build
from evalsvc.decision.workload import Choice, WorkloadDecision
from evalsvc.report import accuracy_report
from evalsvc.report import decision_report
from evalsvc.statistics import task_time


# What a ladder-table row reads of the runs table.
SUMMARY_COLUMNS = ("run_id", "n", "errors", "correct", "accuracy", "truncated")


def decision_line(d: WorkloadDecision) -> str:
    """What to do, coloured (words from `evalsvc.report.decision_report`, as the CLI prints them)."""
    color = {Choice.TAKE_B: "green", Choice.STOP_AT_A: "red", Choice.CANT_TELL: "orange"}[d.choice]
    return f":{color}[**{widgets.esc(decision_report.headline(d))}**]"


def figures_line(d: WorkloadDecision) -> str:
    """The four figures a decision rests on, in one line: accuracy verdict, tokens, speed and task-time ratios."""
    parts = [f"accuracy: {accuracy_report.verdict_label(d.accuracy) if d.accuracy else widgets.MISSING}"
             + (f" (from {d.accuracy_from})" if d.workload == "chat" and d.accuracy_from else ""),
             f"tokens B/A {widgets.num(d.token_ratio, 2)}",
             f"speed B/A {widgets.num(d.time.speed_ratio if d.time else None, 2)}",
             f"task time B/A {_time_cell(d)}"]
    return " · ".join(parts)


def settle_lines(d: WorkloadDecision) -> list[str]:
    """What would settle a decision that cannot be made yet: missing evidence, the interval, the timing."""
    if d.choice is not Choice.CANT_TELL:
        return []
    lines = [r.note for r in d.reasons if r.note]
    if d.settle is not None and d.accuracy is not None:
        lines.insert(0, accuracy_report.describe_settle(d.accuracy.task, d.settle))
    return lines


def render_decision(d: WorkloadDecision) -> None:
    """A decision: what to do, its figures in one line, what would settle it, and every reason in full."""
    st.markdown(decision_line(d))
    st.markdown(widgets.esc(figures_line(d)))
    for line in settle_lines(d):
        st.markdown(f"{accuracy_report.SETTLE_HEAD}: {widgets.esc(line)}")
    with st.expander("Why, in full"):
        st.markdown(widgets.esc(decision_report.explain(d)))
    task = _evidence_task(d)
    if task is not None and task in build.TASK_NAMES:
        widgets.evidence_links(widgets.Pair(task, d.step_a, d.step_b))


def ship_heading(workload: str, ship: str, stop: WorkloadDecision | None) -> str:
    """'math (gsm8k): ship **int4-spec**', with why the ladder ends there."""
    task = build.task_of(workload)
    head = f"#### {workload}{f' ({task})' if task else ''}: ship **{widgets.esc(ship)}**"
    if stop is None:
        return head + ", the last step"
    if stop.choice is Choice.CANT_TELL:
        return head + f", can't tell yet about **{widgets.esc(stop.step_b)}**"
    return head + f", stop there (not **{widgets.esc(stop.step_b)}**)"


def _evidence_task(d: WorkloadDecision) -> str | None:
    """The task whose paired runs a decision rests on; None when there are none to link to (no paired runs)."""
    return d.accuracy.task if d.accuracy else None


def has_chat_speeds(speeds: dict[str, dict[str, task_time.EndpointSpeed]]) -> bool:
    return any("chat" in per_step for per_step in speeds.values())


def render_ship(steps: Sequence[str], decisions: Sequence[WorkloadDecision], show_chat: bool) -> None:
    """Per workload: the step to ship, the decision that ends the walk down the ladder, the whole chain."""
    st.subheader("Which step to ship")
    for workload in dict.fromkeys(d.workload for d in decisions):
        if workload == "chat" and not show_chat:
            st.caption("chat: no step has a chat speed yet; measure one with "
                       "`evalsvc speed --endpoint NAME --workload chat` to decide chat.")
            continue
        chain = [d for d in decisions if d.workload == workload]
        ship, stop = analysis.ship_step(list(steps), chain)
        with st.container(border=True, key=f"ship_{workload}"):
            st.markdown(ship_heading(workload, ship, stop))
            if stop is not None:
                render_decision(stop)
            count = "The step-to-step decision" if len(chain) == 1 else f"All {len(chain)} step-to-step decisions"
            with st.expander(f"{count} for {workload}"):
                widgets.table(widgets.decisions_frame(chain, stop, workload=False))


SWAP_NOTE = (
    "A and B are not interchangeable: the verdict asks whether B is worse than A by more than the margin. "
    "With A and B swapped it asks the opposite question, so the same interval can read differently "
    "(e.g. inconclusive one way, no worse than -2.0 pts the other), and speeds and task times invert."
)


def render_any_pair(url: str, runs: pd.DataFrame, steps: Sequence[str]) -> None:
    """Any two steps: stop at A or take B, per workload, from the decision module."""
    st.subheader("Stop at A or take B?")
    order = analysis.ladder_order(runs)
    cols = st.columns(2)
    with cols[0]:
        a = widgets.pick("Step A (current)", steps, "a", default=steps[0])
    rest = [s for s in steps if s != a]
    with cols[1]:
        b = widgets.pick("Step B (candidate)", rest, "b", default=analysis.next_step(steps, a))
    if order.index(b) < order.index(a):
        st.info(f"B ({b}) comes before A ({a}) in the ladder. " + SWAP_NOTE)
    else:
        st.caption(SWAP_NOTE)
    found = data.ladder(url, runs, [a, b])
    if not isinstance(found, build.LadderDecision):
        st.warning(found)
        return
    speeds = data.endpoint_speeds(url, (a, b))
    for d in found.decisions[0].workloads:
        if d.workload == "chat" and not has_chat_speeds(speeds):
            continue
        with st.container(border=True, key=f"pair_{d.workload}"):
            st.markdown(f"#### {d.workload}: {widgets.esc(decision_report.choice_words(d))}")
            render_decision(d)


def render_aside(found: build.LadderDecision) -> None:
    """Runs the ladder does not use, and why; only their task and steps lose decisions."""
    if not found.picked.aside:
        return
    rows = [{"step": a.step, "task": a.task, "run": str(a.run_id), "set aside": a.reason.value, "why": a.detail}
            for a in found.picked.aside]
    with st.expander(f"{widgets.plural(len(rows), 'run')} set aside (other settings, unfinished, or fewer items)"):
        widgets.table(pd.DataFrame(rows))


def task_table(
    url: str, runs: pd.DataFrame, task: str, per_step: dict[str, analysis.RunKey],
    ladder_keys: tuple[analysis.RunKey, ...], decisions: Sequence[WorkloadDecision],
    speeds: dict[str, dict[str, task_time.EndpointSpeed]],
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
            # Paired figures share a column (value, then its interval or its partner): ten columns fit 1,280 px.
            "step": step, "vs previous step": decision_report.choice_words(d) if d else widgets.MISSING,
            "accuracy (95% CI)": f"{widgets.pct(row['accuracy'])} ({row['95% CI']})",
            "task time vs prev": _time_cell(d),
            "tokens vs prev": f"{d.token_ratio:.2f}x" if d and d.token_ratio else widgets.MISSING,
            f"{workload} tok/s": f"{speed.effective_tps:.0f}" if speed else widgets.MISSING,
            "errors / truncated": f"{row['errors']} / {row['truncated']}",
            "tokens mean / median": f"{widgets.num(row['mean tokens'])} / {widgets.num(row['median tokens'])}",
            "scored": str(row["scored"]), "run": str(row["run"]),
        })
    return pd.DataFrame(rows)


def _time_cell(d: WorkloadDecision | None) -> str:
    if d is None or d.time is None:
        return widgets.MISSING
    return f"{d.time.ratio:.3f}x ({d.time.ci[0]:.3f} to {d.time.ci[1]:.3f})"


def ladder_charts(
    runs: pd.DataFrame, per_task: dict[str, dict[str, analysis.RunKey]], steps: Sequence[str],
    speeds: dict[str, dict[str, task_time.EndpointSpeed]],
) -> tuple[str, str]:
    """Accuracy per task with its Wilson interval, and decode speed per workload, down the ladder: two charts
    for two columns, each sized to fit one at 1,280 px (`dashboard.svg`)."""
    by_id = runs.set_index("run_id")
    points = []
    for task, per_step in per_task.items():
        for step, key in per_step.items():
            run = by_id.loc[key.run_id]
            scored = int(run["n"]) - int(run["errors"])
            interval = analysis.accuracy_interval(int(run["correct"]), scored)
            if pd.notna(run["accuracy"]) and interval:
                points.append(svg.AccuracyPoint(step, task, float(run["accuracy"]), *interval, scored))
    tps = {step: {workload: speed.effective_tps for workload, speed in speeds.get(step, {}).items()} for step in steps}
    return (svg.accuracy_chart(points, steps, widgets.task_colors()),
            svg.speed_chart(tps, steps, widgets.WORKLOAD_COLORS))


def main() -> None:
    url = data.db_url()
    st.title("Ladder")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    st.caption(f"{widgets.plural(len(steps), 'step')}: {' -> '.join(steps)}. Each step uses its latest complete "
               "run per task with the ladder's settings and item count.")
    found = data.ladder(url, runs, steps)
    speeds = data.endpoint_speeds(url, tuple(steps))
    decisions: list[WorkloadDecision] = []
    if isinstance(found, build.LadderDecision):
        decisions = [w for pair in found.decisions for w in pair.workloads]
        render_ship(steps, decisions, has_chat_speeds(speeds))
        render_aside(found)
    else:
        st.warning(found)
    if len(steps) >= 2:
        render_any_pair(url, runs, steps)
    per_task = data.step_runs(runs, steps, url)
    for task, per_step in per_task.items():
        st.subheader(f"{task} ({analysis.workload_of(task)})")
        widgets.table(task_table(url, runs, task, per_step, data.ladder_keys(per_task), decisions, speeds))
    st.caption("Accuracy intervals are Wilson 95%. " + task_time.TASK_TIME_MODEL)
    if per_task:
        for column, drawing in zip(st.columns(2), ladder_charts(runs, per_task, steps, speeds)):
            with column:
                widgets.chart(drawing)


main()
