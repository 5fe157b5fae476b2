"""Comparisons of runs and ladders of runs, and how to report them.

Builds on the pure statistics in `evalsvc.statistics.paired_tests`: one `Comparison` per task
and pair of runs, a `LadderReport` over an ordered list of steps, and three
renderings of each (terminal text, Markdown, JSON-ready dict). Every report
also says in words what a reader may and may not conclude.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from evalsvc.decision import rule
from evalsvc.decision.rule import DEFAULT_MARGIN, POWER, Verdict
from evalsvc.statistics import paired_tests
from evalsvc.statistics import pairing
from evalsvc.statistics.paired_tests import CochranQ, Table2x2
from evalsvc.statistics.pairing import DropCounts, RunInfo

DEFAULT_ALPHA = 1 - rule.CONFIDENCE  # Cochran's Q and the MDE; verdicts read the 95% interval


@dataclass(frozen=True)
class Comparison:
    """Paired comparison of run B against run A on one task."""

    task: str
    endpoint_a: str
    endpoint_b: str
    run_a: int
    run_b: int
    table: Table2x2
    p_exact: float
    p_midp: float
    p_chi2: float
    diff: float
    diff_ci_low: float
    diff_ci_high: float
    verdict: Verdict
    mde: float | None  # None: these items detect no difference (see `rule.detectable`)
    margin: float
    dropped: DropCounts
    settle: rule.Settle | None = None  # set when the verdict is inconclusive
    forced: bool = False
    differences: tuple[str, ...] = ()
    noise_floor: bool | None = None
    flip_rate: float | None = None
    isolation: str | None = None  # the sandbox both runs' code ran in (B's when forced across two)

    @property
    def n_paired(self) -> int:
        return self.table.n

    @property
    def acc_a(self) -> float:
        return (self.table.both_correct + self.table.a_only) / self.table.n

    @property
    def acc_b(self) -> float:
        return (self.table.both_correct + self.table.b_only) / self.table.n

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures; fractions, not percentages."""
        return {
            "task": self.task, "endpoint_a": self.endpoint_a, "endpoint_b": self.endpoint_b,
            "run_a": self.run_a, "run_b": self.run_b,
            "n_paired": self.n_paired, **self.table._asdict(),
            "acc_a": self.acc_a, "acc_b": self.acc_b,
            "p_exact": self.p_exact, "p_midp": self.p_midp, "p_chi2": self.p_chi2,
            "diff": self.diff, "diff_ci_low": self.diff_ci_low, "diff_ci_high": self.diff_ci_high,
            "verdict": self.verdict.value, "margin": self.margin, "mde": self.mde,
            "dropped": self.dropped.to_dict(), "forced": self.forced, "differences": list(self.differences),
            "noise_floor": self.noise_floor, "flip_rate": self.flip_rate, "isolation": self.isolation,
            "settle": None if self.settle is None else {
                "smallest_margin": self.settle.smallest_margin, "best_margin": self.settle.best_margin,
                "items_needed": self.settle.items_needed, "items_available": self.settle.items_available},
        }


def compare_runs(
    a_items: pd.DataFrame,
    b_items: pd.DataFrame,
    a_info: RunInfo,
    b_info: RunInfo,
    *,
    margin: float = DEFAULT_MARGIN,
    force: bool = False,
    flip_rate: float | None = None,
    arrays: tuple[pairing.RunArrays, pairing.RunArrays] | None = None,
) -> Comparison:
    """Pair two runs and compute every figure of the comparison.

    `flip_rate` is the run-to-run flip rate of these endpoints, when known;
    without it the noise-floor flag is None. `arrays` as for
    `pairing.pair_runs`. Raises `pairing.PairingError`.
    """
    paired = pairing.pair_runs(a_items, b_items, a_info, b_info, force, arrays)
    return summarize_pairing(paired, margin, flip_rate)


