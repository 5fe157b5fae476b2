"""From stored runs to every verdict, length ratio, task time and decision of a ladder or a pair.

`compare`, `report`, `decide` and the dashboard call `build_ladder` (or
`compare_refs` for two refs) and only format what comes back, so a pair of
steps gets one verdict and one decision wherever it is shown.

Per step up (step N to N+1) and workload:
- math: the GSM8K verdict, GSM8K output tokens, math speed;
- code: the HumanEval verdict, HumanEval output tokens, code speed;
- chat: no accuracy task exists for chat, so the worst verdict of the pair's
  tasks stands in (said in the decision); output tokens come from the chat
  speed probes of both steps, paired by prompt, and a decision is refused
  while any paired answer was cut by the probe's cap.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session

from db import queries
from db.engine import Store
from db.models import Endpoint, Run, SpeedRun
from evalsvc.decision import rule
from evalsvc.decision import compare
from evalsvc.decision.pick import AsideReason, Picked, RunRecord, pick_runs
from evalsvc.decision.workload import PairChoice, Reason, ReasonKind, WorkloadDecision, decide_workload
from evalsvc.statistics import paired_tests
from evalsvc.statistics import pairing
from evalsvc.statistics import output_length
from evalsvc.statistics import task_time
from harness.tasks import TASK_NAMES, WORKLOADS, task_of, workload_of  # the dashboard reads them here too

log = logging.getLogger(__name__)

DEFAULT_MARGINS = rule.Margins()


def run_info(run: Run) -> pairing.RunInfo:
    return pairing.RunInfo(run_id=run.id, endpoint=run.endpoint.name, task=run.task, template=run.template,
                         decoding=dict(run.decoding or {}), mode=run.mode, config_hash=run.config_hash,
                         isolation=run.isolation)


# -- reading the store ------------------------------------------------------------------


def load_records(session: Session, steps: Sequence[str]) -> list[RunRecord]:
    """Every run of the named endpoints, as picking reads them; unknown names raise `queries.NotFound`."""
    ids = {queries.get_endpoint(session, name).id for name in steps}
    runs = session.scalars(select(Run).where(Run.endpoint_id.in_(ids))).all()
    # A run still going has no finish time: its start orders it, so it is listed aside when newer than the one used.
    return [RunRecord(run_info(r), r.status, r.n_items, (str(r.finished_at or r.started_at), r.id)) for r in runs]


def _step_runs(session: Session, picked: Picked) -> dict[int, compare.StepRun]:
    ids = [record.info.run_id for record in picked.chosen.values()]
    frames = queries.items_frames(session, ids)
    return {rid: compare.StepRun(next(r.info for r in picked.chosen.values() if r.info.run_id == rid), frame)
            for rid, frame in frames.items()}


def endpoint_speed(session: Session, endpoint: Endpoint, workload: str) -> task_time.EndpointSpeed | str:
    """The endpoint's latest speed for the workload, or a sentence saying why there is none."""
    run = queries.latest_speed_run(session, endpoint.id, workload)
    if run is None:
        return (f"no {workload} speed for {endpoint.name} "
                f"(run `evalsvc speed --endpoint {endpoint.name} --workload {workload}`)")
    if not run.measured:
        return task_time.EndpointSpeed.by_hand(run.decode_tps_by_hand or 0.0, run.source, run.ttft_s_by_hand or 0.0)
    try:
        return task_time.EndpointSpeed.from_samples([s for _, s in queries.speed_samples(session, run.id)],
                                                 source=f"{endpoint.name} {workload} probe")
    except output_length.TimingInputError as exc:
        return str(exc)


def flip_rates(session: Session, records: Sequence[RunRecord], session_runs: Mapping[int, Run]) -> dict[
        tuple[str, str], float]:
    """(step, task) -> flip rate between the two latest complete repeat runs of one configuration and item set.

    Only a repeat of the same task gives a task its noise floor.
    """
    found: dict[tuple[str, str], float] = {}
    done = sorted((r for r in records if r.status == "complete"), key=lambda r: r.order, reverse=True)
    for first in done:
        key = (first.step, first.task)
        if key in found:
            continue
        run = session_runs[first.info.run_id]
        twin = next((r for r in done if r is not first and r.step == first.step and r.task == first.task
                     and r.info.config_hash == first.info.config_hash
                     and session_runs[r.info.run_id].dataset_hash == run.dataset_hash), None)
        if twin is not None:
            columns = ["item_id", "item_hash", "status", "correct"]
            found[key] = paired_tests.flip_rate(queries.items_frame(session, twin.info.run_id)[columns],
                                         queries.items_frame(session, first.info.run_id)[columns]).rate
    return found


