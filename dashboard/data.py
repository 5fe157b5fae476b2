"""Cached reads for the dashboard: the store through `db.queries`, figures through `evalsvc`.

Every heavy result is cached under the keys of the runs it came from
(`RunKey`: id, item count, status), so a finished run is read once and a run
still being written is re-read as its items arrive. The runs table itself is
cached for a couple of seconds only, which is what makes progress live.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import analysis
from dashboard.analysis import RunKey, StepDecision
from sqlalchemy.orm import Session

from db import queries
from db.engine import DB_ENV, Store, open_store, to_url
from db.models import Endpoint
from evalsvc import compare, reports, stats, timing

log = logging.getLogger(__name__)

RUNS_TTL_S = 2.0
RUN_COLUMNS = (
    "run_id", "endpoint", "task", "template", "mode", "decoding", "config_hash", "status", "n_items", "n",
    "correct", "errors", "truncated", "accuracy", "mean_completion_tokens", "repeat", "started_at", "finished_at",
    "error",
)


# --- where the store is ----------------------------------------------------------


def db_url(argv: Sequence[str] | None = None) -> str:
    """The store URL: `--db URL` after `--` on the streamlit command line, else $EVALSVC_DB, else the default."""
    args = list(sys.argv[1:] if argv is None else argv)
    for index, arg in enumerate(args):
        if arg == "--db" and index + 1 < len(args):
            return to_url(args[index + 1])
        if arg.startswith("--db="):
            return to_url(arg.split("=", 1)[1])
    return to_url(os.environ.get(DB_ENV) or None)


@st.cache_resource(show_spinner=False)
def get_store(url: str) -> Store:
    """One store (engine and connection pool) per URL for the whole server."""
    return open_store(url)


# --- runs and items -------------------------------------------------------------


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def load_runs(url: str) -> pd.DataFrame:
    """Every run with its counts and configuration, one row each, oldest first."""
    with get_store(url).session() as session:
        summaries = queries.summarize_runs(session)
        by_id = queries.get_runs(session, [summary.run_id for summary in summaries])
        rows = []
        for summary in summaries:
            run = by_id.get(summary.run_id)
            if run is None:  # deleted between the two reads
                continue
            rows.append({
                **summary.__dict__, "mode": run.mode, "decoding": dict(run.decoding or {}),
                "config_hash": run.config_hash, "error": run.error,
            })
    frame = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    for column in ("started_at", "finished_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def run_keys(runs: pd.DataFrame) -> dict[int, RunKey]:
    """The cache key of every run in the table."""
    rows = runs[["run_id", "n", "status"]].to_dict("records")  # not iterrows: several times faster
    return {int(row["run_id"]): analysis.run_key(row) for row in rows}


@st.cache_resource(show_spinner=False, max_entries=512)
def load_items(url: str, key: RunKey) -> pd.DataFrame:
    """One row per item of a run (no texts), as `db.queries.items_frame` returns it.

    Shared, not copied: every caller gets the same frame, so none may modify
    it in place (derive a new frame instead). A ladder page reads fifty runs
    several times over, and copying each frame out of a data cache cost more
    than the statistics on it.
    """
    with get_store(url).session() as session:
        return queries.items_frame(session, key.run_id)


LADDER_ITEM_COLUMNS = ("item_id", "item_hash", "status", "correct", "completion_tokens", "finish_reason")


@st.cache_resource(show_spinner=False, max_entries=16)
def load_ladder(url: str, keys: tuple[RunKey, ...]) -> dict[int, compare.StepRun]:
    """Items and settings of many runs (a ladder's), in two queries: run id -> run.

    Only `LADDER_ITEM_COLUMNS` of the items: all that the ladder report, the
    decisions, the step rows and the length charts read. Shared and not copied, like
    `load_items`. Runs without items are left out.
    """
    ids = [key.run_id for key in keys]
    with get_store(url).session() as session:
        frames = queries.items_frames(session, ids, LADDER_ITEM_COLUMNS)
        runs = queries.get_runs(session, ids)
        return {run_id: compare.StepRun(reports.run_info(runs[run_id]), frame)
                for run_id, frame in frames.items() if run_id in runs}


def load_item(url: str, run_id: int, item_id: str) -> dict[str, Any] | None:
    """Everything stored about one item of one run, texts included; None when absent."""
    with get_store(url).session() as session:
        rows = queries.get_items(session, run_id, [item_id])
        if not rows:
            return None
        item = rows[0]
        return {column.key: getattr(item, column.key) for column in item.__mapper__.column_attrs}


@st.cache_data(ttl=10, show_spinner=False)
def endpoint_speeds(url: str, endpoints: tuple[str, ...]) -> dict[str, dict[str, timing.EndpointSpeed]]:
    """Each endpoint's latest speed per workload (`evalsvc speed`), where one is stored and usable."""
    found: dict[str, dict[str, timing.EndpointSpeed]] = {}
    with get_store(url).session() as session:
        for name in endpoints:
            endpoint = queries.get_endpoint(session, name)
            speeds = {workload: _speed(session, endpoint, workload) for workload in analysis.WORKLOADS}
            found[name] = {workload: speed for workload, speed in speeds.items() if speed is not None}
    return found


def _speed(session: Session, endpoint: Endpoint, workload: str) -> timing.EndpointSpeed | None:
    speed = reports.endpoint_speed(session, endpoint, workload)
    if isinstance(speed, str):
        log.info("no usable %s speed for %s: %s", workload, endpoint.name, speed)
        return None
    return speed


# --- pairs ----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class PairResult:
    """Two runs paired item by item, or why they could not be."""

    comparison: compare.Comparison | None
    items: pd.DataFrame
    error: str | None = None
    differences: tuple[str, ...] = ()


@st.cache_data(show_spinner=False, max_entries=4096)
def _info(url: str, run_id: int) -> stats.RunInfo:
    """What a run was (endpoint, task, template, decoding); fixed once the run exists."""
    with get_store(url).session() as session:
        run = queries.resolve_run(session, str(run_id))
        return stats.RunInfo(
            run_id=run.id, endpoint=run.endpoint.name, task=run.task, template=run.template,
            decoding=dict(run.decoding or {}), mode=run.mode, config_hash=run.config_hash,
        )


def pair(
    url: str, key_a: RunKey, key_b: RunKey, force: bool = False, columns: tuple[str, ...] | None = None
) -> PairResult:
    """The paired items and comparison of run B against run A; only `columns` of each run's items when given."""
    info_a, info_b = _info(url, key_a.run_id), _info(url, key_b.run_id)
    # `force` changes nothing when the settings agree: one cache entry then serves every caller.
    return _pair(url, key_a, key_b, force and bool(stats.settings_differences(info_a, info_b)), columns)


@st.cache_data(show_spinner=False, max_entries=256)
def _pair(url: str, key_a: RunKey, key_b: RunKey, force: bool, columns: tuple[str, ...] | None) -> PairResult:
    info_a, info_b = _info(url, key_a.run_id), _info(url, key_b.run_id)
    items_a, items_b = load_items(url, key_a), load_items(url, key_b)
    if columns is not None:
        items_a, items_b = items_a[list(columns)], items_b[list(columns)]
    try:
        paired = stats.pair_runs(items_a, items_b, info_a, info_b, force=force)
    except stats.SettingsMismatch as exc:
        return PairResult(None, pd.DataFrame(), str(exc), exc.differences)
    except stats.PairingError as exc:
        return PairResult(None, pd.DataFrame(), str(exc))
    return PairResult(compare.summarize_pairing(paired), paired.items, None, paired.differences)


# --- the ladder -----------------------------------------------------------------------


def step_runs(runs: pd.DataFrame, steps: Sequence[str]) -> dict[str, dict[str, RunKey]]:
    """For each task, the latest complete run of every step that has one: task -> step -> key."""
    latest = analysis.latest_runs(runs)
    keys = run_keys(runs)
    found: dict[str, dict[str, RunKey]] = {}
    for task in analysis.tasks_in(runs):
        per_step = {step: keys[latest[(step, task)]] for step in steps if (step, task) in latest}
        if per_step:
            found[task] = per_step
    return found


def ladder_keys(per_task: dict[str, dict[str, RunKey]]) -> tuple[RunKey, ...]:
    """The runs of a ladder (`step_runs`), in the order every reader of `load_ladder` passes them."""
    return tuple(key for per_step in per_task.values() for key in per_step.values())


@st.cache_data(show_spinner=False, max_entries=32)
def ladder_report(url: str, steps: tuple[str, ...], keys: tuple[tuple[str, str, RunKey], ...]) -> compare.LadderReport | str:
    """Every step against the previous one and the baseline, Holm-adjusted; or why not."""
    by_step: dict[str, list[compare.StepRun]] = {step: [] for step in steps}
    loaded = load_ladder(url, tuple(key for _, _, key in keys))
    for step, _task, key in keys:
        if key.run_id in loaded:
            by_step[step].append(loaded[key.run_id])
    ladder = [compare.LadderStep(step, tuple(by_step[step])) for step in steps]
    try:
        return compare.build_ladder_report(ladder)
    except (stats.PairingError, ValueError) as exc:
        return str(exc)


def report_for(url: str, runs: pd.DataFrame, steps: Sequence[str]) -> compare.LadderReport | str:
    """The ladder report of `steps` on their latest complete runs."""
    per_task = step_runs(runs, steps)
    keys = tuple((step, task, key) for task, per_step in per_task.items() for step, key in per_step.items())
    if len(steps) < 2 or not keys:
        return "pick at least two steps with complete runs to compare"
    return ladder_report(url, tuple(steps), keys)


@st.cache_data(show_spinner=False, max_entries=1024)
def length_and_time(
    url: str, key_a: RunKey, key_b: RunKey, speed_a: timing.EndpointSpeed | None, speed_b: timing.EndpointSpeed | None,
) -> tuple[timing.LengthInflation | None, timing.TaskTimeChange | None, str | None]:
    """Output-length change of B over A on paired items, and the task-time change when both speeds are known."""
    run_a, run_b = (compare.StepRun(_info(url, key.run_id), load_items(url, key)) for key in (key_a, key_b))

    def inflation(paired: stats.Paired, tokens_a: np.ndarray, tokens_b: np.ndarray) -> timing.LengthInflation:
        return timing.measure_length_inflation(tokens_a, tokens_b, *paired.correct(), *paired.values("finish_reason"))

    return _tokens_and_time(run_a, run_b, speed_a, speed_b, inflation)


Length = TypeVar("Length")


def _tokens_and_time(
    run_a: compare.StepRun, run_b: compare.StepRun, speed_a: timing.EndpointSpeed | None,
    speed_b: timing.EndpointSpeed | None, measure: Callable[[stats.Paired, np.ndarray, np.ndarray], Length],
) -> tuple[Length | None, timing.TaskTimeChange | None, str | None]:
    """Pair the runs, `measure` their output tokens, and compare task time when both speeds are known;
    or say why not."""
    try:
        paired = stats.pair_runs(run_a.items, run_b.items, run_a.info, run_b.info, force=True,
                                 arrays=(run_a.arrays, run_b.arrays))
    except stats.PairingError as exc:
        return None, None, str(exc)
    tokens_a, tokens_b = paired.values("completion_tokens")
    try:
        length = measure(paired, tokens_a, tokens_b)
    except timing.TimingInputError as exc:
        return None, None, str(exc)
    if speed_a is None or speed_b is None:
        return length, None, None
    try:
        return length, timing.compare_task_time(tokens_a, tokens_b, speed_a, speed_b), None
    except timing.TimingInputError as exc:
        return length, None, str(exc)


# One step-to-step decision to make: task, step A, step B, accuracy verdict, the two runs, the two speeds.
DecisionInput = tuple[str, str, str, str, RunKey, RunKey, "timing.EndpointSpeed | None", "timing.EndpointSpeed | None"]


def step_decisions(
    url: str, runs: pd.DataFrame, steps: Sequence[str], report: compare.LadderReport
) -> list[StepDecision]:
    """Step N+1 against step N on every workload with an accuracy task: take it or stop."""
    speeds = endpoint_speeds(url, tuple(steps))
    per_task = step_runs(runs, steps)
    entries = {(e.comparison.task, e.step_a, e.step_b): e for e in report.entries if e.kind == "previous"}
    todo: list[DecisionInput] = []
    for task, per_step in per_task.items():
        workload = analysis.workload_of(task)
        for a, b in zip(steps, steps[1:]):
            entry = entries.get((task, a, b))
            if entry is None or a not in per_step or b not in per_step:
                continue
            todo.append((task, a, b, compare.verdict_label(entry.comparison), per_step[a], per_step[b],
                         speeds.get(a, {}).get(workload), speeds.get(b, {}).get(workload)))
    return _decisions(url, ladder_keys(per_task), tuple(todo))


@st.cache_data(show_spinner=False, max_entries=32)
def _decisions(url: str, ladder_keys: tuple[RunKey, ...], todo: tuple[DecisionInput, ...]) -> list[StepDecision]:
    """Every decision of a ladder in one cache entry, on the runs the ladder report read."""
    loaded = load_ladder(url, ladder_keys)
    return [_decide(task, a, b, verdict, loaded[key_a.run_id], loaded[key_b.run_id], speed_a, speed_b)
            for task, a, b, verdict, key_a, key_b, speed_a, speed_b in todo]


def _decide(
    task: str, step_a: str, step_b: str, verdict: str, run_a: compare.StepRun, run_b: compare.StepRun,
    speed_a: timing.EndpointSpeed | None, speed_b: timing.EndpointSpeed | None,
) -> StepDecision:
    workload = analysis.workload_of(task)
    tokens, time, problem = _tokens_and_time(
        run_a, run_b, speed_a, speed_b, lambda paired, a, b: timing.token_ratios(a, b, *paired.correct()))
    base = dict(workload=workload, task=task, step_a=step_a, step_b=step_b, verdict=verdict)
    token_ratio = tokens.all_items if tokens else None
    if tokens is None or time is None:
        missing = [s for s, speed in ((step_a, speed_a), (step_b, speed_b)) if speed is None]
        why = problem or f"no {workload} speed stored for {', '.join(missing)}; run `evalsvc speed`"
        return StepDecision(**base, take_b=None, reason=f"accuracy {verdict}; {why}", token_ratio=token_ratio,
                            speed_ratio=None, time_ratio=None, time_ci=None)
    decision = timing.decide(workload, verdict, tokens, time)
    return StepDecision(**base, take_b=decision.take_b, reason=decision.reason, token_ratio=token_ratio,
                        speed_ratio=time.speed_ratio, time_ratio=time.ratio, time_ci=time.ci)


# --- noise floor -------------------------------------------------------------------------


def repeat_groups(runs: pd.DataFrame) -> list[pd.DataFrame]:
    """Complete runs of one endpoint, task and configuration, where there are at least two."""
    done = runs[runs["status"] == "complete"]
    groups = [g.sort_values("repeat") for _, g in done.groupby(["endpoint", "task", "config_hash"]) if len(g) >= 2]
    return groups


@st.cache_data(show_spinner=False, max_entries=256)
def flip_rate(url: str, key_1: RunKey, key_2: RunKey) -> stats.FlipRate | str:
    """How often two runs of the same endpoint disagree on correctness."""
    try:
        return stats.flip_rate(load_items(url, key_1), load_items(url, key_2))
    except stats.PairingError as exc:
        return str(exc)


def noise_floor(url: str, runs: pd.DataFrame) -> pd.DataFrame:
    """Flip rate between the first two repeats of each endpoint/task/config that has repeats."""
    keys = run_keys(runs)
    rows = []
    for group in repeat_groups(runs):
        first, second = group.iloc[0], group.iloc[1]
        result = flip_rate(url, keys[int(first["run_id"])], keys[int(second["run_id"])])
        if isinstance(result, str):
            continue
        rows.append({
            "endpoint": first["endpoint"], "task": first["task"], "runs": f"{first['run_id']} and {second['run_id']}",
            "paired items": result.n_paired, "flips": result.flips, "flip rate": result.rate,
        })
    return pd.DataFrame(rows, columns=["endpoint", "task", "runs", "paired items", "flips", "flip rate"])
