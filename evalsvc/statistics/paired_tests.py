"""Paired tests and intervals on two runs' correctness, item by item (pairs from `evalsvc.statistics.pairing`).

Pure functions: no I/O, no database, no CLI.

Formulas and their sources (each exists once, here):

- McNemar exact: two-sided binomial test on the discordant pairs,
  p = min(1, 2 * P(X <= min(b, c))), X ~ Bin(b + c, 1/2).
- McNemar mid-p (Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91):
  the exact p minus P(X = min(b, c)).
- McNemar chi-square with continuity correction (Edwards 1948):
  (|b - c| - 1)^2 / (b + c) on 1 df, with |b - c| - 1 floored at 0.
- Paired difference interval: Newcombe 1998 (Stat Med 17:2631), method 10,
  a square-and-add of two Wilson intervals with the continuity-corrected
  correlation phi.
- Minimum detectable difference: Connor 1987 (Biometrics 43:207) sample-size
  formula for McNemar's test, solved for the difference.
- Holm 1979 step-down adjustment; Cochran 1950 Q test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats as sps

from evalsvc.statistics.pairing import Paired, PairingError, format_drops, join_items


class Table2x2(NamedTuple):
    """Paired correctness counts. `a_only`: A right and B wrong."""

    both_correct: int
    a_only: int
    b_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both_correct + self.a_only + self.b_only + self.neither

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only


@dataclass(frozen=True)
class McNemar:
    """The three McNemar p-values and the corrected chi-square statistic."""

    p_exact: float
    p_midp: float
    p_chi2: float
    chi2: float


@dataclass(frozen=True)
class DiffInterval:
    """Paired accuracy difference B - A with its confidence interval."""

    diff: float
    low: float
    high: float
    confidence: float


@dataclass(frozen=True)
class CochranQ:
    """Cochran's Q over k steps on the items every step answered."""

    statistic: float
    df: int
    p_value: float
    n_items: int


@dataclass(frozen=True)
class FlipRate:
    """How often two runs of the same endpoint disagree on correctness."""

    n_paired: int
    flips: int

    @property
    def rate(self) -> float:
        return self.flips / self.n_paired


@lru_cache(maxsize=64)
def normal_quantile(q: float) -> float:
    """The standard normal quantile; remembered, since a report asks for the same few levels hundreds of times."""
    return float(sps.norm.ppf(q))


# --- the 2x2 table and McNemar ----------------------------------------------


def table_2x2(correct_a: Sequence[bool] | pd.Series, correct_b: Sequence[bool] | pd.Series) -> Table2x2:
    """Count paired outcomes from two aligned boolean vectors."""
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"correctness vectors differ in length: {a.shape} vs {b.shape}")
    return Table2x2(int(np.sum(a & b)), int(np.sum(a & ~b)), int(np.sum(~a & b)), int(np.sum(~a & ~b)))


def paired_table(paired: Paired) -> Table2x2:
    """The 2x2 table of a pairing."""
    return table_2x2(*paired.correct())