def summarize_pairing(
    paired: pairing.Paired, margin: float = DEFAULT_MARGIN, flip_rate: float | None = None
) -> Comparison:
    """Turn a pairing into a `Comparison`: the verdict by `rule.verdict_of` on the one interval.

    The MDE uses the observed discordant rate as the planning value (`rule.detectable`).
    """
    table = paired_tests.paired_table(paired)
    tests = paired_tests.mcnemar(table)
    interval = rule.interval(table)
    verdict = rule.verdict_of(interval.low, interval.high, margin)
    noise = None
    if flip_rate is not None:
        noise = paired_tests.within_noise_floor(table.discordant, table.n, flip_rate)
    return Comparison(
        task=paired.a_info.task, endpoint_a=paired.a_info.endpoint, endpoint_b=paired.b_info.endpoint,
        run_a=paired.a_info.run_id, run_b=paired.b_info.run_id, table=table,
        p_exact=tests.p_exact, p_midp=tests.p_midp, p_chi2=tests.p_chi2,
        diff=interval.diff, diff_ci_low=interval.low, diff_ci_high=interval.high,
        verdict=verdict, mde=rule.detectable(table).mde, margin=margin,
        settle=rule.settle(table, margin, paired.a_info.task) if verdict is Verdict.INCONCLUSIVE else None,
        dropped=paired.dropped, forced=paired.forced, differences=paired.differences,
        noise_floor=noise, flip_rate=flip_rate, isolation=paired.b_info.isolation,
    )


# --- words ---------------------------------------------------------------------


def _points(fraction: float, signed: bool = True) -> str:
    return f"{100 * fraction:+.1f}" if signed else f"{100 * fraction:.1f}"


