"""Reports over stored runs: loads runs from the store and hands them to the pure
statistics in `evalsvc.stats`, `evalsvc.compare` and `evalsvc.timing`.

The decision for a pair of steps, per workload:
- math: GSM8K accuracy verdict, GSM8K output tokens, math speed;
- code: HumanEval accuracy verdict, HumanEval output tokens, code speed;
- chat: no accuracy task exists for chat, so the worst verdict of the tasks
  that were compared stands in for it (said in the reason); output tokens
  come from the chat speed probe, paired by prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd
from sqlalchemy.orm import Session

from db import queries
from db.engine import Store
from db.models import Endpoint, Run
from db.speed import latest_speed_run, speed_samples
from evalsvc import compare, stats, timing

TASK_WORKLOAD = {"gsm8k": "math", "humaneval": "code"}
WORKLOADS = ("math", "code", "chat")
_VERDICT_RANK = {stats.Verdict.WORSE: 0, stats.Verdict.INCONCLUSIVE: 1, stats.Verdict.NO_WORSE: 2,
                 stats.Verdict.BETTER: 3}


def run_info(run: Run) -> stats.RunInfo:
    return stats.RunInfo(run_id=run.id, endpoint=run.endpoint.name, task=run.task, template=run.template,
                         decoding=run.decoding, mode=run.mode, config_hash=run.config_hash)


# -- loading ------------------------------------------------------------------------


def load_step(session: Session, endpoint: str, tasks: Sequence[str]) -> compare.LadderStep:
    """The endpoint's latest complete run of each task it has."""
    runs = []
    for task in tasks:
        try:
            run = queries.resolve_run(session, endpoint, task)
        except queries.NotFound:
            continue
        runs.append(compare.StepRun(info=run_info(run), items=queries.items_frame(session, run.id)))
    if not runs:
        queries.get_endpoint(session, endpoint)  # a clear error when the name is unknown
        raise queries.NotFound(f"endpoint {endpoint!r} has no complete run of {', '.join(tasks)}")
    return compare.LadderStep(name=endpoint, runs=tuple(runs))


def flip_rates(session: Session, endpoint: str, tasks: Sequence[str]) -> dict[str, stats.FlipRate]:
    """Per task, the flip rate between the two latest complete runs of the same config, if repeated."""
    found = {}
    ep = queries.get_endpoint(session, endpoint)
    for task in tasks:
        runs = [r for r in ep.runs if r.task == task and r.status == "complete"]
        runs.sort(key=lambda r: r.id, reverse=True)
        for first in runs:
            twin = next((r for r in runs if r is not first and r.config_hash == first.config_hash
                         and r.dataset_hash == first.dataset_hash), None)
            if twin is not None:
                # Flips need only correctness; narrow frames keep the join cheap on large stores.
                columns = ["item_id", "item_hash", "status", "correct"]
                found[task] = stats.flip_rate(queries.items_frame(session, twin.id)[columns],
                                              queries.items_frame(session, first.id)[columns])
                break
    return found


# -- compare -----------------------------------------------------------------------


def compare_refs(store: Store, ref_a: str, ref_b: str, tasks: Sequence[str], margin: float = compare.DEFAULT_MARGIN,
                 force: bool = False) -> list[compare.Comparison]:
    """Compare two endpoints (latest complete runs, per task) or two run ids."""
    with store.session() as session:
        pairs = _run_pairs(session, ref_a, ref_b, tasks)
        out = []
        for run_a, run_b in pairs:
            noise = _pair_flip_rate(session, run_a, run_b)
            out.append(compare.compare_runs(
                queries.items_frame(session, run_a.id), queries.items_frame(session, run_b.id),
                run_info(run_a), run_info(run_b), margin=margin, force=force, flip_rate=noise))
        return out


