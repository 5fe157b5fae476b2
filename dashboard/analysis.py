"""What the dashboard shows, computed from plain DataFrames: no Streamlit, no I/O.

The pages call these through the cached readers in `dashboard.data`; keeping
them free of Streamlit lets them be tested directly and reused by a report.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd
from scipy import stats as sps

from evalsvc.decision import build, rule
from evalsvc.decision.build import TASK_NAMES, WORKLOADS
from evalsvc.decision.workload import WorkloadDecision
from evalsvc.statistics import paired_tests


FILTER_A_ONLY = "A right, B wrong"
FILTER_B_ONLY = "B right, A wrong"
FILTER_BOTH_WRONG = "both wrong, different answers"
FILTER_LENGTH = "big length change"
FILTERS = (FILTER_A_ONLY, FILTER_B_ONLY, FILTER_BOTH_WRONG, FILTER_LENGTH)


class RunKey(NamedTuple):
    """A run plus what changes while it is written, so cached results refresh as items arrive."""

    run_id: int
    n: int
    status: str


workload_of = build.workload_of


def run_key(row: Mapping[str, Any]) -> RunKey:
    """The cache key of one row of the runs table."""
    return RunKey(int(row["run_id"]), int(row["n"]), str(row["status"]))


def ladder_order(runs: pd.DataFrame) -> list[str]:
    """Endpoints in the order their first run was started: the ladder order by default."""
    if runs.empty:
        return []
    first = runs.groupby("endpoint")["run_id"].min().sort_values()
    return list(first.index)


def latest_runs(runs: pd.DataFrame) -> dict[tuple[str, str], int]:
    """The latest complete run per (endpoint, task), as `evalsvc compare NAME` picks it."""
    done = runs[runs["status"] == "complete"]
    if done.empty:
        return {}
    ordered = done.assign(_fin=done["finished_at"].fillna(pd.Timestamp.min.tz_localize("UTC")))
    ordered = ordered.sort_values(["_fin", "run_id"])
    last = ordered.groupby(["endpoint", "task"]).tail(1)
    return {(r.endpoint, r.task): int(r.run_id) for r in last.itertuples()}


def tasks_in(runs: pd.DataFrame) -> list[str]:
    """Tasks present in the store, known ones first."""
    found = set(runs["task"]) if not runs.empty else set()
    known = [task for task in TASK_NAMES if task in found]
    return known + sorted(found - set(known))


# --- the ladder table ----------------------------------------------------------


def accuracy_interval(correct: int, scored: int) -> tuple[float, float] | None:
    """Wilson 95% interval for one run's accuracy; None with nothing scored."""
    if scored <= 0:
        return None
    z = float(sps.norm.ppf(0.5 + rule.CONFIDENCE / 2))
    low, high = paired_tests.wilson_interval(correct, scored, z)
    return max(0.0, low), min(1.0, high)


def step_row(step: str, summary: Mapping[str, Any], items: pd.DataFrame) -> dict[str, Any]:
    """One ladder-table row: accuracy with its interval, output tokens, truncations, errors."""
    scored = int(summary["n"]) - int(summary["errors"])
    interval = accuracy_interval(int(summary["correct"]), scored)
    tokens = items.loc[items["status"] == "ok", "completion_tokens"].dropna()
    return {
        "step": step,
        "run": int(summary["run_id"]),
        "scored": scored,
        "correct": int(summary["correct"]),
        "accuracy": summary["accuracy"],
        "95% CI": f"{interval[0]:.1%} to {interval[1]:.1%}" if interval else "n/a",
        "mean tokens": float(tokens.mean()) if len(tokens) else None,
        "median tokens": float(tokens.median()) if len(tokens) else None,
        "truncated": int(summary["truncated"]),
        "errors": int(summary["errors"]),
    }


def next_step(candidates: Sequence[str], a: str) -> str:
    """The step compared with `a` by default: the one after it, or for the last step the first other one."""
    index = list(candidates).index(a)
    rest = [step for step in candidates if step != a]
    return candidates[index + 1] if index + 1 < len(candidates) else rest[0]


def default_pair(per_task: Mapping[str, Mapping[str, RunKey]], steps: Sequence[str]) -> tuple[str, str, str] | None:
    """The task, step A and step B a page opens on when none is chosen: the first task with two steps' runs,
    its first step and the next one. None when no task has two."""
    if not per_task:
        return None
    task = next(iter(per_task))  # the task picker's first option
    candidates = [step for step in steps if step in per_task[task]]
    if len(candidates) < 2:
        return None
    return task, candidates[0], next_step(candidates, candidates[0])


