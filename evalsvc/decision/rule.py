"""The accuracy verdict rule, written down once, and what would settle an inconclusive pair.

The verdict is read from ONE interval: the paired Newcombe 95% interval of
accuracy B - A (`paired_tests.paired_diff_ci`). p-values are shown beside it, never
used to decide. With `m` the non-inferiority margin of the task:

- better:                      the interval lies above 0;
- no change beyond the margin: it holds 0 and lies inside (-m, +m);
- no worse than -m:            it holds 0, its low end is above -m, its high end reaches +m or more;
- worse, within the margin:    it lies below 0 and its low end is above -m;
- worse:                       it lies below 0 and reaches -m or further;
- inconclusive:                it reaches from -m or below to 0 or above.

Both ends of the interval rise with the difference at a fixed number of
items, so the verdict is monotone in it. The verdicts are per pair and not
adjusted for multiplicity: each one is the claim a team ships on for the one
step it decides, and `compare A B` must give a pair the verdict a ladder
report gives it. A ladder report shows Holm-adjusted p-values beside them for
family-wise claims ("some step changed accuracy"), and Cochran's Q per task.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from evalsvc.statistics import paired_tests
from harness.tasks import TEST_SET_SIZE  # "more items" cannot go past these

CONFIDENCE = 0.95
DEFAULT_MARGIN = 0.02
POWER = 0.8
_MAX_PROJECTED_ITEMS = 10_000_000

RULE_TEXT = (
    "Verdict rule (from the paired Newcombe 95% interval of accuracy B-A, margin m per task): "
    "better = interval above 0; no change beyond the margin = interval holds 0 and lies inside (-m, +m); "
    "no worse than -m = interval holds 0, low end above -m, high end at +m or more; "
    "worse, within the margin = interval below 0, low end above -m; worse = interval below 0 and reaching -m; "
    "inconclusive = interval from -m or below to 0 or above. p-values are shown beside it, not used. "
    "Verdicts are per pair, not adjusted for multiplicity; ladder reports add Holm-adjusted p as information."
)


class Verdict(str, Enum):
    """What the interval supports about accuracy B - A."""

    BETTER = "better"
    SAME = "no change beyond the margin"
    NO_WORSE = "no worse than -margin"
    WORSE_WITHIN = "worse, within the margin"
    WORSE = "worse"
    INCONCLUSIVE = "inconclusive"

    @property
    def acceptable(self) -> bool | None:
        """True when B's accuracy may be taken, False when not, None when the interval cannot tell."""
        if self is Verdict.WORSE:
            return False
        if self is Verdict.INCONCLUSIVE:
            return None
        return True

    @property
    def rank(self) -> int:
        """Order along a rising interval: a larger difference never gives a lower rank."""
        return _RANK[self]


# WORSE_WITHIN and INCONCLUSIVE share a rank: a rising interval never passes from one to the other.
_RANK = {Verdict.WORSE: 0, Verdict.INCONCLUSIVE: 1, Verdict.WORSE_WITHIN: 1, Verdict.SAME: 2,
         Verdict.NO_WORSE: 3, Verdict.BETTER: 4}


def verdict_of(low: float, high: float, margin: float) -> Verdict:
    """The verdict of an interval [low, high] of B - A (fractions) under `margin`."""
    if margin <= 0:
        raise ValueError(f"margin must be positive, got {margin}")
    if low > 0:
        return Verdict.BETTER
    if high < 0:
        return Verdict.WORSE_WITHIN if low > -margin else Verdict.WORSE
    if low <= -margin:
        return Verdict.INCONCLUSIVE
    return Verdict.SAME if high < margin else Verdict.NO_WORSE


def interval(table: paired_tests.Table2x2) -> paired_tests.DiffInterval:
    """The one interval verdicts are read from."""
    return paired_tests.paired_diff_ci(table, CONFIDENCE)


def verdict_for(table: paired_tests.Table2x2, margin: float) -> Verdict:
    ci = interval(table)
    return verdict_of(ci.low, ci.high, margin)


@dataclass(frozen=True)
class Margins:
    """Non-inferiority margin per task (fractions): `default` unless the task has its own."""

    default: float = DEFAULT_MARGIN
    per_task: tuple[tuple[str, float], ...] = ()

    def of(self, task: str) -> float:
        return dict(self.per_task).get(task, self.default)

    def to_dict(self) -> dict[str, float]:
        return {"default": self.default, **dict(self.per_task)}


