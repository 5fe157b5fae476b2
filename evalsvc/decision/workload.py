"""Take step B, stop at A, or can't tell yet, per workload; with typed reasons. Pure: no I/O.

Accuracy and task time each either allow B, rule it out, or cannot tell:

- accuracy: the verdict's `acceptable` (worse rules B out; inconclusive cannot tell);
- task time: the task-time ratio B/A interval below 1 allows B (tasks finish
  sooner), above 1 rules it out (later), reaching across 1 cannot tell.

Anything that rules B out stops at A; otherwise anything that cannot tell (or
missing evidence: no run, no speed, cut chat answers) means can't tell yet,
with what would settle it; otherwise take B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from evalsvc.decision.compare import Comparison
from evalsvc.decision.rule import Settle, Verdict
from evalsvc.statistics import output_length
from evalsvc.statistics import task_time


class Choice(str, Enum):
    TAKE_B = "take B"
    STOP_AT_A = "stop at A"
    CANT_TELL = "can't tell yet"


class ReasonKind(str, Enum):
    ACCURACY_OK = "accuracy_ok"
    ACCURACY_WORSE = "accuracy_worse"
    ACCURACY_INCONCLUSIVE = "accuracy_inconclusive"
    SOONER = "sooner"
    LATER = "later"
    TIME_UNCLEAR = "time_unclear"
    NO_RUN = "no_run"
    NO_SPEED = "no_speed"
    NO_LENGTHS = "no_lengths"
    TRUNCATED = "truncated"


_EFFECT = {
    ReasonKind.ACCURACY_OK: Choice.TAKE_B, ReasonKind.SOONER: Choice.TAKE_B,
    ReasonKind.ACCURACY_WORSE: Choice.STOP_AT_A, ReasonKind.LATER: Choice.STOP_AT_A,
}


@dataclass(frozen=True)
class Reason:
    """One fact behind a decision. `note` says what is missing or what would settle it, for the edge to show."""

    kind: ReasonKind
    note: str = ""

    @property
    def effect(self) -> Choice:
        """What this fact alone would decide."""
        return _EFFECT.get(self.kind, Choice.CANT_TELL)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "effect": self.effect.value, "note": self.note}


@dataclass(frozen=True)
class WorkloadDecision:
    """The decision for one workload and one step up, with the figures it rests on.

    `accuracy_from` is the task whose verdict stands for the workload (chat has
    no accuracy task: the worst verdict of the pair's tasks stands in).
    """

    workload: str
    step_a: str
    step_b: str
    choice: Choice
    reasons: tuple[Reason, ...]
    accuracy: Comparison | None = None
    accuracy_from: str | None = None
    settle: Settle | None = None
    tokens: output_length.TokenRatios | None = None
    time: task_time.TaskTimeChange | None = None
    truncated: tuple[int, int] | None = None  # answers of A and of B cut by the cap, where counted

    @property
    def take_b(self) -> bool | None:
        return {Choice.TAKE_B: True, Choice.STOP_AT_A: False, Choice.CANT_TELL: None}[self.choice]

    @property
    def verdict(self) -> Verdict | None:
        return self.accuracy.verdict if self.accuracy else None

    @property
    def token_ratio(self) -> float | None:
        return self.tokens.all_items if self.tokens else None

    def to_dict(self) -> dict[str, Any]:
        t = self.time
        return {
            "workload": self.workload, "step_a": self.step_a, "step_b": self.step_b, "decision": self.choice.value,
            "take_b": self.take_b, "reasons": [r.to_dict() for r in self.reasons],
            "accuracy_verdict": self.verdict.value if self.verdict else None, "accuracy_from": self.accuracy_from,
            "token_ratio": self.token_ratio,
            "token_ratio_both_correct": self.tokens.both_correct if self.tokens else None,
            "truncated_a": self.truncated[0] if self.truncated else None,
            "truncated_b": self.truncated[1] if self.truncated else None,
            "time_ratio": t.ratio if t else None, "time_ci": list(t.ci) if t else None,
            "speed_ratio": t.speed_ratio if t else None,
            "time_items": t.n_items if t else None, "time_left_out_no_token_count": t.n_left_out if t else None,
            "settle": _settle_dict(self.settle),
        }


@dataclass(frozen=True)
class PairChoice:
    """The decisions of one step up, one per workload."""

    step_a: str
    step_b: str
    workloads: tuple[WorkloadDecision, ...]

    def workload(self, name: str) -> WorkloadDecision | None:
        return next((w for w in self.workloads if w.workload == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"step_a": self.step_a, "step_b": self.step_b, "workloads": [w.to_dict() for w in self.workloads]}


def _settle_dict(s: Settle | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"n": s.n, "margin": s.margin, "smallest_margin": s.smallest_margin, "best_margin": s.best_margin,
            "items_needed": s.items_needed, "items_available": s.items_available}


def accuracy_reason(comparison: Comparison) -> Reason:
    acceptable = comparison.verdict.acceptable
    if acceptable is None:
        return Reason(ReasonKind.ACCURACY_INCONCLUSIVE)
    return Reason(ReasonKind.ACCURACY_OK if acceptable else ReasonKind.ACCURACY_WORSE)


def time_reason(time: task_time.TaskTimeChange) -> Reason:
    low, high = time.ci
    if high < 1.0:
        return Reason(ReasonKind.SOONER)
    if low > 1.0:
        return Reason(ReasonKind.LATER)
    return Reason(ReasonKind.TIME_UNCLEAR, "more speed-probe requests (`evalsvc speed --n`) or more items")


def combine(reasons: Sequence[Reason]) -> Choice:
    """Stop when any fact rules B out; else can't tell when any fact cannot tell; else take B."""
    effects = {r.effect for r in reasons}
    if Choice.STOP_AT_A in effects:
        return Choice.STOP_AT_A
    if Choice.CANT_TELL in effects or not reasons:
        return Choice.CANT_TELL
    return Choice.TAKE_B


def decide_workload(
    workload: str, step_a: str, step_b: str, *, accuracy: Comparison | None, accuracy_from: str | None,
    tokens: output_length.TokenRatios | None, time: task_time.TaskTimeChange | None,
    truncated: tuple[int, int] | None = None, missing: Sequence[Reason] = (), settle: Settle | None = None,
) -> WorkloadDecision:
    """The decision from what is known; `missing` lists evidence that could not be had, and why."""
    reasons = list(missing)
    if accuracy is not None:
        reasons.insert(0, accuracy_reason(accuracy))
    if time is not None:
        reasons.append(time_reason(time))
    keep_settle = settle if accuracy is not None and accuracy.verdict is Verdict.INCONCLUSIVE else None
    return WorkloadDecision(workload, step_a, step_b, combine(reasons), tuple(reasons), accuracy, accuracy_from,
                            keep_settle, tokens, time, truncated)
