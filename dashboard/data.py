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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from sqlalchemy.orm import Session

from dashboard import analysis
from dashboard.analysis import RunKey
from db import queries
from db.engine import DB_ENV, Store, open_store, to_url
from db.models import Endpoint
from evalsvc.decision import build, rule
from evalsvc.decision import compare
from evalsvc.statistics import paired_tests
from evalsvc.statistics import pairing
from evalsvc.statistics import output_length
from evalsvc.statistics import task_time

log = logging.getLogger(__name__)

RUNS_TTL_S = 2.0
RUN_COLUMNS = (
    "run_id", "endpoint", "task", "template", "mode", "decoding", "config_hash", "status", "n_items", "n",
    "correct", "errors", "truncated", "accuracy", "mean_completion_tokens", "repeat", "started_at", "finished_at",
    "error", "isolation", "unknown_tokens",
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
        return {run_id: compare.StepRun(build.run_info(runs[run_id]), frame)
                for run_id, frame in frames.items() if run_id in runs}


def load_item(url: str, run_id: int, item_id: str) -> dict[str, Any] | None:
    """Everything stored about one item of one run, texts included; None when absent."""
    with get_store(url).session() as session:
        rows = queries.get_items(session, run_id, [item_id])
        if not rows:
            return None
        item = rows[0]
        return {column.key: getattr(item, column.key) for column in item.__mapper__.column_attrs}


def endpoint_speeds(url: str, endpoints: tuple[str, ...]) -> dict[str, dict[str, task_time.EndpointSpeed]]:
    """Each endpoint's latest speed per workload (`evalsvc speed`), where one is stored and usable."""
    return _endpoint_speeds(url, endpoints, speed_runs(url, endpoints))


@st.cache_data(show_spinner=False, max_entries=64)
def _endpoint_speeds(url: str, endpoints: tuple[str, ...],
                     speed_ids: tuple[int, ...]) -> dict[str, dict[str, task_time.EndpointSpeed]]:
    """Keyed on the stored speed runs (as the decisions are), so a new speed shows with them, never a stale one."""
    found: dict[str, dict[str, task_time.EndpointSpeed]] = {}
    with get_store(url).session() as session:
        for name in endpoints:
            endpoint = queries.get_endpoint(session, name)
            speeds = {workload: _speed(session, endpoint, workload) for workload in analysis.WORKLOADS}
            found[name] = {workload: speed for workload, speed in speeds.items() if speed is not None}
    return found


def _speed(session: Session, endpoint: Endpoint, workload: str) -> task_time.EndpointSpeed | None:
    speed = build.endpoint_speed(session, endpoint, workload)
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
def _info(url: str, run_id: int) -> pairing.RunInfo:
    """What a run was (endpoint, task, template, decoding); fixed once the run exists."""
    with get_store(url).session() as session:
        return build.run_info(queries.resolve_run(session, str(run_id)))


def pair(
    url: str, key_a: RunKey, key_b: RunKey, force: bool = False, columns: tuple[str, ...] | None = None,
    margins_: rule.Margins | None = None,
) -> PairResult:
    """The paired items and comparison of run B against run A; only `columns` of each run's items when given.

    `margins_` defaults to the sidebar's (`margins`).
    """
    info_a, info_b = _info(url, key_a.run_id), _info(url, key_b.run_id)
    # `force` changes nothing when the settings agree: one cache entry then serves every caller.
    forced = force and bool(pairing.settings_differences(info_a, info_b))
    return _pair(url, key_a, key_b, forced, columns, (margins_ or margins()).of(info_a.task))


@st.cache_data(show_spinner=False, max_entries=256)
def _pair(url: str, key_a: RunKey, key_b: RunKey, force: bool, columns: tuple[str, ...] | None,
          margin: float) -> PairResult:
    info_a, info_b = _info(url, key_a.run_id), _info(url, key_b.run_id)
    items_a, items_b = load_items(url, key_a), load_items(url, key_b)
    if columns is not None:
        items_a, items_b = items_a[list(columns)], items_b[list(columns)]
    try:
        paired = pairing.pair_runs(items_a, items_b, info_a, info_b, force=force)
    except pairing.SettingsMismatch as exc:
        return PairResult(None, pd.DataFrame(), str(exc), exc.differences)
    except pairing.PairingError as exc:
        return PairResult(None, pd.DataFrame(), str(exc))
    return PairResult(compare.summarize_pairing(paired, margin), paired.items, None, paired.differences)


# --- the ladder: every verdict and decision from evalsvc.decision ------------------------


def _ladder_runs_key(runs: pd.DataFrame, steps: Sequence[str]) -> tuple[RunKey, ...]:
    """The keys of every run of the steps: a finished, new or re-run run changes the ladder."""
    keys = run_keys(runs[runs["endpoint"].isin(list(steps))])
    return tuple(sorted(keys.values()))


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def speed_runs(url: str, steps: tuple[str, ...]) -> tuple[int, ...]:
    """The ids of the steps' speed runs: a new speed measurement changes the decisions and the speeds shown."""
    with get_store(url).session() as session:
        return queries.speed_run_ids(session, steps)


MARGIN_KEY = "margin_points_{task}"


def margins() -> rule.Margins:
    """The margins set in the sidebar, per task in points (default 2), as `--margin TASK=POINTS` sets them."""
    per_task = []
    for key, value in st.session_state.items():
        task = str(key).removeprefix(MARGIN_KEY.format(task=""))
        # A task at the default is left out: one cache key for "no margin changed", however the page got there.
        if task != key and value is not None and float(value) / 100 != build.DEFAULT_MARGINS.default:
            per_task.append((task, float(value) / 100))
    return rule.Margins(build.DEFAULT_MARGINS.default, tuple(sorted(per_task)))


@st.cache_resource(show_spinner=False, max_entries=16)
def _ladder(url: str, steps: tuple[str, ...], run_keys_: tuple[RunKey, ...], speeds: tuple[int, ...],
            force: bool, margins_: rule.Margins) -> build.LadderDecision | str:
    """The ladder's runs, comparisons, lengths and decisions, as the CLI's `report` makes them; or why not.

    Shared, not copied, like `load_items`.
    """
    try:
        # No page shows the length table: leave out its intervals.
        return build.build_ladder(get_store(url), steps, force=force, margins=margins_, lengths=False)
    except (pairing.PairingError, queries.NotFound, ValueError) as exc:
        return str(exc)


def ladder(url: str, runs: pd.DataFrame, steps: Sequence[str], force: bool = False,
           margins_: rule.Margins | None = None) -> build.LadderDecision | str:
    """Every figure of the ladder `steps`, from `evalsvc.decision.build`; or why there is none.

    `margins_` defaults to the sidebar's (`margins`).
    """
    if len(steps) < 2:
        return "pick at least two steps to compare"
    return _ladder(url, tuple(steps), _ladder_runs_key(runs, steps), speed_runs(url, tuple(steps)), force,
                   margins_ or margins())


class DefaultPair(NamedTuple):
    """The pair the pages open on when none is chosen: its task, steps, runs, and the ladder's order."""

    task: str
    a: str
    b: str
    key_a: RunKey
    key_b: RunKey
    order: tuple[str, ...]


def warm_up(url: str) -> DefaultPair | None:
    """Compute every page's first view into the caches (all steps, default margins), as the pages would.

    Called by `dashboard.serve` when the server starts, so whichever page a person opens first does not wait:
    the Ladder first (the page a plain address opens), then the default pair's Disagreements, Length and
    time, and Significance's noise floor. Each call is the one the page makes, with the same arguments, so
    the page finds its result in the cache. Returns the default pair, whose charts the caller builds.
    """
    runs = load_runs(url)
    steps = analysis.ladder_order(runs)
    if len(steps) < 2:
        return None
    found = ladder(url, runs, steps, margins_=build.DEFAULT_MARGINS)
    endpoint_speeds(url, tuple(steps))
    per_task = step_runs(runs, steps, url, found) if isinstance(found, build.LadderDecision) else {}
    if per_task:
        load_ladder(url, ladder_keys(per_task))
    ladder(url, runs, steps[:2], margins_=build.DEFAULT_MARGINS)  # the page's "stop at A or take B" default
    endpoint_speeds(url, tuple(steps[:2]))
    if not per_task:
        return None
    default = analysis.default_pair(per_task, steps)
    noise_floor(url, runs)
    if default is None:
        return None
    task, a, b = default
    _warm_pair(url, task, a, b, per_task[task])
    return DefaultPair(task, a, b, per_task[task][a], per_task[task][b], tuple(steps))


def _warm_pair(url: str, task: str, a: str, b: str, keys: dict[str, RunKey]) -> None:
    """The default pair's Disagreements and Length and time pages."""
    pair(url, keys[a], keys[b], margins_=build.DEFAULT_MARGINS)
    workload = analysis.workload_of(task)
    speeds = endpoint_speeds(url, (a, b))
    pair_length_and_time(url, keys[a], keys[b], speeds[a].get(workload), speeds[b].get(workload))
    pair(url, keys[a], keys[b], True, LADDER_ITEM_COLUMNS, margins_=build.DEFAULT_MARGINS)


def step_runs(runs: pd.DataFrame, steps: Sequence[str], url: str | None = None,
              found: build.LadderDecision | str | None = None) -> dict[str, dict[str, RunKey]]:
    """For each task, the run the ladder uses for every step that has one: task -> step -> key."""
    keys = run_keys(runs)
    if found is None and len(steps) >= 2:
        found = ladder(url or db_url(), runs, steps)
    if isinstance(found, build.LadderDecision):
        chosen = {(task, step): r.info.run_id for (task, step), r in found.picked.chosen.items()}
    else:  # one step, or no ladder: its latest complete run per task
        chosen = {(task, step): run_id for (step, task), run_id in analysis.latest_runs(runs).items() if step in steps}
    per_task: dict[str, dict[str, RunKey]] = {}
    for task in analysis.tasks_in(runs):
        per_step = {step: keys[chosen[(task, step)]] for step in steps if (task, step) in chosen}
        if per_step:
            per_task[task] = per_step
    return per_task


def ladder_keys(per_task: dict[str, dict[str, RunKey]]) -> tuple[RunKey, ...]:
    """The runs of a ladder (`step_runs`), in the order every reader of `load_ladder` passes them."""
    return tuple(key for per_step in per_task.values() for key in per_step.values())


@st.cache_data(show_spinner=False, max_entries=256)
def pair_length_and_time(
    url: str, key_a: RunKey, key_b: RunKey, speed_a: task_time.EndpointSpeed | None,
    speed_b: task_time.EndpointSpeed | None,
) -> tuple[output_length.LengthInflation | None, task_time.TaskTimeChange | None, str | None]:
    """Output-length change of any two runs, and the task-time change when both speeds are known,
    computed as the ladder computes them (`build.length_row`, `build.time_change`)."""
    run_a, run_b = (compare.StepRun(_info(url, key.run_id), load_items(url, key)) for key in (key_a, key_b))
    pair = build.pair_tokens(run_a, run_b)
    row = build.length_row(pair)
    if isinstance(row, str) or isinstance(pair, str):
        return None, None, row if isinstance(row, str) else str(pair)
    if speed_a is None or speed_b is None:
        return row.inflation, None, None
    time = build.time_change(pair.tokens, (speed_a, speed_b))
    return (row.inflation, None, time) if isinstance(time, str) else (row.inflation, time, None)


# --- noise floor -------------------------------------------------------------------------


def repeat_groups(runs: pd.DataFrame) -> list[pd.DataFrame]:
    """Complete runs of one endpoint, task and configuration, where there are at least two."""
    done = runs[runs["status"] == "complete"]
    groups = [g.sort_values("repeat") for _, g in done.groupby(["endpoint", "task", "config_hash"]) if len(g) >= 2]
    return groups


@st.cache_data(show_spinner=False, max_entries=256)
def flip_rate(url: str, key_1: RunKey, key_2: RunKey) -> paired_tests.FlipRate | str:
    """How often two runs of the same endpoint disagree on correctness."""
    try:
        return paired_tests.flip_rate(load_items(url, key_1), load_items(url, key_2))
    except pairing.PairingError as exc:
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