# -- the ladder -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthRow:
    """Did step B write more or fewer tokens than step A on a task, and change its answers?"""

    task: str
    step_a: str
    step_b: str
    run_a: int
    run_b: int
    answers_changed: int
    inflation: output_length.LengthInflation

    def to_dict(self) -> dict[str, Any]:
        whole = self.inflation.all_items
        return {"task": self.task, "step_a": self.step_a, "step_b": self.step_b, "n_paired": whole.n,
                "answers_changed": self.answers_changed, "mean_tokens_a": whole.mean_a, "mean_tokens_b": whole.mean_b,
                "ratio_of_means": whole.ratio_of_means, "ratio_ci": list(whole.ci),
                "median_item_ratio": whole.median_item_ratio, "wilcoxon_p": whole.wilcoxon_p,
                "truncated_a": self.inflation.truncated_a, "truncated_b": self.inflation.truncated_b,
                "left_out_no_token_count": self.inflation.n_missing}


@dataclass(frozen=True)
class LadderDecision:
    """Everything a ladder's reports show: which runs, the comparisons, lengths and decisions."""

    steps: tuple[str, ...]
    margins: rule.Margins
    picked: Picked
    accuracy: compare.LadderReport
    lengths: tuple[LengthRow, ...]
    decisions: tuple[PairChoice, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.accuracy.to_dict(), "margins": self.margins.to_dict(), "verdict_rule": rule.RULE_TEXT,
            "runs": [{"task": task, "step": step, "run_id": r.info.run_id}
                     for (task, step), r in self.picked.chosen.items()],
            "set_aside": [a.to_dict() for a in self.picked.aside],
            "lengths": [r.to_dict() for r in self.lengths],
            "decisions": [d.to_dict() for d in self.decisions], "task_time_model": task_time.TASK_TIME_MODEL,
        }

    def decision(self, step_a: str, step_b: str) -> PairChoice | None:
        return next((d for d in self.decisions if (d.step_a, d.step_b) == (step_a, step_b)), None)


def build_ladder(
    store: Store, steps: Sequence[str], *, baseline: str | None = None, margins: rule.Margins = DEFAULT_MARGINS,
    force: bool = False, tasks: Sequence[str] = TASK_NAMES, lengths: bool = True,
) -> LadderDecision:
    """Pick each step's runs, compare every step with the previous one and the baseline, and decide each step up.

    `lengths=False` leaves out the length table (its bootstrap intervals and tests), which no decision reads.
    """
    if len(steps) < 2:
        raise ValueError(f"a ladder needs at least two steps, got {list(steps)}")
    with store.session() as session:
        records = load_records(session, steps)
        picked = pick_runs(records, steps, tasks, force)
        loaded = _step_runs(session, picked)
        runs = {r.id: r for r in session.scalars(select(Run).where(Run.id.in_([x.info.run_id for x in records])))}
        rates = flip_rates(session, records, runs)
        ladder = [compare.LadderStep(step, tuple(loaded[r.info.run_id] for (t, s), r in picked.chosen.items()
                                                 if s == step and r.info.run_id in loaded)) for step in steps]
        accuracy = compare.build_ladder_report(ladder, baseline=baseline, margins=margins, force=force,
                                               flip_rates=rates)
        tokens = _pair_tokens(picked, loaded, steps)
        rows = _length_rows(tokens) if lengths else ()
        endpoints = {name: queries.get_endpoint(session, name) for name in steps}
        decisions = tuple(_decide_pair(session, endpoints[a], endpoints[b], picked, accuracy, tokens)
                          for a, b in zip(steps, steps[1:]))
    return LadderDecision(tuple(steps), margins, picked, accuracy, rows, decisions)


@dataclass(frozen=True, eq=False)
class PairTokens:
    """Output tokens, correctness, finish reasons and extracted answers of two runs on the items both answered."""

    task: str
    step_a: str
    step_b: str
    run_a: int
    run_b: int
    tokens: tuple[np.ndarray, np.ndarray]
    correct: tuple[np.ndarray, np.ndarray]
    finish: tuple[np.ndarray, np.ndarray]
    extracted: tuple[np.ndarray, np.ndarray]

    @property
    def truncated(self) -> tuple[int, int]:
        return int(np.sum(self.finish[0] == "length")), int(np.sum(self.finish[1] == "length"))


