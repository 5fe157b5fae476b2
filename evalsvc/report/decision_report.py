"""Reports over stored runs, in words and tables: the figures come from `evalsvc.decision.build`,
which every command and dashboard page shares; this module only formats them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import select

from db import queries
from db.engine import Store
from db.models import Endpoint, Run, SpeedRun
from evalsvc.decision import build, rule
from evalsvc.decision import compare
from evalsvc.decision.build import LadderDecision, LengthRow
from evalsvc.decision.workload import Choice, PairChoice, Reason, ReasonKind, WorkloadDecision
from evalsvc.report import accuracy_report
from evalsvc.statistics import pairing
from evalsvc.statistics import task_time
from evalsvc.statistics.speed import summarize_speed


# -- the ladder report ------------------------------------------------------------------


@dataclass(frozen=True)
class FullReport:
    """A ladder's accuracy, output lengths and step-by-step decisions, for the terminal, Markdown or JSON."""

    ladder: LadderDecision

    @property
    def accuracy(self) -> compare.LadderReport:
        return self.ladder.accuracy

    @property
    def decisions(self) -> tuple[PairChoice, ...]:
        return self.ladder.decisions

    def to_dict(self) -> dict[str, Any]:
        return {**self.ladder.to_dict(), "decisions": [pair_dict(d) for d in self.ladder.decisions]}

    def render_text(self) -> str:
        return self._render(markdown=False)

    def render_markdown(self) -> str:
        return self._render(markdown=True)

    def _render(self, markdown: bool) -> str:
        render = accuracy_report.render_ladder_markdown if markdown else accuracy_report.render_ladder_text
        parts = [render(self.ladder.accuracy)]
        if self.ladder.picked.aside:
            parts.append(render_aside(self.ladder, markdown))
        if self.ladder.lengths:
            parts.append(render_lengths(self.ladder.lengths, markdown))
        parts.append(render_decisions(self.ladder.decisions, markdown))
        return "\n\n".join(parts)


def ladder_report_for(store: Store, endpoints: Sequence[str], baseline: str | None = None,
                      margins: rule.Margins = rule.Margins(), force: bool = False) -> FullReport:
    """Every step against the previous one and the baseline, then a decision for each step up."""
    return FullReport(build.build_ladder(store, endpoints, baseline=baseline, margins=margins, force=force))


def known_endpoints(store: Store, names: Sequence[str]) -> list[str]:
    """The names that are stored endpoints, in order (a ladder step that never started has none)."""
    with store.session() as session:
        stored = set(session.scalars(select(Endpoint.name).where(Endpoint.name.in_(list(names)))))
    return [name for name in names if name in stored]


def render_aside(ladder: LadderDecision, markdown: bool = False) -> str:
    """The runs the ladder does not use, and why."""
    title = "## Runs set aside" if markdown else "Runs set aside (not used by the ladder)"
    bullet = "- " if markdown else "  "
    lines = [f"{bullet}{a.step} {a.task} run {a.run_id}: {a.reason.value} ({a.detail})" for a in ladder.picked.aside]
    return "\n".join([title, "", *lines])


def render_lengths(rows: Sequence[LengthRow], markdown: bool = False) -> str:
    """One row per comparison: tokens A and B, their ratio with its 95% interval, changed answers."""
    header = ("task", "step A", "step B", "n", "answers changed", "mean tok A", "mean tok B", "B/A tokens",
              "95% CI", "Wilcoxon p", "truncated A/B", "left out")
    body = []
    for r in rows:
        w = r.inflation.all_items
        p = "-" if w.wilcoxon_p is None else accuracy_report.format_p(w.wilcoxon_p)
        body.append([r.task, r.step_a, r.step_b, str(w.n), str(r.answers_changed), f"{w.mean_a:.1f}",
                     f"{w.mean_b:.1f}", f"{w.ratio_of_means:.3f}", f"{w.ci[0]:.3f}-{w.ci[1]:.3f}", p,
                     f"{r.inflation.truncated_a}/{r.inflation.truncated_b}", str(r.inflation.n_missing)])
    render = accuracy_report.render_markdown_table if markdown else accuracy_report.render_text_table
    title = "## Output length" if markdown else "Output length (completion tokens, paired items; ratio of means, paired bootstrap CI)"
    note = "Left out: paired items where either side has no valid token count (the endpoint sent none or an impossible one)."
    return f"{title}\n\n{render(header, body)}\n\n{note}"


# -- decisions in words -------------------------------------------------------------------


def choice_words(d: WorkloadDecision) -> str:
    """'take int4', 'stop at bf16' or "can't tell yet"."""
    return {Choice.TAKE_B: f"take {d.step_b}", Choice.STOP_AT_A: f"stop at {d.step_a}",
            Choice.CANT_TELL: "can't tell yet"}[d.choice]


def headline(d: WorkloadDecision) -> str:
    """What to do, e.g. 'stop at step3 for code, tasks finish 8.5% later on step4'."""
    if d.choice is Choice.TAKE_B:
        head = f"take {d.step_b} for {d.workload}"
    elif d.choice is Choice.STOP_AT_A:
        head = f"stop at {d.step_a} for {d.workload}"
    else:
        head = f"can't tell yet between {d.step_a} and {d.step_b} for {d.workload}"
    if d.time is not None and d.choice is not Choice.CANT_TELL:
        # The time belongs to step B: "stop at A, tasks finish sooner" alone reads as if stopping were faster.
        sooner = d.time.ratio < 1
        head += f", tasks finish {abs(d.time.sooner_pct):.1f}% {'sooner' if sooner else 'later'} on {d.step_b}"
        if sooner and any(r.kind is ReasonKind.ACCURACY_WORSE for r in d.reasons):
            head += " but its accuracy is worse"
    return head