def _run_pairs(session: Session, ref_a: str, ref_b: str, tasks: Sequence[str]) -> list[tuple[Run, Run]]:
    if ref_a.isdigit() and ref_b.isdigit():
        run_a, run_b = queries.resolve_run(session, ref_a), queries.resolve_run(session, ref_b)
        if run_a.task != run_b.task:
            raise stats.PairingError(f"run {run_a.id} is {run_a.task} and run {run_b.id} is {run_b.task}; "
                                     "compare runs of the same task")
        return [(run_a, run_b)]
    for ref in (ref_a, ref_b):
        if not ref.isdigit():
            queries.get_endpoint(session, ref)  # an unknown name is an error, not "no common task"
    pairs = []
    for task in tasks:
        try:
            pairs.append((queries.resolve_run(session, ref_a, task), queries.resolve_run(session, ref_b, task)))
        except queries.NotFound:
            if len(tasks) == 1:
                raise
    if not pairs:
        raise queries.NotFound(f"{ref_a!r} and {ref_b!r} have no task with a complete run on both sides")
    return pairs


def _pair_flip_rate(session: Session, run_a: Run, run_b: Run) -> float | None:
    rates = [fr.rate for ep in {run_a.endpoint.name, run_b.endpoint.name}
             for task, fr in flip_rates(session, ep, [run_a.task]).items()]
    return sum(rates) / len(rates) if rates else None


# -- ladder report -------------------------------------------------------------------


@dataclass(frozen=True)
class LengthRow:
    """Did step B write more or fewer tokens than step A, and change its answers?"""

    task: str
    step_a: str
    step_b: str
    run_a: int
    run_b: int
    answers_changed: int
    inflation: timing.LengthInflation

    def to_dict(self) -> dict[str, Any]:
        whole = self.inflation.all_items
        return {"task": self.task, "step_a": self.step_a, "step_b": self.step_b, "n_paired": whole.n,
                "answers_changed": self.answers_changed, "mean_tokens_a": whole.mean_a, "mean_tokens_b": whole.mean_b,
                "ratio_of_means": whole.ratio_of_means, "ratio_ci": list(whole.ci),
                "median_item_ratio": whole.median_item_ratio, "wilcoxon_p": whole.wilcoxon_p,
                "truncated_a": self.inflation.truncated_a, "truncated_b": self.inflation.truncated_b}


def length_rows(store: Store, comparisons: Sequence[compare.Comparison]) -> tuple[LengthRow, ...]:
    """Output-length change and changed answers for each comparison, from the accuracy runs."""
    rows = []
    with store.session() as session:
        for c in comparisons:
            j = _paired_frame(session, c)
            if j.empty:
                continue
            changed = int((j.extracted_a.fillna("") != j.extracted_b.fillna("")).sum())
            inflation = timing.measure_length_inflation(
                _tokens(j, "a"), _tokens(j, "b"), j.correct_a, j.correct_b, j.finish_reason_a, j.finish_reason_b)
            rows.append(LengthRow(c.task, c.endpoint_a, c.endpoint_b, c.run_a, c.run_b, changed, inflation))
    return tuple(rows)


def render_lengths(rows: Sequence[LengthRow], markdown: bool = False) -> str:
    """One row per comparison: tokens A and B, their ratio with its 95% interval, changed answers."""
    header = ("task", "step A", "step B", "n", "answers changed", "mean tok A", "mean tok B", "B/A tokens",
              "95% CI", "Wilcoxon p", "truncated A/B")
    body = []
    for r in rows:
        w = r.inflation.all_items
        p = "-" if w.wilcoxon_p is None else compare.format_p(w.wilcoxon_p)
        body.append([r.task, r.step_a, r.step_b, str(w.n), str(r.answers_changed), f"{w.mean_a:.1f}",
                     f"{w.mean_b:.1f}", f"{w.ratio_of_means:.3f}", f"{w.ci[0]:.3f}-{w.ci[1]:.3f}", p,
                     f"{r.inflation.truncated_a}/{r.inflation.truncated_b}"])
    render = compare.render_markdown_table if markdown else compare.render_text_table
    title = "## Output length" if markdown else "Output length (completion tokens, paired items; ratio of means, paired bootstrap CI)"
    return f"{title}\n\n{render(header, body)}"


