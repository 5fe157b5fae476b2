"""Significance: the ladder's paired comparisons, in tables and in words."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import data, widgets
from evalsvc.decision import build, rule
from evalsvc.decision import compare
from evalsvc.report import accuracy_report
from evalsvc.statistics import paired_tests

# The verdict first: a person sees what was decided before the figures behind it; twelve columns fit 1,280 px.
REPORT_COLUMNS = ("verdict", "task", "step A", "step B", "B-A", "95% CI", "p exact", "p Holm", "MDE",
                  "accuracy A, B", "n", "vs")
COUNT_COLUMNS = ("task", "step A", "step B", "n", "both", "A only", "B only", "neither")


def report_table(report: compare.LadderReport) -> pd.DataFrame:
    """Every comparison of the ladder, with its 2x2 counts, verdict and Holm-adjusted p (information only)."""
    rows = []
    for entry in report.entries:
        c = entry.comparison
        cells = dict(zip(accuracy_report.COLUMNS, accuracy_report.comparison_row(c)))
        rows.append({
            "task": c.task, "step A": entry.step_a, "step B": entry.step_b, "vs": entry.kind,
            **{k: cells[k] for k in ("n", "both", "A only", "B only", "neither", "acc A", "acc B", "B-A", "95% CI",
                                     "p exact", "MDE", "verdict")},
            "p Holm": accuracy_report.format_p(entry.p_holm), "accuracy A, B": f"{cells['acc A']}, {cells['acc B']}",
        })
    return pd.DataFrame(rows, columns=list(dict.fromkeys(REPORT_COLUMNS + COUNT_COLUMNS)))


def table_2x2(pair: widgets.Pair, table: paired_tests.Table2x2) -> pd.DataFrame:
    """The paired 2x2 table with readable labels."""
    return pd.DataFrame(
        [[table.both_correct, table.a_only], [table.b_only, table.neither]],
        index=[f"{pair.a} right", f"{pair.a} wrong"], columns=[f"{pair.b} right", f"{pair.b} wrong"],
    )


def find_entry(report: compare.LadderReport, pair: widgets.Pair) -> compare.LadderEntry | None:
    """The ladder's comparison of this pair, if the ladder makes it."""
    for entry in report.entries:
        if (entry.comparison.task, entry.step_a, entry.step_b) == pair:
            return entry
    return None


def render_pair(url: str, runs: pd.DataFrame, steps: list[str], report: compare.LadderReport) -> None:
    """The chosen pair: its 2x2 table and verdict in words."""
    pair = widgets.pair_picker(runs, steps)
    if pair is None:
        return
    entry = find_entry(report, pair)
    if entry is not None:
        comparison, sentence = entry.comparison, accuracy_report.describe_comparison(entry.comparison, entry.p_holm)
    else:
        keys = data.step_runs(runs, steps, url)[pair.task]
        result = data.pair(url, keys[pair.a], keys[pair.b])
        if result.comparison is None:
            st.error(result.error)
            return
        comparison = result.comparison
        sentence = (accuracy_report.describe_comparison(comparison)
                    + " (Not one of the ladder's comparisons: no Holm p.)")
    left, right = st.columns([1, 2])
    with left:
        widgets.table(table_2x2(pair, comparison.table).reset_index(names=""))
    with right:
        st.markdown(f"**Verdict: {widgets.esc(accuracy_report.verdict_label(comparison))}**")
        st.markdown(widgets.esc(sentence))


def render_noise(url: str, runs: pd.DataFrame) -> None:
    """Run-to-run flip rates where an endpoint was evaluated twice with one configuration."""
    st.subheader("Noise floor")
    floor = data.noise_floor(url, runs)
    if floor.empty:
        st.info("No repeat runs yet. `evalsvc run ... --repeat` evaluates an endpoint again with the same "
                "settings; the share of items that flip between the two runs is the noise floor.")
        return
    shown = floor.assign(**{"flip rate": floor["flip rate"].map(widgets.pct)})
    widgets.table(shown)
    st.caption("A comparison whose disagreements are no more than these flips could be run-to-run noise.")


def main() -> None:
    url = data.db_url()
    st.title("Significance")
    runs = widgets.runs_or_stop(url)
    steps = widgets.selected_steps(runs)
    found = data.ladder(url, runs, steps)
    if not isinstance(found, build.LadderDecision):
        st.warning(found)
        return
    report = found.accuracy
    render_pair(url, runs, steps, report)
    st.subheader("Every comparison")
    table = report_table(report)
    widgets.table(table[list(REPORT_COLUMNS)])
    with st.expander("The 2x2 counts of every comparison"):
        widgets.table(table[list(COUNT_COLUMNS)])
    st.caption(f"Baseline: {report.baseline}. {rule.RULE_TEXT} p Holm adjusts all {len(report.entries)} exact "
               f"McNemar p-values together. B-A, CI and MDE in accuracy points; MDE at {rule.POWER:.0%} power. "
               "The margin m is how many points worse B may be and still count as no worse; set it per task in the "
               "sidebar.")
    if found.picked.aside:
        st.caption("Runs set aside: " + "; ".join(f"{a.step} {a.task} run {a.run_id} ({a.reason.value})"
                                                   for a in found.picked.aside))
    st.subheader("In words")
    sentences = [accuracy_report.describe_cochran(task, q) for task, q in report.cochran.items()]
    sentences += [accuracy_report.describe_comparison(entry.comparison, entry.p_holm) for entry in report.entries]
    st.markdown("\n".join(f"- {widgets.esc(sentence)}" for sentence in sentences))
    render_noise(url, runs)


main()