def mcnemar_exact_p(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar p; 1.0 when there are no discordant pairs."""
    n = a_only + b_only
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * float(sps.binom.cdf(min(a_only, b_only), n, 0.5)))


def mcnemar_midp(a_only: int, b_only: int) -> float:
    """Two-sided mid-p McNemar (Fagerland et al. 2013); 1.0 with no discordance.

    Equals the uncapped exact p minus P(X = min(b, c)); that is exactly 1 when
    b == c, so no cap is hit in between.
    """
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    uncapped = 2.0 * float(sps.binom.cdf(k, n, 0.5)) - float(sps.binom.pmf(k, n, 0.5))
    return min(1.0, uncapped)


def mcnemar_chi2(a_only: int, b_only: int) -> tuple[float, float]:
    """Continuity-corrected McNemar chi-square and its p-value.

    The correction is floored at zero, so b == c gives statistic 0 and p = 1
    (statsmodels leaves it unfloored and reports 1/(b+c) there).
    """
    n = a_only + b_only
    if n == 0:
        return 0.0, 1.0
    statistic = max(abs(a_only - b_only) - 1, 0) ** 2 / n
    return statistic, float(sps.chi2.sf(statistic, 1))


def mcnemar(table: Table2x2) -> McNemar:
    """All three McNemar p-values for a paired table."""
    chi2, p_chi2 = mcnemar_chi2(table.a_only, table.b_only)
    return McNemar(
        mcnemar_exact_p(table.a_only, table.b_only), mcnemar_midp(table.a_only, table.b_only), p_chi2, chi2
    )


# --- paired difference interval ----------------------------------------------


def wilson_interval(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval for a single proportion."""
    denominator = n + z * z
    centre = (successes + z * z / 2) / denominator
    half = z * math.sqrt(successes * (n - successes) / n + z * z / 4) / denominator
    return centre - half, centre + half


def _newcombe_phi(table: Table2x2) -> float:
    """Correlation between the two marginal proportions, with Newcombe's
    continuity correction (zero when ad - bc lies in [0, n/2])."""
    row_b = (table.both_correct + table.b_only, table.a_only + table.neither)
    col_a = (table.both_correct + table.a_only, table.b_only + table.neither)
    product = row_b[0] * row_b[1] * col_a[0] * col_a[1]
    if product == 0:
        return 0.0
    cross = table.both_correct * table.neither - table.b_only * table.a_only
    if cross > table.n / 2:
        return (cross - table.n / 2) / math.sqrt(product)
    if cross >= 0:
        return 0.0
    return cross / math.sqrt(product)


def paired_diff_ci(table: Table2x2, confidence: float = 0.95) -> DiffInterval:
    """Accuracy of B minus accuracy of A with Newcombe's (1998, method 10)
    hybrid score interval for paired proportions, truncated to [-1, 1]."""
    n = table.n
    if n == 0:
        raise ValueError("no paired items: the difference is undefined")
    z = normal_quantile(0.5 + confidence / 2)
    acc_b = (table.both_correct + table.b_only) / n
    acc_a = (table.both_correct + table.a_only) / n
    low_b, high_b = wilson_interval(table.both_correct + table.b_only, n, z)
    low_a, high_a = wilson_interval(table.both_correct + table.a_only, n, z)
    phi = _newcombe_phi(table)
    diff = acc_b - acc_a
    down = _square_and_add(acc_b - low_b, high_a - acc_a, phi)
    up = _square_and_add(high_b - acc_b, acc_a - low_a, phi)
    return DiffInterval(diff, max(-1.0, diff - down), min(1.0, diff + up), confidence)


def _square_and_add(first: float, second: float, phi: float) -> float:
    return math.sqrt(max(0.0, first * first - 2 * phi * first * second + second * second))


# --- detectable difference ---------------------------------------


def mde(n: int, discordant_rate: float, alpha: float, power: float) -> float:
    """Smallest paired difference |p_B - p_A| a two-sided McNemar test at
    `alpha` detects with `power`, given `n` pairs and discordant rate psi.

    Connor (1987) gives n = (z_a sqrt(psi) + z_b sqrt(psi - d^2))^2 / d^2 with
    z_a = z(1 - alpha/2), z_b = z(power). Solving that quadratic in d:
    d = sqrt(psi) (z_a sqrt(n) + z_b sqrt(n - z_a^2 + z_b^2)) / (n + z_b^2).
    A result above psi means no difference is detectable: a change cannot
    exceed the share of items on which the runs disagree. The verdicts use
    `evalsvc.decision.rule.POWER` and its confidence (no default here: one home).
    """
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if not 0 < discordant_rate <= 1:
        raise ValueError(f"discordant_rate must be in (0, 1], got {discordant_rate}")
    z_a = normal_quantile(1 - alpha / 2)
    z_b = normal_quantile(power)
    root = math.sqrt(max(0.0, n - z_a * z_a + z_b * z_b))
    return math.sqrt(discordant_rate) * (z_a * math.sqrt(n) + z_b * root) / (n + z_b * z_b)


# --- across a ladder ---------------------------------------------------------


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def cochran_q(correct: pd.DataFrame | np.ndarray) -> CochranQ:
    """Cochran's Q test that k paired success rates are equal.

    Rows are items, columns steps. Q = (k-1)(k sum C_j^2 - N^2) / (k N - sum R_i^2)
    on k - 1 df. When every item is answered the same way by all steps the
    denominator is zero; Q is then 0 and p is 1.
    """
    matrix = np.asarray(correct, dtype=float)
    n_items, k = matrix.shape
    if k < 2:
        raise ValueError(f"Cochran's Q needs at least two steps, got {k}")
    col = matrix.sum(axis=0)
    row = matrix.sum(axis=1)
    total = matrix.sum()
    denominator = k * total - float(np.sum(row * row))
    if denominator == 0:
        return CochranQ(0.0, k - 1, 1.0, n_items)
    statistic = (k - 1) * (k * float(np.sum(col * col)) - total * total) / denominator
    return CochranQ(statistic, k - 1, float(sps.chi2.sf(statistic, k - 1)), n_items)


# --- repeatability -----------------------------------------------------------


def flip_rate(run1_items: pd.DataFrame, run2_items: pd.DataFrame) -> FlipRate:
    """Share of paired items whose correctness differs between two runs of
    the same endpoint; the noise floor for comparisons of that endpoint."""
    joined, dropped = join_items(run1_items, run2_items)
    if joined.empty:
        raise PairingError(f"the two runs share no error-free item (dropped: {format_drops(dropped)})")
    flips = int((joined["correct_a"] != joined["correct_b"]).sum())
    return FlipRate(len(joined), flips)


def within_noise_floor(discordant: int, n_paired: int, flip_rate: float, level: float = 0.95) -> bool:
    """True when `discordant` pairs are no more than run-to-run noise makes.

    If the two sides were the same endpoint, the number of items that flip is
    about Binomial(n_paired, flip_rate); a comparison is flagged when its
    discordant count does not exceed that distribution's `level` quantile.
    """
    if not 0 <= flip_rate <= 1:
        raise ValueError(f"flip_rate must be in [0, 1], got {flip_rate}")
    return discordant <= int(sps.binom.ppf(level, n_paired, flip_rate))