def pair_tokens(run_a: compare.StepRun, run_b: compare.StepRun) -> PairTokens | str:
    """The two runs' paired output figures; or why they do not pair."""
    try:
        paired = pairing.pair_runs(run_a.items, run_b.items, run_a.info, run_b.info, force=True,
                                 arrays=(run_a.arrays, run_b.arrays))
    except pairing.PairingError as exc:
        return str(exc)
    tokens_a, tokens_b = paired.values("completion_tokens")
    return PairTokens(run_a.info.task, run_a.info.endpoint, run_b.info.endpoint, run_a.info.run_id,
                      run_b.info.run_id, (np.asarray(tokens_a, dtype=float), np.asarray(tokens_b, dtype=float)),
                      paired.correct(), paired.values("finish_reason"), paired.values("extracted"))


def _pair_tokens(picked: Picked, loaded: Mapping[int, compare.StepRun], steps: Sequence[str]) -> dict[
        tuple[str, str, str], PairTokens | str]:
    """(task, step A, step B) -> paired output figures, for every step up with a run on both sides."""
    found: dict[tuple[str, str, str], PairTokens | str] = {}
    for task in picked.tasks():
        for a, b in zip(steps, steps[1:]):
            run_a, run_b = picked.run(task, a), picked.run(task, b)
            if run_a is not None and run_b is not None:
                found[(task, a, b)] = pair_tokens(loaded[run_a.info.run_id], loaded[run_b.info.run_id])
    return found


def _length_rows(tokens: Mapping[tuple[str, str, str], PairTokens | str]) -> tuple[LengthRow, ...]:
    rows = []
    for key, pair in tokens.items():
        row = length_row(pair)
        if isinstance(row, str):
            log.info("no length figures for %s %s -> %s: %s", *key, row)
        else:
            rows.append(row)
    return tuple(rows)


def length_row(pair: PairTokens | str) -> LengthRow | str:
    """Output tokens of B over A with intervals and tests, and how many answers changed; or why not."""
    if isinstance(pair, str):
        return pair
    changed = int(sum((x or "") != (y or "") for x, y in zip(*pair.extracted)))
    try:
        inflation = output_length.measure_length_inflation(*pair.tokens, *pair.correct, *pair.finish,
                                                           confidence=rule.CONFIDENCE)
    except output_length.TimingInputError as exc:
        return str(exc)
    return LengthRow(pair.task, pair.step_a, pair.step_b, pair.run_a, pair.run_b, changed, inflation)


# -- decisions --------------------------------------------------------------------------------


def _decide_pair(session: Session, ep_a: Endpoint, ep_b: Endpoint, picked: Picked,
                 accuracy: compare.LadderReport,
                 tokens: Mapping[tuple[str, str, str], PairTokens | str]) -> PairChoice:
    out = []
    for workload in WORKLOADS:
        task = task_of(workload)
        if task is None:
            out.append(_decide_chat(session, ep_a, ep_b, accuracy))
        else:
            out.append(_decide_task(session, task, ep_a, ep_b, picked, accuracy, tokens.get((task, ep_a.name,
                                                                                               ep_b.name))))
    return PairChoice(ep_a.name, ep_b.name, tuple(out))


def _speeds(session: Session, workload: str, ep_a: Endpoint, ep_b: Endpoint) -> tuple[list[Any], list[Reason]]:
    speeds = [_speed(session, ep, workload) for ep in (ep_a, ep_b)]
    return speeds, [Reason(ReasonKind.NO_SPEED, s) for s in speeds if isinstance(s, str)]


def _speed(session: Session, endpoint: Endpoint, workload: str) -> task_time.EndpointSpeed | str:
    """`endpoint_speed`, read once per session: a ladder asks for each step's speeds twice."""
    memo = session.info.setdefault("evalsvc_speeds", {})
    key = (endpoint.id, workload)
    if key not in memo:
        memo[key] = endpoint_speed(session, endpoint, workload)
    return memo[key]


def _ratios(tokens: tuple[Any, Any], correct: tuple[Any, Any],
            missing: list[Reason]) -> output_length.TokenRatios | None:
    try:
        return output_length.token_ratios(*tokens, *correct)
    except output_length.TimingInputError as exc:
        missing.append(Reason(ReasonKind.NO_LENGTHS, str(exc)))
        return None