def format_p(p: float) -> str:
    """p-values to three decimals, or '<0.001'."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _p_words(label: str, p: float) -> str:
    return f"{label} < 0.001" if p < 0.001 else f"{label} = {p:.3f}"


def _ci_words(c: Comparison) -> str:
    return f"95% CI {_points(c.diff_ci_low)} to {_points(c.diff_ci_high)} points"


def describe_comparison(c: Comparison, p_holm: float | None = None) -> str:
    """What a reader may and may not conclude from one comparison.

    The verdict is read from the interval alone (`rule.RULE_TEXT`); the exact
    McNemar p, and the Holm-adjusted p when given, are shown beside it.
    """
    head = f"{c.task}, {c.endpoint_b} vs {c.endpoint_a}: "
    p_text = _p_words("exact McNemar p", c.p_exact)
    if p_holm is not None:
        p_text += f", {_p_words('Holm-adjusted p', p_holm)} (information only)"
    sentences = [_verdict_sentence(c, p_text)]
    if c.settle is not None:
        sentences.append(f"{SETTLE_HEAD}: {describe_settle(c.task, c.settle)}")
    sentences.append(_mde_sentence(c))
    if c.noise_floor is not None:
        sentences.append(_noise_sentence(c))
    if c.isolation == "process":
        sentences.append("Its programs ran under 'process' isolation, which is only for models you trust.")
    elif c.isolation is not None:
        sentences.append(f"Its programs ran in the {c.isolation} sandbox.")
    if c.forced:
        sentences.append(f"Pairing was forced although the runs differ in {'; '.join(c.differences)}.")
    if c.dropped.total:
        were = "item was" if c.dropped.total == 1 else "items were"
        sentences.append(f"{c.dropped.total} {were} left out ({pairing.format_drops(c.dropped)}).")
    return head + " ".join(sentences)


def _noise_sentence(c: Comparison) -> str:
    rate = f"flip rate {_points(c.flip_rate or 0.0, signed=False)}% between repeat runs of this task"
    if not c.noise_floor:
        return f"The {c.table.discordant} disagreements are more than run-to-run noise makes ({rate})."
    within = f"The {c.table.discordant} disagreements are no more than run-to-run noise makes ({rate})"
    if c.verdict in (Verdict.WORSE, Verdict.WORSE_WITHIN, Verdict.BETTER):
        # Noise flips split evenly between the sides; the interval measures exactly that lopsidedness.
        return f"{within}, but their one-sided split is what the interval measures, so the verdict stands."
    return f"{within}."


_VERDICT_WORDS = {
    Verdict.BETTER: "B is better than A",
    Verdict.SAME: "No change beyond the margin of {m} points",
    Verdict.NO_WORSE: "B is no worse than A by more than {m} points (it may be better by more)",
    Verdict.WORSE_WITHIN: "B is worse than A, but by less than the margin of {m} points",
    Verdict.WORSE: "B is worse than A, and may be worse by the margin of {m} points or more",
    Verdict.INCONCLUSIVE: "Inconclusive: the interval reaches from a drop of {m} points or more to no drop at all",
}


def _verdict_sentence(c: Comparison, p_text: str) -> str:
    words = _VERDICT_WORDS[c.verdict].format(m=_points(c.margin, signed=False))
    return f"{words}: accuracy changed by {_points(c.diff)} points ({_ci_words(c)}; {p_text})."


SETTLE_HEAD = "What would settle it"  # what each report puts before `describe_settle`'s words


def describe_settle(task: str, s: rule.Settle) -> str:
    """What would settle an inconclusive verdict, in words (a sentence; the caller puts `SETTLE_HEAD` before it)."""
    items = f"{s.n} item{'' if s.n == 1 else 's'}"
    head = f"these {items} establish a margin of {_points(s.smallest_margin, signed=False)} points"
    if s.more_items_possible and s.items_needed is not None and s.items_needed > s.n:
        return (f"{head}; about {s.items_needed} items at the observed rates would settle it at a "
                f"{_points(s.margin, signed=False)}-point margin (--limit {s.items_needed} reuses the stored items).")
    if s.best_margin >= s.margin:
        why = (f"{items} can never establish {_points(s.margin, signed=False)} points (even identical answers "
               f"leave an interval down to -{_points(s.best_margin, signed=False)})")
    elif s.items_needed is None:
        why = "at the observed rates no number of items settles it"
    else:
        why = f"it would take about {s.items_needed} items at the observed rates, more than {task}'s {s.items_available}"
    suggestion = (math.floor(round(1000 * s.smallest_margin, 6)) + 1) / 10  # strictly past the interval's end
    return f"{head}; {why}, so a margin of at least that size is needed (e.g. --margin {task}={suggestion:g})."


def _mde_sentence(c: Comparison) -> str:
    items = f"{c.n_paired} item{'' if c.n_paired == 1 else 's'}"
    if c.mde is None:
        why = "no item was answered differently" if c.table.discordant == 0 else (
            f"the runs disagree on only {c.table.discordant}")
        return f"With {items}, of which {why}, the test detects no difference with {POWER:.0%} power."
    return (f"With {items} and this disagreement rate, a difference of {_points(c.mde, signed=False)} points "
            f"or more would be detected with {POWER:.0%} power.")


_FOOTNOTE = (f"B-A, CI and MDE in accuracy points; MDE at {POWER:.0%} power (none: these items detect no "
             "difference). Verdicts read the 95% CI against the margin (the rule: `evalsvc compare --help`).")


# --- tables ----------------------------------------------------------------------

COLUMNS = (
    "task", "A", "B", "n", "both", "A only", "B only", "neither", "acc A", "acc B",
    "B-A", "95% CI", "p exact", "p mid-p", "MDE", "verdict",
)
_LEFT = {"task", "A", "B", "verdict", "step A", "step B", "vs"}


def verdict_label(c: Comparison) -> str:
    """The verdict with the margin filled in."""
    if c.verdict is Verdict.NO_WORSE:
        return f"no worse than -{_points(c.margin, signed=False)} pts"
    if c.verdict in (Verdict.SAME, Verdict.WORSE_WITHIN):
        return f"{c.verdict.value} ({_points(c.margin, signed=False)} pts)"
    return c.verdict.value


def _mde_cell(c: Comparison) -> str:
    return "none" if c.mde is None else _points(c.mde, signed=False)


def comparison_row(c: Comparison) -> list[str]:
    """Cells of one comparison, in `COLUMNS` order."""
    t = c.table
    return [
        c.task, c.endpoint_a, c.endpoint_b, str(t.n), str(t.both_correct), str(t.a_only), str(t.b_only),
        str(t.neither), f"{_points(c.acc_a, signed=False)}%", f"{_points(c.acc_b, signed=False)}%",
        _points(c.diff), f"{_points(c.diff_ci_low)} to {_points(c.diff_ci_high)}",
        format_p(c.p_exact), format_p(c.p_midp), _mde_cell(c), verdict_label(c),
    ]


def render_text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Fixed-width table: labels left-aligned, figures right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if name in _LEFT else cell.rjust(width)
            for name, cell, width in zip(header, cells, widths)
        ]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def render_markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """GitHub-flavoured Markdown table, figures right-aligned."""
    align = [":---" if name in _LEFT else "---:" for name in header]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def render_comparisons_text(comparisons: Sequence[Comparison]) -> str:
    """Terminal report: the table, then one paragraph per comparison."""
    table = render_text_table(COLUMNS, [comparison_row(c) for c in comparisons])
    notes = "\n".join(describe_comparison(c) for c in comparisons)
    return f"{table}\n\n{_FOOTNOTE}\n\n{notes}\n"


def render_comparisons_markdown(comparisons: Sequence[Comparison]) -> str:
    """Markdown report: the table, then one bullet per comparison."""
    table = render_markdown_table(COLUMNS, [comparison_row(c) for c in comparisons])
    notes = "\n".join(f"- {describe_comparison(c)}" for c in comparisons)
    return f"{table}\n\n{_FOOTNOTE}\n\n{notes}\n"


# --- ladders --------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class StepRun:
    """One run of a ladder step on one task."""

    info: RunInfo
    items: pd.DataFrame

    @cached_property
    def arrays(self) -> pairing.RunArrays:
        """The items as pairing reads them, made once for the two to four pairs a ladder puts this run in."""
        return pairing.RunArrays.of(self.items, str(self.info.run_id))


@dataclass(frozen=True, eq=False)
class LadderStep:
    """One rung of the ladder (e.g. 'awq-int4'), with one run per task."""

    name: str
    runs: tuple[StepRun, ...]

    def run_for(self, task: str) -> StepRun | None:
        return next((run for run in self.runs if run.info.task == task), None)


@dataclass(frozen=True)
class LadderEntry:
    """One comparison in a ladder: step B against step A, previous or baseline.

    `comparison.verdict` follows `rule.RULE_TEXT` exactly as `compare A B`
    gives it; `p_holm` adjusts all the ladder's exact p-values together and is
    information only.
    """

    step_a: str
    step_b: str
    kind: str
    comparison: Comparison
    p_holm: float

    def to_dict(self) -> dict[str, Any]:
        return {"step_a": self.step_a, "step_b": self.step_b, "vs": self.kind,
                "p_holm": self.p_holm, **self.comparison.to_dict()}


@dataclass(frozen=True)
class LadderReport:
    """Every comparison of a ladder plus Cochran's Q per task."""

    steps: tuple[str, ...]
    baseline: str
    entries: tuple[LadderEntry, ...]
    cochran: Mapping[str, CochranQ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps), "baseline": self.baseline,
            "comparisons": [entry.to_dict() for entry in self.entries],
            "cochran_q": {task: _cochran_dict(q) for task, q in self.cochran.items()},
        }

    def entry(self, task: str, step_a: str, step_b: str) -> LadderEntry | None:
        return next((e for e in self.entries if (e.comparison.task, e.step_a, e.step_b) == (task, step_a, step_b)),
                    None)


