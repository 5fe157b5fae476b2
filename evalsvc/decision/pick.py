"""Which stored run stands for each ladder step on each task. Pure: no I/O.

Per task, the ladder's settings are those shared by the most steps (ties: the
earliest step's), and its item count is the one most steps' latest matching
complete runs have (ties: the larger). Each step then takes its latest
complete run with those settings and at least that many items. Newer runs it
passes over are set aside with the reason: other settings, unfinished, or
fewer items. A step without a usable run loses only that task's decisions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from evalsvc.statistics import pairing


@dataclass(frozen=True)
class RunRecord:
    """What picking reads of one stored run; `order` sorts runs oldest first (finish time, then id)."""

    info: pairing.RunInfo
    status: str
    n_items: int
    order: tuple[Any, ...]

    @property
    def step(self) -> str:
        return self.info.endpoint

    @property
    def task(self) -> str:
        return self.info.task


class AsideReason(str, Enum):
    OTHER_SETTINGS = "other settings"
    UNFINISHED = "unfinished"
    FEWER_ITEMS = "fewer items"


@dataclass(frozen=True)
class Aside:
    """A run the ladder does not use, and why."""

    run_id: int
    step: str
    task: str
    reason: AsideReason
    detail: str
    differences: tuple[str, ...] = ()  # the settings that differ from the ladder's, for OTHER_SETTINGS

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "step": self.step, "task": self.task, "reason": self.reason.value,
                "detail": self.detail}


@dataclass(frozen=True)
class Picked:
    """The run chosen per (task, step), and the runs set aside."""

    chosen: dict[tuple[str, str], RunRecord]
    aside: tuple[Aside, ...]

    def run(self, task: str, step: str) -> RunRecord | None:
        return self.chosen.get((task, step))

    def tasks(self) -> list[str]:
        return list(dict.fromkeys(task for task, _ in self.chosen))

    def why_missing(self, task: str, step: str) -> str:
        """Why a step has no run of a task, in words."""
        passed = [a for a in self.aside if (a.task, a.step) == (task, step)]
        if not passed:
            return f"{step} has no complete {task} run"
        return f"{step} has no usable {task} run (" + "; ".join(f"run {a.run_id}: {a.detail}" for a in passed) + ")"


def _same_settings(a: pairing.RunInfo, b: pairing.RunInfo) -> bool:
    return not pairing.settings_differences(a, b)


def _ladder_settings(complete: Sequence[RunRecord], steps: Sequence[str]) -> pairing.RunInfo | None:
    """The settings shared by the most steps; ties go to the earliest step's latest run."""
    best, best_count = None, 0
    for step in steps:
        for run in sorted((r for r in complete if r.step == step), key=lambda r: r.order, reverse=True):
            count = len({r.step for r in complete if _same_settings(r.info, run.info)})
            if count > best_count:
                best, best_count = run.info, count
    return best


def _ladder_items(matching: Sequence[RunRecord], steps: Sequence[str]) -> int:
    """The item count most steps' latest matching runs have; ties go to the larger."""
    latest = {}
    for run in sorted(matching, key=lambda r: r.order):
        latest[run.step] = run.n_items
    counts = Counter(latest[s] for s in steps if s in latest)
    return max(counts, key=lambda n: (counts[n], n)) if counts else 0


def pick_runs(
    records: Sequence[RunRecord], steps: Sequence[str], tasks: Sequence[str] | None = None, force: bool = False
) -> Picked:
    """The run of every step on every task, per the module's rule; `force` lets runs of any settings match."""
    chosen: dict[tuple[str, str], RunRecord] = {}
    aside: list[Aside] = []
    in_ladder = [r for r in records if r.step in steps]
    for task in tasks or list(dict.fromkeys(r.task for r in in_ladder)):
        runs = [r for r in in_ladder if r.task == task]
        settings = _ladder_settings([r for r in runs if r.status == "complete"], steps)
        if settings is None:
            aside += [_aside(r, None, 0) for r in runs]
            continue
        matching = [r for r in runs if r.status == "complete" and (force or _same_settings(r.info, settings))]
        items = _ladder_items(matching, steps)
        for step in steps:
            newest_first = sorted((r for r in runs if r.step == step), key=lambda r: r.order, reverse=True)
            for run in newest_first:
                if run in matching and run.n_items >= items:
                    chosen[(task, step)] = run
                    break
                aside.append(_aside(run, None if force else settings, items))
    return Picked(chosen, tuple(aside))


def _aside(run: RunRecord, settings: pairing.RunInfo | None, items: int) -> Aside:
    if run.status != "complete":
        return Aside(run.info.run_id, run.step, run.task, AsideReason.UNFINISHED, f"status {run.status}")
    if settings is not None and not _same_settings(run.info, settings):
        differences = pairing.settings_differences(settings, run.info)
        return Aside(run.info.run_id, run.step, run.task, AsideReason.OTHER_SETTINGS,
                     f"other settings than the ladder's: {'; '.join(differences)}", differences)
    return Aside(run.info.run_id, run.step, run.task, AsideReason.FEWER_ITEMS,
                 f"{run.n_items} items where the other steps have {items}")