def ship_step(steps: Sequence[str], decisions: Sequence[WorkloadDecision]) -> tuple[str, WorkloadDecision | None]:
    """Walk down the ladder while each next step is taken; the step reached and the first stop."""
    by_pair = {(d.step_a, d.step_b): d for d in decisions}
    current = steps[0]
    for following in steps[1:]:
        decision = by_pair.get((current, following))
        if decision is None or not decision.take_b:
            return current, decision
        current = following
    return current, None


# --- disagreements -------------------------------------------------------------


def outcome_label(correct: object, status: object, finish: object) -> str:
    """An item's outcome in words: right, wrong, error; 'cut at the token limit' added when truncated."""
    if status is not None and str(status) != "ok":
        return "error"
    label = "right" if bool(correct) else "wrong"
    return label + (", cut at the token limit" if finish == "length" else "")


def problem_items(items_a: pd.DataFrame, items_b: pd.DataFrame) -> pd.DataFrame:
    """Items that failed (no answer, left out of the pairing) or were cut at the token limit in either run:
    item, outcome A, outcome B."""
    cols = ["item_id", "status", "correct", "finish_reason"]
    both = items_a[cols].merge(items_b[cols], on="item_id", how="outer", suffixes=("_a", "_b"))
    found = both[_failed_or_cut(both, "a") | _failed_or_cut(both, "b")].sort_values("item_id")
    out = pd.DataFrame({"item_id": found["item_id"]})
    for side in ("a", "b"):
        out[f"outcome_{side}"] = [
            "missing" if pd.isna(s) else outcome_label(c, s, f)
            for c, s, f in zip(found[f"correct_{side}"], found[f"status_{side}"], found[f"finish_reason_{side}"])]
    failed = (out["outcome_a"].isin(["error", "missing"]) | out["outcome_b"].isin(["error", "missing"]))
    return pd.concat([out[failed], out[~failed]]).reset_index(drop=True)  # failed first: they are in no other list


def _failed_or_cut(both: pd.DataFrame, side: str) -> pd.Series:
    return (both[f"status_{side}"].fillna("missing") != "ok") | (both[f"finish_reason_{side}"] == "length")


def token_ratio(paired: pd.DataFrame) -> pd.Series:
    """Per-item B/A output tokens; NaN where either side has no count or A wrote none."""
    a = pd.to_numeric(paired["completion_tokens_a"], errors="coerce")
    b = pd.to_numeric(paired["completion_tokens_b"], errors="coerce")
    return (b / a.where(a > 0)).astype(float)


def filter_pairs(paired: pd.DataFrame, kind: str, min_ratio: float = 1.5) -> pd.DataFrame:
    """Paired items matching one disagreement filter, with a `B/A tokens` column.

    The length filter keeps items whose output grew or shrank by at least
    `min_ratio` times, whatever their correctness.
    """
    frame = paired.assign(**{"B/A tokens": token_ratio(paired)})
    a, b = frame["correct_a"], frame["correct_b"]
    if kind == FILTER_A_ONLY:
        mask = a & ~b
    elif kind == FILTER_B_ONLY:
        mask = ~a & b
    elif kind == FILTER_BOTH_WRONG:
        mask = ~a & ~b & (frame["extracted_a"].fillna("") != frame["extracted_b"].fillna(""))
    elif kind == FILTER_LENGTH:
        ratio = frame["B/A tokens"]
        mask = (ratio >= min_ratio) | (ratio <= 1 / min_ratio)
    else:
        raise ValueError(f"unknown filter {kind!r}; choose one of: {', '.join(FILTERS)}")
    return frame[mask.fillna(False)].reset_index(drop=True)


def question_text(request_json: str) -> str:
    """The prompt a stored request sent: the last user message, or the raw prompt."""
    try:
        request = json.loads(request_json or "{}")
    except json.JSONDecodeError:
        return request_json
    users = [m.get("content", "") for m in request.get("messages") or [] if m.get("role") == "user"]
    return users[-1] if users else request.get("prompt", "")


def completion_diff(text_a: str, text_b: str, label_a: str = "A", label_b: str = "B") -> str:
    """Line diff of two completions ('-' only in A, '+' only in B); empty when identical."""
    lines = difflib.unified_diff(
        (text_a or "").splitlines(), (text_b or "").splitlines(), fromfile=label_a, tofile=label_b, lineterm="", n=2
    )
    return "\n".join(lines)