def _cochran_dict(q: CochranQ) -> dict[str, Any]:
    return {"statistic": q.statistic, "df": q.df, "p_value": q.p_value, "n_items": q.n_items}


def ladder_pairs(n_steps: int, baseline: int) -> list[tuple[int, int, str]]:
    """(A, B, kind) index pairs: each step vs the previous one, then each
    step vs the baseline unless that pair was already made."""
    pairs = [(i - 1, i, "previous") for i in range(1, n_steps)]
    made = {frozenset(pair[:2]) for pair in pairs}
    for i in range(n_steps):
        if i != baseline and frozenset((baseline, i)) not in made:
            pairs.append((baseline, i, "baseline"))
    return pairs


def build_ladder_report(
    steps: Sequence[LadderStep],
    *,
    baseline: str | None = None,
    margins: rule.Margins = rule.Margins(),
    force: bool = False,
    flip_rates: Mapping[tuple[str, str], float] | None = None,
) -> LadderReport:
    """Compare every step with the previous one and with the baseline (the
    first step unless named), on every task both steps ran; Holm-adjusted
    p-values beside the verdicts; Cochran's Q per task over the steps that ran it.

    `flip_rates` maps (step, task) to the flip rate between repeat runs of that
    step on that task; a comparison uses the mean of its two steps' known rates.
    """
    names = [step.name for step in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"step names repeat: {names}")
    base = names.index(baseline) if baseline is not None else 0
    raw = _ladder_comparisons(steps, base, margins, force, flip_rates or {})
    adjusted = paired_tests.holm_adjust([comparison.p_exact for _, _, _, comparison in raw])
    entries = tuple(LadderEntry(a, b, kind, comparison, p) for (a, b, kind, comparison), p in zip(raw, adjusted))
    return LadderReport(tuple(names), names[base], entries, _ladder_cochran(steps))


