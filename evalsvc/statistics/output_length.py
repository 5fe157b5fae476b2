"""Output length of step B against step A on paired items. Pure: no I/O.

A faster step can still finish tasks later if it writes more tokens.
`measure_length_inflation` compares per-item output tokens of B against A on
paired items from the accuracy runs, on all items and on the both-correct
subset; `token_ratios` gives the two ratios alone. Intervals are percentile
bootstraps (`evalsvc.statistics.bootstrap`). The task time built on these
tokens lives in `evalsvc.statistics.task_time`; the decision in `evalsvc.decision`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from evalsvc.statistics.bootstrap import paired_ratio_of_means_ci
from harness.errors import UserError


class TimingInputError(UserError, ValueError):
    """Inputs to a length or time comparison are unusable (misaligned, too few, empty)."""


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class LengthComparison:
    """B against A output tokens on one set of paired items."""

    n: int
    mean_a: float
    mean_b: float
    ratio_of_means: float
    ci: tuple[float, float]
    median_item_ratio: float | None
    wilcoxon_statistic: float | None
    wilcoxon_p: float | None


@dataclass(frozen=True)
class TokenRatios:
    """B/A ratio of mean output tokens on all paired items with counts, and on the both-correct ones
    (None when fewer than two, or when A wrote nothing on them): all a step decision reads of output length."""

    all_items: float
    both_correct: float | None


@dataclass(frozen=True)
class LengthInflation:
    """Output-length change of B over A, on all paired items and on the both-correct ones.

    `n_missing` pairs were left out because either side has no token count
    (a failed request, or an endpoint that sent none or an impossible one). Truncations count `finish_reason == "length"` over all
    pairs given.
    """

    all_items: LengthComparison
    both_correct: LengthComparison | None
    truncated_a: int
    truncated_b: int
    n_missing: int
    confidence: float
    n_boot: int
    seed: int

    @property
    def ratios(self) -> TokenRatios:
        both = self.both_correct
        return TokenRatios(self.all_items.ratio_of_means, both.ratio_of_means if both else None)


# ---------------------------------------------------------------- inputs


def as_floats(values: Any) -> np.ndarray:
    """Token counts as floats; None or NA (a failed request) becomes NaN."""
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=float, na_value=np.nan)
    return np.asarray(values, dtype=float)


def as_bools(values: Any) -> np.ndarray:
    if isinstance(values, pd.Series):
        return values.fillna(False).to_numpy(dtype=bool)
    return np.asarray(values, dtype=bool)


def check_aligned(named: dict[str, Any]) -> None:
    """Raise unless all inputs have one length and Series among them share an index."""
    lengths = {name: len(v) for name, v in named.items() if v is not None}
    if len(set(lengths.values())) > 1:
        raise TimingInputError(f"paired inputs differ in length: {lengths}")
    indexes = [(name, v.index) for name, v in named.items() if isinstance(v, pd.Series)]
    for name, index in indexes[1:]:
        if not index.equals(indexes[0][1]):
            raise TimingInputError(f"{name!r} is not aligned with {indexes[0][0]!r}: their indexes differ")


def _truncations(finish: Any) -> int:
    if finish is None:
        return 0
    return int(sum(1 for f in finish if f == "length"))


# ---------------------------------------------------------------- length


def _wilcoxon(diff: np.ndarray) -> tuple[float | None, float | None]:
    """Two-sided Wilcoxon signed-rank test on B-A; zero differences are dropped.

    The method is chosen here rather than by scipy's "auto", which varies by
    version and can fall back to a slow permutation test: scipy's exact null
    distribution for up to 50 non-zero differences without ties, otherwise
    the normal approximation with the tie correction, written out below
    (scipy's `method="approx"` gives the same numbers at several times the
    cost, which a ladder of fifty runs pays a hundred times).
    """
    if diff.size < 2:
        return None, None
    nonzero = diff[diff != 0]
    if nonzero.size == 0:
        return 0.0, 1.0
    magnitudes = np.abs(nonzero)
    exact = nonzero.size <= 50 and np.unique(magnitudes).size == magnitudes.size and nonzero.size == diff.size
    if exact:
        result = stats.wilcoxon(diff, zero_method="wilcox", method="exact")
        return float(result.statistic), float(result.pvalue)
    n = nonzero.size
    ranks = stats.rankdata(magnitudes)
    w_plus = float(ranks[nonzero > 0].sum())
    w_minus = n * (n + 1) / 2 - w_plus
    _, tie_sizes = np.unique(magnitudes, return_counts=True)
    variance = n * (n + 1) * (2 * n + 1) / 24 - float((tie_sizes**3 - tie_sizes).sum()) / 48
    z = (min(w_plus, w_minus) - n * (n + 1) / 4) / math.sqrt(variance)
    return min(w_plus, w_minus), float(min(1.0, 2 * stats.norm.sf(abs(z))))


def _check_lengths(a: np.ndarray, label: str) -> None:
    if a.size < 2:
        raise TimingInputError(f"need at least 2 paired items with token counts for {label}, got {a.size}")
    if a.sum() <= 0:
        raise TimingInputError(f"endpoint A wrote no tokens at all on {label}; a length ratio is undefined")


def _compare_lengths(
    a: np.ndarray, b: np.ndarray, n_boot: int, seed: int, confidence: float, label: str
) -> LengthComparison:
    _check_lengths(a, label)
    positive = a > 0
    item_ratios = b[positive] / a[positive]
    statistic, p_value = _wilcoxon(b - a)
    return LengthComparison(
        n=int(a.size),
        mean_a=float(a.mean()),
        mean_b=float(b.mean()),
        ratio_of_means=float(b.mean() / a.mean()),
        ci=paired_ratio_of_means_ci(a, b, n_boot, seed, confidence),
        median_item_ratio=float(np.median(item_ratios)) if item_ratios.size else None,
        wilcoxon_statistic=statistic,
        wilcoxon_p=p_value,
    )


def measure_length_inflation(
    tokens_a: Any,
    tokens_b: Any,
    correct_a: Any,
    correct_b: Any,
    finish_a: Any = None,
    finish_b: Any = None,
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> LengthInflation:
    """Output-length change of B over A on paired items.

    Inputs are aligned per item (arrays, lists or Series with one index):
    output tokens (completion tokens, reasoning included; NaN/None for a
    failed request), whether each side was correct, and optional finish
    reasons. Reports the ratio of means with a paired bootstrap interval, the
    median per-item ratio (items where A wrote tokens), and a Wilcoxon
    signed-rank test on B-A, on all items and on the both-correct subset so
    that failures writing long garbage do not drive the figure.
    """
    a, b, present, both = _length_inputs(tokens_a, tokens_b, correct_a, correct_b, finish_a, finish_b)
    all_items = _compare_lengths(a[present], b[present], n_boot, seed, confidence, "all items")
    both_correct = (
        _compare_lengths(a[both], b[both], n_boot, seed, confidence, "both-correct items")
        if _has_both_correct(a, both)
        else None
    )
    return LengthInflation(
        all_items=all_items,
        both_correct=both_correct,
        truncated_a=_truncations(finish_a),
        truncated_b=_truncations(finish_b),
        n_missing=int((~present).sum()),
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
    )


def token_ratios(tokens_a: Any, tokens_b: Any, correct_a: Any, correct_b: Any) -> TokenRatios:
    """`measure_length_inflation(...).ratios` without its intervals and tests: what a step decision needs.

    Same inputs and the same `TimingInputError`s.
    """
    a, b, present, both = _length_inputs(tokens_a, tokens_b, correct_a, correct_b, None, None)
    _check_lengths(a[present], "all items")
    ratio = float(b[present].mean() / a[present].mean())
    return TokenRatios(ratio, float(b[both].mean() / a[both].mean()) if _has_both_correct(a, both) else None)


def _length_inputs(
    tokens_a: Any, tokens_b: Any, correct_a: Any, correct_b: Any, finish_a: Any, finish_b: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of A and B as floats, which pairs have both counts, and which of those both sides got right."""
    inputs = {"tokens_a": tokens_a, "tokens_b": tokens_b, "correct_a": correct_a, "correct_b": correct_b}
    check_aligned({**inputs, "finish_a": finish_a, "finish_b": finish_b})
    a, b = as_floats(tokens_a), as_floats(tokens_b)
    present = ~(np.isnan(a) | np.isnan(b))
    return a, b, present, present & as_bools(correct_a) & as_bools(correct_b)


def _has_both_correct(a: np.ndarray, both: np.ndarray) -> bool:
    return bool(both.sum() >= 2 and a[both].sum() > 0)
