"""Comparisons of runs: one `Comparison` per task and pair of runs, and a `LadderReport` over a ladder's steps.

Builds on the pure statistics in `evalsvc.statistics`: pairing, McNemar, the
interval `rule` reads its verdict from, Holm and Cochran's Q. Pure: no I/O.
The words and tables for these records live in `evalsvc.report.accuracy_report`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from evalsvc.decision import rule
from evalsvc.decision.rule import DEFAULT_MARGIN, Verdict
from evalsvc.statistics import paired_tests, pairing
from evalsvc.statistics.paired_tests import CochranQ, Table2x2
from evalsvc.statistics.pairing import DropCounts, RunInfo


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