def _ladder_comparisons(
    steps: Sequence[LadderStep], base: int, margins: rule.Margins, force: bool,
    flip_rates: Mapping[tuple[str, str], float],
) -> list[tuple[str, str, str, Comparison]]:
    found = []
    for task in _tasks(steps):
        for i, j, kind in ladder_pairs(len(steps), base):
            run_a, run_b = steps[i].run_for(task), steps[j].run_for(task)
            if run_a is None or run_b is None:
                continue
            known = [flip_rates[(s.name, task)] for s in (steps[i], steps[j]) if (s.name, task) in flip_rates]
            flip = sum(known) / len(known) if known else None
            comparison = compare_runs(
                run_a.items, run_b.items, run_a.info, run_b.info,
                margin=margins.of(task), force=force, flip_rate=flip, arrays=(run_a.arrays, run_b.arrays),
            )
            found.append((steps[i].name, steps[j].name, kind, comparison))
    return found


def _tasks(steps: Sequence[LadderStep]) -> list[str]:
    seen: dict[str, None] = {}
    for step in steps:
        for run in step.runs:
            seen.setdefault(run.info.task, None)
    return list(seen)


def _ladder_cochran(steps: Sequence[LadderStep]) -> dict[str, CochranQ]:
    results = {}
    for task in _tasks(steps):
        frames = [run.items for step in steps if (run := step.run_for(task)) is not None]
        if len(frames) < 2:
            continue
        results[task] = paired_tests.cochran_q(pairing.align_steps(frames))
    return results


LADDER_COLUMNS = (
    "task", "step A", "step B", "vs", "n", "A only", "B only", "B-A", "95% CI", "p exact", "p Holm", "MDE", "verdict",
)


def ladder_row(entry: LadderEntry) -> list[str]:
    """Cells of one ladder entry, in `LADDER_COLUMNS` order."""
    c = entry.comparison
    return [
        c.task, entry.step_a, entry.step_b, entry.kind, str(c.n_paired), str(c.table.a_only), str(c.table.b_only),
        _points(c.diff), f"{_points(c.diff_ci_low)} to {_points(c.diff_ci_high)}",
        format_p(c.p_exact), format_p(entry.p_holm), _mde_cell(c), verdict_label(c),
    ]


def describe_cochran(task: str, q: CochranQ) -> str:
    """One sentence on Cochran's Q for a task."""
    verdict = "at least one step differs" if q.p_value < DEFAULT_ALPHA else "no step is shown to differ"
    return (
        f"Cochran's Q ({task}, {q.df + 1} steps, {q.n_items} items every step answered): "
        f"Q = {q.statistic:.2f}, df = {q.df}, {_p_words('p', q.p_value)}; {verdict}."
    )


def _ladder_body(report: LadderReport, bullet: str) -> str:
    lines = [f"{bullet}{describe_cochran(task, q)}" for task, q in report.cochran.items()]
    lines += [f"{bullet}{describe_comparison(entry.comparison, entry.p_holm)}" for entry in report.entries]
    footer = (
        f"Baseline: {report.baseline}. Verdicts are per pair, from each pair's 95% interval, and are not adjusted "
        f"for multiplicity (the same verdict `evalsvc compare` gives). p Holm adjusts all {len(report.entries)} "
        "exact p-values together, for family-wise claims such as 'some step changed accuracy'; like Cochran's Q "
        f"it is information beside the verdicts. {_FOOTNOTE}"
    )
    return footer + "\n\n" + "\n".join(lines) + "\n"


def render_ladder_text(report: LadderReport) -> str:
    """Terminal rendering of a ladder report."""
    table = render_text_table(LADDER_COLUMNS, [ladder_row(entry) for entry in report.entries])
    return f"{table}\n\n{_ladder_body(report, '')}"


def render_ladder_markdown(report: LadderReport) -> str:
    """Markdown rendering of a ladder report."""
    table = render_markdown_table(LADDER_COLUMNS, [ladder_row(entry) for entry in report.entries])
    return f"{table}\n\n{_ladder_body(report, '- ')}"