@dataclass(frozen=True)
class FullReport:
    """Accuracy across the ladder, output lengths, and the step-by-step decisions."""

    accuracy: compare.LadderReport
    decisions: tuple["PairDecision", ...] = ()
    lengths: tuple[LengthRow, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.accuracy.to_dict(), "lengths": [r.to_dict() for r in self.lengths],
                "decisions": [d.to_dict() for d in self.decisions], "task_time_model": timing.TASK_TIME_MODEL}

    def render_text(self) -> str:
        parts = [compare.render_ladder_text(self.accuracy)]
        if self.lengths:
            parts.append(render_lengths(self.lengths))
        if self.decisions:
            parts.append(render_decisions(self.decisions))
        return "\n\n".join(parts)

    def render_markdown(self) -> str:
        parts = [compare.render_ladder_markdown(self.accuracy)]
        if self.lengths:
            parts.append(render_lengths(self.lengths, markdown=True))
        if self.decisions:
            parts.append(render_decisions(self.decisions, markdown=True))
        return "\n\n".join(parts)


def ladder_report_for(store: Store, endpoints: Sequence[str], baseline: str | None = None,
                      margin: float = compare.DEFAULT_MARGIN, force: bool = False,
                      tasks: Sequence[str] = ("gsm8k", "humaneval")) -> FullReport:
    """Every step against the previous one and the baseline, then a decision for each step up."""
    with store.session() as session:
        steps = []
        for name in endpoints:
            try:
                steps.append(load_step(session, name, tasks))
            except queries.NotFound:
                continue  # a step that never ran (failed to start) is reported by the caller
        rates = {s.name: _mean_rate(flip_rates(session, s.name, tasks)) for s in steps}
    accuracy = compare.build_ladder_report(steps, baseline=baseline, margin=margin, force=force,
                                           flip_rates={k: v for k, v in rates.items() if v is not None})
    previous = [e.comparison for e in accuracy.entries if e.kind == "previous"]
    pairs = sorted({(c.endpoint_a, c.endpoint_b) for c in previous}, key=lambda p: endpoints.index(p[1]))
    lengths = length_rows(store, previous)
    # The decisions need the same length figures; hand them over rather than bootstrap them again.
    known = {(r.run_a, r.run_b): r.inflation for r in lengths}
    decisions = tuple(decide_pair(store, a, b, [c for c in previous if (c.endpoint_a, c.endpoint_b) == (a, b)], known)
                      for a, b in pairs)
    return FullReport(accuracy=accuracy, decisions=decisions, lengths=lengths)


def _mean_rate(rates: dict[str, stats.FlipRate]) -> float | None:
    return sum(r.rate for r in rates.values()) / len(rates) if rates else None


# -- decisions -------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadDecision:
    workload: str
    decision: timing.Decision | None = None
    missing: str | None = None  # why no decision could be made

    def to_dict(self) -> dict[str, Any]:
        if self.decision is None:
            return {"workload": self.workload, "take_b": None, "reason": self.missing}
        d = self.decision
        return {"workload": self.workload, "take_b": d.take_b, "reason": d.reason,
                "accuracy_verdict": d.accuracy_verdict, "time_ratio": d.time_ratio,
                "time_ci": list(d.time_ci), "token_ratio": d.token_ratio}


@dataclass(frozen=True)
class PairDecision:
    step_a: str
    step_b: str
    workloads: tuple[WorkloadDecision, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"step_a": self.step_a, "step_b": self.step_b, "workloads": [w.to_dict() for w in self.workloads]}


def decide_pair(store: Store, a: str, b: str, comparisons: Sequence[compare.Comparison],
                known: Mapping[tuple[int, int], timing.LengthInflation] | None = None) -> PairDecision:
    """Per workload: take step B, stop at A, or say what evidence is missing.

    `known` holds length figures already computed, keyed by (run A, run B).
    """
    verdicts = {c.task: c for c in comparisons}
    with store.session() as session:
        ep_a, ep_b = queries.get_endpoint(session, a), queries.get_endpoint(session, b)
        out = []
        for workload in WORKLOADS:
            out.append(_decide_workload(session, workload, ep_a, ep_b, verdicts, known or {}))
    return PairDecision(a, b, tuple(out))