def _decide_task(session: Session, task: str, ep_a: Endpoint, ep_b: Endpoint, picked: Picked,
                 accuracy: compare.LadderReport, pair: PairTokens | str | None) -> WorkloadDecision:
    workload = workload_of(task)
    a, b = ep_a.name, ep_b.name
    missing = [Reason(ReasonKind.NO_RUN, picked.why_missing(task, step)) for step in (a, b)
               if picked.run(task, step) is None]
    entry = accuracy.entry(task, a, b)
    if entry is None:
        return decide_workload(workload, a, b, accuracy=None, accuracy_from=task, tokens=None, time=None,
                               missing=missing or [Reason(ReasonKind.NO_RUN, f"no paired {task} runs of {a} and {b}")])
    comparison = entry.comparison
    speeds, missing = _speeds(session, workload, ep_a, ep_b)
    ratios, time, truncated = None, None, None
    if not isinstance(pair, PairTokens):
        missing.append(Reason(ReasonKind.NO_LENGTHS, pair or f"no usable {task} token counts for {a} and {b}"))
    else:
        truncated = pair.truncated
        ratios = _ratios(pair.tokens, pair.correct, missing)
        if not missing:
            time = _time_or_reason(pair.tokens, speeds, missing)
    return decide_workload(workload, a, b, accuracy=comparison, accuracy_from=task, tokens=ratios, time=time,
                           truncated=truncated, missing=missing, settle=comparison.settle)


def _decide_chat(session: Session, ep_a: Endpoint, ep_b: Endpoint,
                 accuracy: compare.LadderReport) -> WorkloadDecision:
    a, b = ep_a.name, ep_b.name
    comparisons = [e.comparison for e in accuracy.entries if (e.step_a, e.step_b) == (a, b)]
    worst = min(comparisons, key=lambda c: c.verdict.rank) if comparisons else None
    speeds, missing = _speeds(session, "chat", ep_a, ep_b)
    if worst is None:
        missing.insert(0, Reason(ReasonKind.NO_RUN, "no accuracy comparison of the two steps to stand in for chat"))
    found = chat_tokens(session, ep_a, ep_b)
    ratios, time, truncated = None, None, None
    if isinstance(found, str):
        if not any(r.kind is ReasonKind.NO_SPEED for r in missing):  # a missing probe is said once
            missing.append(Reason(ReasonKind.NO_LENGTHS, found))
    else:
        tokens, truncated, cut = found
        ones = np.ones(len(tokens[0]), dtype=bool)
        ratios = _ratios(tokens, (ones, ones), missing)
        if cut is not None:
            missing.append(cut)
        elif not missing:
            time = _time_or_reason(tokens, speeds, missing)
    return decide_workload("chat", a, b, accuracy=worst, accuracy_from=worst.task if worst else None,
                           tokens=ratios, time=time, truncated=truncated, missing=missing,
                           settle=worst.settle if worst else None)


def _chat_frame(session: Session, ep_a: Endpoint, ep_b: Endpoint) -> tuple[pd.DataFrame, list[SpeedRun]] | str:
    runs = [queries.latest_speed_run(session, ep.id, "chat") for ep in (ep_a, ep_b)]
    if any(r is None or not r.measured for r in runs):
        return "chat output lengths need a measured chat speed run (`evalsvc speed --workload chat`) of both steps"
    frames = []
    for run in runs:
        assert run is not None
        rows = [(pid, s.output_tokens, s.finish_reason) for pid, s in queries.speed_samples(session, run.id) if s.ok]
        frames.append(pd.DataFrame(rows, columns=["prompt_id", "tokens", "finish"]))
    joined = frames[0].merge(frames[1], on="prompt_id", suffixes=("_a", "_b"))
    return joined.reset_index(drop=True), [r for r in runs if r is not None]


ChatTokens = tuple[tuple[np.ndarray, np.ndarray], tuple[int, int], Reason | None]


def chat_tokens(session: Session, ep_a: Endpoint, ep_b: Endpoint) -> ChatTokens | str:
    """Chat output tokens of A and B from the two latest chat probes, paired by prompt; how many answers of
    each the probe's cap cut; and a refusal when any was cut (a cut answer understates how much a step
    writes); or why there are none."""
    found = _chat_frame(session, ep_a, ep_b)
    if isinstance(found, str):
        return found
    joined, runs = found
    tokens = (joined.tokens_a.to_numpy(dtype=float, na_value=np.nan),
              joined.tokens_b.to_numpy(dtype=float, na_value=np.nan))
    cut = (int((joined.finish_a == "length").sum()), int((joined.finish_b == "length").sum()))
    if not any(cut):
        return tokens, cut, None
    caps = " and ".join(str(r.max_tokens) for r in runs)
    return tokens, cut, Reason(ReasonKind.TRUNCATED, (
        f"{cut[0]} chat answers of {ep_a.name} and {cut[1]} of {ep_b.name} (of {len(joined)} paired prompts) "
        f"were cut at the probe's cap ({caps} tokens), which biases the length ratio; measure again with a "
        "larger --max-tokens"))