class MarginError(ValueError):
    """A --margin value that is neither POINTS nor TASK=POINTS."""


def parse_margins(values: Sequence[str], tasks: Sequence[str]) -> Margins:
    """Margins from `--margin` values in accuracy points: '2' sets the default, 'humaneval=5' one task's."""
    default, per_task = DEFAULT_MARGIN, {}
    for value in values:
        task, _, points = value.rpartition("=")
        if task and task not in tasks:
            raise MarginError(f"--margin {value!r}: unknown task {task!r}; tasks: {', '.join(tasks)}")
        try:
            margin = float(points) / 100
        except ValueError:
            raise MarginError(f"--margin {value!r}: give points, e.g. --margin 2 or --margin humaneval=5") from None
        if not 0 < margin <= 1:
            raise MarginError(f"--margin {value!r}: points must be above 0 and at most 100")
        if task:
            per_task[task] = margin
        else:
            default = margin
    return Margins(default, tuple(sorted(per_task.items())))


# --- what would settle it ---------------------------------------------------------


@dataclass(frozen=True)
class Settle:
    """What would turn an inconclusive verdict into a settled one.

    `smallest_margin`: the margin these very items establish (minus the
    interval's low end). `best_margin`: the smallest margin the same number
    of items could ever establish, had the runs agreed on every item.
    `items_needed`: items at the observed rates that would settle the verdict
    (None when the rates never do, e.g. a difference exactly at -margin);
    `items_available`: the task's test-set size, when known.
    """

    n: int
    margin: float
    smallest_margin: float
    best_margin: float
    items_needed: int | None
    items_available: int | None

    @property
    def more_items_possible(self) -> bool:
        return self.items_needed is not None and (self.items_available is None
                                                 or self.items_needed <= self.items_available)


def settle(table: paired_tests.Table2x2, margin: float, task: str) -> Settle:
    """What would settle the verdict of `table` under `margin` (meaningful when it is inconclusive)."""
    ci = interval(table)
    agreeing = paired_tests.Table2x2(table.both_correct + table.a_only, 0, 0, table.neither + table.b_only)
    return Settle(
        n=table.n, margin=margin, smallest_margin=max(0.0, -ci.low), best_margin=max(0.0, -interval(agreeing).low),
        items_needed=_items_needed(table, margin), items_available=TEST_SET_SIZE.get(task),
    )


def _scaled(table: paired_tests.Table2x2, n: int) -> paired_tests.Table2x2:
    factor = n / table.n
    b, c, both = (round(x * factor) for x in (table.a_only, table.b_only, table.both_correct))
    return paired_tests.Table2x2(both, b, c, max(0, n - both - b - c))


def _settled(table: paired_tests.Table2x2, n: int, margin: float) -> bool:
    return verdict_for(_scaled(table, n), margin) is not Verdict.INCONCLUSIVE


def _items_needed(table: paired_tests.Table2x2, margin: float) -> int | None:
    """Smallest item count at which the observed rates give a settled verdict (doubling, then bisection)."""
    if _settled(table, table.n, margin):
        return table.n
    high = table.n
    while not _settled(table, high, margin):
        high *= 2
        if high > _MAX_PROJECTED_ITEMS:
            return None
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _settled(table, middle, margin) else (middle, high)
    return high


# --- minimum detectable difference ---------------------------------------------------


@dataclass(frozen=True)
class Detectable:
    """The smallest difference these items detect at `POWER`, or None when they detect none."""

    n: int
    discordant: int
    mde: float | None


def detectable(table: paired_tests.Table2x2, alpha: float = 1 - CONFIDENCE) -> Detectable:
    """Connor's MDE at the observed disagreement rate; None when no disagreement was seen or the
    MDE exceeds that rate (a change cannot exceed the share of items on which the runs disagree)."""
    if table.discordant == 0:
        return Detectable(table.n, 0, None)
    rate = table.discordant / table.n
    value = paired_tests.mde(table.n, rate, alpha, POWER)
    return Detectable(table.n, table.discordant, value if value <= rate and math.isfinite(value) else None)