def _decide_workload(session: Session, workload: str, ep_a: Endpoint, ep_b: Endpoint,
                     verdicts: Mapping[str, compare.Comparison],
                     known: Mapping[tuple[int, int], timing.LengthInflation]) -> WorkloadDecision:
    task = next((t for t, w in TASK_WORKLOAD.items() if w == workload), None)
    if task is not None and task not in verdicts:
        return WorkloadDecision(workload, missing=f"no paired {task} runs of both steps")
    if not verdicts:
        return WorkloadDecision(workload, missing="no accuracy comparison to stand in for chat")
    speeds = [endpoint_speed(session, ep, workload) for ep in (ep_a, ep_b)]
    if any(isinstance(s, str) for s in speeds):
        return WorkloadDecision(workload, missing="; ".join(s for s in speeds if isinstance(s, str)))
    inflation = None
    if task is not None:
        comparison = verdicts[task]
        verdict = compare.verdict_label(comparison)
        lengths = _paired_task_tokens(session, comparison)
        inflation = known.get((comparison.run_a, comparison.run_b))
    else:
        comparison = min(verdicts.values(), key=lambda c: _VERDICT_RANK[c.verdict])
        verdict = compare.verdict_label(comparison)
        lengths = _paired_chat_tokens(session, ep_a, ep_b)
        if isinstance(lengths, str):
            return WorkloadDecision(workload, missing=lengths)
    tokens_a, tokens_b, correct_a, correct_b, finish_a, finish_b = lengths
    if inflation is None:
        inflation = timing.measure_length_inflation(tokens_a, tokens_b, correct_a, correct_b, finish_a, finish_b)
    time_change = timing.compare_task_time(tokens_a, tokens_b, speeds[0], speeds[1])
    decision = timing.decide(workload, verdict, inflation.ratios, time_change)
    if task is None:
        note = f" (chat accuracy stands in from {comparison.task}, the worst verdict)"
        decision = timing.Decision(**{**decision.__dict__, "reason": decision.reason + note})
    return WorkloadDecision(workload, decision)


def endpoint_speed(session: Session, endpoint: Endpoint, workload: str) -> timing.EndpointSpeed | str:
    """The endpoint's latest speed for the workload, or a sentence saying why there is none."""
    run = latest_speed_run(session, endpoint.id, workload)
    if run is None:
        return f"no {workload} speed for {endpoint.name} (run `evalsvc speed --endpoint {endpoint.name} --workload {workload}`)"
    if not run.measured:
        return timing.EndpointSpeed.by_hand(run.decode_tps_by_hand or 0.0, run.source, run.ttft_s_by_hand or 0.0)
    try:
        return timing.EndpointSpeed.from_samples([s for _, s in speed_samples(session, run.id)],
                                                 source=f"{endpoint.name} {workload} probe")
    except timing.TimingInputError as exc:
        return str(exc)


def _paired_frame(session: Session, comparison: compare.Comparison) -> pd.DataFrame:
    """The comparison's two runs joined on items both answered without error."""
    a = queries.items_frame(session, comparison.run_a)
    b = queries.items_frame(session, comparison.run_b)
    j = a.merge(b, on=["item_id", "item_hash"], suffixes=("_a", "_b"))
    return j[(j.status_a == "ok") & (j.status_b == "ok")].reset_index(drop=True)


def _paired_task_tokens(session: Session, comparison: compare.Comparison) -> tuple:  # type: ignore[type-arg]
    j = _paired_frame(session, comparison)
    return (_tokens(j, "a"), _tokens(j, "b"), j.correct_a, j.correct_b, j.finish_reason_a, j.finish_reason_b)


def _tokens(frame: pd.DataFrame, side: str) -> pd.Series:
    # usage.completion_tokens already includes reasoning tokens (the OpenAI
    # convention SGLang follows), so the task time counts thinking too.
    return frame[f"completion_tokens_{side}"].astype(float)