def explain_reason(d: WorkloadDecision, reason: Reason) -> str:
    """One reason of a decision in words."""
    kind = reason.kind
    if kind in (ReasonKind.ACCURACY_OK, ReasonKind.ACCURACY_WORSE, ReasonKind.ACCURACY_INCONCLUSIVE):
        return _accuracy_words(d)
    if kind in (ReasonKind.SOONER, ReasonKind.LATER, ReasonKind.TIME_UNCLEAR) and d.time is not None:
        words = _time_words(d.time)
        return words + (f"; what would settle it: {reason.note}" if reason.note else "")
    return reason.note


def _accuracy_words(d: WorkloadDecision) -> str:
    c = d.accuracy
    assert c is not None
    words = (f"accuracy {accuracy_report.verdict_label(c)} ({c.task}: B-A {100 * c.diff:+.1f} points, "
             f"95% CI {100 * c.diff_ci_low:+.1f} to {100 * c.diff_ci_high:+.1f})")
    if d.workload == "chat":
        words += f", standing in for chat from {c.task}, the worst verdict of the pair's tasks"
    if d.settle is not None:
        settle = accuracy_report.describe_settle(c.task, d.settle).rstrip(".")
        words += f"; {accuracy_report.SETTLE_HEAD.lower()}: {settle}"
    return words


def _time_words(time: task_time.TaskTimeChange) -> str:
    low, high = time.ci
    words = (f"B decodes {time.speed_ratio:.2f}x as fast and writes {time.token_ratio:.2f}x the tokens, so task "
             f"time B/A is {time.ratio:.3f} ({round(time.confidence * 100)}% CI {low:.3f}-{high:.3f})")
    if time.fixed_speeds:
        words += f" (speed of {' and '.join(time.fixed_speeds)} entered by hand, held fixed)"
    if time.n_left_out:
        words += f", over {time.n_items} items ({time.n_left_out} without a valid token count left out)"
    return words


def explain(d: WorkloadDecision) -> str:
    """The decision and every reason behind it, in one paragraph."""
    return headline(d) + ": " + "; ".join(explain_reason(d, r) for r in d.reasons)


def pair_dict(pair: PairChoice) -> dict[str, Any]:
    """A step up's decisions as JSON-ready figures, each with its explanation in words."""
    out = pair.to_dict()
    for workload, decision in zip(out["workloads"], pair.workloads):
        workload["explanation"] = explain(decision)
    return out


def render_decisions(decisions: Sequence[PairChoice], markdown: bool = False) -> str:
    """One line per step up and workload: take B, stop at A, or can't tell yet and what would settle it."""
    model = f"Model of time: {task_time.TASK_TIME_MODEL}"
    model = f"_{model}_" if markdown else model
    lines = ["## Decisions" if markdown else "Decisions (per workload)", "", model, ""]
    for pair in decisions:
        lines.append(f"{'### ' if markdown else ''}{pair.step_a} -> {pair.step_b}")
        bullet = "- " if markdown else "  "
        lines += [f"{bullet}{explain(w)}" for w in pair.workloads]
    return "\n".join(lines)


def decide_pair(store: Store, a: str, b: str, margins: rule.Margins = rule.Margins()) -> PairChoice:
    """The decisions of one step up, as the ladder report of the two steps makes them."""
    return build.build_ladder(store, [a, b], margins=margins).decisions[0]


# -- items and speeds ----------------------------------------------------------------------


def disagreements(store: Store, comparison: compare.Comparison) -> pd.DataFrame:
    """Items of a comparison where exactly one side was right."""
    with store.session() as session:
        a = queries.items_frame(session, comparison.run_a)
        b = queries.items_frame(session, comparison.run_b)
        infos = [build.run_info(session.get(Run, rid)) for rid in (comparison.run_a, comparison.run_b)]
    return pairing.list_disagreements(pairing.pair_runs(a, b, infos[0], infos[1], force=comparison.forced))


def speed_summary(store: Store, speed_run_id: int) -> dict[str, Any]:
    """Figures of one stored speed run (`statistics.speed.summarize_speed`), as the CLI shows and prints them."""
    with store.session() as session:
        run = session.get(SpeedRun, speed_run_id)
        assert run is not None
        endpoint = session.get(Endpoint, run.endpoint_id)
        base = {"speed_run_id": run.id, "endpoint": endpoint.name if endpoint else "?", "workload": run.workload,
                "measured": run.measured, "source": run.source, "spec_stats": run.spec_stats,
                "max_tokens": run.max_tokens}
        if not run.measured:
            return {**base, "decode_tps": run.decode_tps_by_hand, "ttft_s": run.ttft_s_by_hand}
        s = summarize_speed([sample for _, sample in queries.speed_samples(session, run.id)])
    return {**base, "n": s.n, "n_ok": s.n_ok, "truncated": s.truncated,
            "accept_length_mean": s.mean_accept_length, "n_accept_length": s.n_accept_length,
            "reasoning_tokens_mean": s.mean_reasoning_tokens,
            "decode_tps_median": s.median_decode_tps, "decode_tps_mean": s.mean_decode_tps,
            "decode_tps_mean_ci": list(s.mean_decode_tps_ci) if s.mean_decode_tps_ci else None,
            "ttft_median_s": s.median_ttft_s, "output_tokens_mean": s.mean_output_tokens}