def time_change(tokens: tuple[np.ndarray, np.ndarray],
                speeds: Sequence[task_time.EndpointSpeed]) -> task_time.TaskTimeChange | str:
    """Task time of B over A from paired output tokens and the two speeds; or why not."""
    try:
        return task_time.compare_task_time(tokens[0], tokens[1], speeds[0], speeds[1], confidence=rule.CONFIDENCE)
    except output_length.TimingInputError as exc:
        return str(exc)


def _time_or_reason(tokens: tuple[np.ndarray, np.ndarray], speeds: Sequence[task_time.EndpointSpeed],
                    missing: list[Reason]) -> task_time.TaskTimeChange | None:
    time = time_change(tokens, speeds)
    if isinstance(time, str):
        missing.append(Reason(ReasonKind.NO_LENGTHS, time))
        return None
    return time


# -- two refs -------------------------------------------------------------------------------


def compare_refs(store: Store, ref_a: str, ref_b: str, tasks: Sequence[str], margins: rule.Margins = rule.Margins(),
                 force: bool = False) -> list[compare.Comparison]:
    """Compare two endpoints (runs picked as a two-step ladder picks them) or two run ids."""
    if ref_a.isdigit() and ref_b.isdigit():
        return [_compare_run_ids(store, ref_a, ref_b, margins, force)]
    with store.session() as session:
        records = load_records(session, [ref_a, ref_b])
        picked = pick_runs(records, [ref_a, ref_b], tasks, force)
        runs = {r.id: r for r in session.scalars(select(Run).where(Run.id.in_([x.info.run_id for x in records])))}
        rates = flip_rates(session, records, runs)
        loaded = _step_runs(session, picked)
        out, why = [], []
        for task in tasks:
            run_a, run_b = picked.run(task, ref_a), picked.run(task, ref_b)
            if run_a is None or run_b is None:
                why.append(picked.why_missing(task, ref_b if run_a else ref_a))
                continue
            out.append(_compare_pair(loaded[run_a.info.run_id], loaded[run_b.info.run_id], margins, force, rates))
    if not out:
        _refuse(picked, ref_a, ref_b, why)
    return out


def _refuse(picked: Picked, ref_a: str, ref_b: str, why: Sequence[str]) -> None:
    """Raise why two endpoints share no comparable run: other settings (pass --force), or no run at all."""
    other = [a for a in picked.aside if a.reason is AsideReason.OTHER_SETTINGS]
    if other:
        differences = tuple(dict.fromkeys(d for a in other for d in a.differences))
        raise pairing.SettingsMismatch(
            f"{ref_a!r} and {ref_b!r} have no runs with the same settings: " + "; ".join(why)
            + "; use --force to compare them anyway", differences)
    raise queries.NotFound(f"{ref_a!r} and {ref_b!r} have no task with a complete run on both sides: "
                           + "; ".join(why))


def _compare_pair(run_a: compare.StepRun, run_b: compare.StepRun, margins: rule.Margins, force: bool,
                  rates: Mapping[tuple[str, str], float]) -> compare.Comparison:
    task = run_a.info.task
    known = [rates[(run.info.endpoint, task)] for run in (run_a, run_b) if (run.info.endpoint, task) in rates]
    return compare.compare_runs(run_a.items, run_b.items, run_a.info, run_b.info, margin=margins.of(task),
                                force=force, flip_rate=sum(known) / len(known) if known else None,
                                arrays=(run_a.arrays, run_b.arrays))


def _compare_run_ids(store: Store, ref_a: str, ref_b: str, margins: rule.Margins,
                     force: bool) -> compare.Comparison:
    with store.session() as session:
        run_a, run_b = queries.resolve_run(session, ref_a), queries.resolve_run(session, ref_b)
        if run_a.task != run_b.task:
            raise pairing.PairingError(f"run {run_a.id} is {run_a.task} and run {run_b.id} is {run_b.task}; "
                                     "compare runs of the same task")
        records = load_records(session, sorted({run_a.endpoint.name, run_b.endpoint.name}))
        rates = flip_rates(session, records, {r.id: r for r in session.scalars(
            select(Run).where(Run.id.in_([x.info.run_id for x in records])))})
        steps = [compare.StepRun(run_info(r), queries.items_frame(session, r.id)) for r in (run_a, run_b)]
    return _compare_pair(steps[0], steps[1], margins, force, rates)