def _paired_chat_tokens(session: Session, ep_a, ep_b) -> tuple | str:  # type: ignore[no-untyped-def, type-arg]
    runs = [latest_speed_run(session, ep.id, "chat") for ep in (ep_a, ep_b)]
    if any(r is None or not r.measured for r in runs):
        return "chat output lengths need a measured chat speed run of both steps"
    frames = []
    for run in runs:
        rows = [(pid, s.output_tokens, s.finish_reason) for pid, s in speed_samples(session, run.id) if s.ok]
        frames.append(pd.DataFrame(rows, columns=["prompt_id", "tokens", "finish"]))
    j = frames[0].merge(frames[1], on="prompt_id", suffixes=("_a", "_b")).dropna(subset=["tokens_a", "tokens_b"])
    ones = pd.Series([True] * len(j))
    return (j.tokens_a.astype(float).reset_index(drop=True), j.tokens_b.astype(float).reset_index(drop=True),
            ones, ones, j.finish_a.reset_index(drop=True), j.finish_b.reset_index(drop=True))


def render_decisions(decisions: Sequence[PairDecision], markdown: bool = False) -> str:
    """One line per step up and workload: take B, stop at A, or what is missing."""
    lines = ["## Decisions" if markdown else "Decisions (per workload)", "",
             f"{'' if not markdown else '_'}Model of time: {timing.TASK_TIME_MODEL}{'' if not markdown else '_'}", ""]
    for pair in decisions:
        lines.append(f"{'### ' if markdown else ''}{pair.step_a} -> {pair.step_b}")
        for w in pair.workloads:
            bullet = "- " if markdown else "  "
            if w.decision is None:
                lines.append(f"{bullet}{w.workload}: can't decide: {w.missing}")
            else:
                lines.append(f"{bullet}{w.decision.reason}")
    return "\n".join(lines)


def disagreements(store: Store, comparison: compare.Comparison) -> pd.DataFrame:
    """Items of a comparison where exactly one side was right."""
    with store.session() as session:
        a = queries.items_frame(session, comparison.run_a)
        b = queries.items_frame(session, comparison.run_b)
        infos = [run_info(session.get(Run, rid)) for rid in (comparison.run_a, comparison.run_b)]
    return stats.list_disagreements(stats.pair_runs(a, b, infos[0], infos[1], force=comparison.forced))


def speed_summary(store: Store, speed_run_id: int) -> dict[str, Any]:
    """Figures of one stored speed run, for the CLI and the dashboard."""
    import numpy as np

    from db.speed import SpeedRun

    with store.session() as session:
        run = session.get(SpeedRun, speed_run_id)
        assert run is not None
        endpoint = session.get(Endpoint, run.endpoint_id)
        base = {"speed_run_id": run.id, "endpoint": endpoint.name if endpoint else "?", "workload": run.workload,
                "measured": run.measured, "source": run.source, "spec_stats": run.spec_stats}
        if not run.measured:
            return {**base, "decode_tps": run.decode_tps_by_hand, "ttft_s": run.ttft_s_by_hand}
        samples = [s for _, s in speed_samples(session, run.id)]
    ok = [s for s in samples if s.ok and s.decode_tps]
    tps = np.array([s.decode_tps for s in ok], dtype=float)
    ttft = np.array([s.ttft_s for s in ok], dtype=float)
    tokens = np.array([s.output_tokens or 0 for s in ok], dtype=float)
    accepts = [s.accept_length for s in ok if s.accept_length is not None]
    return {**base, "n": len(samples), "n_ok": len(ok),
            "accept_length_mean": float(np.mean(accepts)) if accepts else None, "n_accept_length": len(accepts),
            "decode_tps_median": float(np.median(tps)) if len(ok) else None,
            "decode_tps_mean": float(tps.mean()) if len(ok) else None,
            "ttft_median_s": float(np.median(ttft)) if len(ok) else None,
            "output_tokens_mean": float(tokens.mean()) if len(ok) else None}
