"""Output length and task time of step B against step A. Pure: no I/O.

A faster step can still finish tasks later if it writes more tokens. This
module puts the two together for a pair of endpoints A (the current step) and
B (the candidate next step) on one workload:

1. `measure_length_inflation`: per-item output tokens of B against A on paired
   items from the accuracy runs, on all items and on the both-correct subset.
2. `compare_task_time`: the B/A ratio of mean task time under `TASK_TIME_MODEL`,
   with an interval that carries both token and speed uncertainty.
The decision built on these figures lives in `evalsvc.decision`.

Intervals are percentile bootstraps with a fixed seed, so a report is
reproducible. Items are resampled jointly (the pairing is kept); each
endpoint's speed samples are resampled independently of the items and of
each other, because they come from separate speed-probe runs.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from harness.errors import UserError
from harness.speed import SpeedSample

TASK_TIME_MODEL = (
    "task time per item = time to first token + output tokens / decode tokens per second. "
    "Output tokens are the completion tokens of the accuracy run (reasoning included); time to "
    "first token and decode speed are the endpoint's batch-1 streaming figures for the workload. "
    "The mean over items is mean TTFT + mean tokens x mean seconds per token. Queueing, "
    "concurrent load and tool round trips are not modelled."
)

_MAX_BOOT_CELLS = 2_000_000  # resampled values held in memory at once


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


@dataclass(frozen=True)
class EndpointSpeed:
    """An endpoint's speed on one workload: measured samples, or a figure entered by hand.

    `ttft_s[i]` and `decode_tps[i]` come from the same request. A hand-entered
    speed (`measured=False`) is one fixed value and is not resampled.
    """

    ttft_s: tuple[float, ...]
    decode_tps: tuple[float, ...]
    source: str
    measured: bool

    @classmethod
    def from_samples(cls, samples: Sequence[SpeedSample], source: str = "speed probe") -> EndpointSpeed:
        """Successful samples that have both a TTFT and a decode speed."""
        pairs = [
            (s.ttft_s, s.decode_tps)
            for s in samples
            if s.ok and s.ttft_s is not None and s.decode_tps is not None and s.decode_tps > 0
        ]
        if len(pairs) < 2:
            raise TimingInputError(
                f"need at least 2 successful speed samples from {source!r}, got {len(pairs)} "
                f"of {len(samples)}; measure again or enter the speed by hand"
            )
        ttfts, rates = zip(*pairs)
        return cls(ttft_s=tuple(ttfts), decode_tps=tuple(rates), source=source, measured=True)

    @classmethod
    def by_hand(cls, decode_tps: float, source: str, ttft_s: float = 0.0) -> EndpointSpeed:
        """A fixed speed with its provenance (e.g. a vendor table); no uncertainty is carried."""
        if decode_tps <= 0 or ttft_s < 0:
            raise TimingInputError(f"hand-entered speed from {source!r} must be positive: {decode_tps} tok/s")
        return cls(ttft_s=(float(ttft_s),), decode_tps=(float(decode_tps),), source=source, measured=False)

    @property
    def mean_ttft_s(self) -> float:
        return float(np.mean(self.ttft_s))

    @property
    def seconds_per_token(self) -> float:
        """Mean of 1/decode speed: what mean task time needs (a harmonic mean of speed)."""
        return float(np.mean(1.0 / np.asarray(self.decode_tps)))

    @property
    def effective_tps(self) -> float:
        return 1.0 / self.seconds_per_token

    def describe(self) -> str:
        if self.measured:
            return f"{self.effective_tps:.0f} tok/s measured over {len(self.decode_tps)} requests ({self.source})"
        return f"{self.effective_tps:.0f} tok/s entered by hand ({self.source}), fixed: no speed uncertainty"


@dataclass(frozen=True)
class TaskTimeChange:
    """B/A ratio of mean task time under `model`, with a bootstrap interval."""

    n_items: int
    mean_time_a_s: float
    mean_time_b_s: float
    ratio: float
    ci: tuple[float, float]
    token_ratio: float
    speed_ratio: float
    speed_a: str
    speed_b: str
    confidence: float
    fixed_speeds: tuple[str, ...] = ()  # sides ("A", "B") whose speed was entered by hand
    model: str = TASK_TIME_MODEL
    n_left_out: int = 0  # paired items without a token count on either side (unknown is not zero)

    @property
    def sooner_pct(self) -> float:
        """Percent less time B takes per task (negative when B is slower)."""
        return (1.0 - self.ratio) * 100.0


# ---------------------------------------------------------------- inputs


def _as_floats(values: Any) -> np.ndarray:
    """Token counts as floats; None or NA (a failed request) becomes NaN."""
    if isinstance(values, pd.Series):
        return values.to_numpy(dtype=float, na_value=np.nan)
    return np.asarray(values, dtype=float)


def _as_bools(values: Any) -> np.ndarray:
    if isinstance(values, pd.Series):
        return values.fillna(False).to_numpy(dtype=bool)
    return np.asarray(values, dtype=bool)


def _aligned(named: dict[str, Any]) -> None:
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


# ---------------------------------------------------------------- bootstrap


def _index_chunks(rng: np.random.Generator, n: int, n_boot: int) -> Iterator[np.ndarray]:
    """Bootstrap index matrices of shape (k, n), k*n bounded so memory stays small."""
    per_chunk = max(1, _MAX_BOOT_CELLS // max(n, 1))
    done = 0
    while done < n_boot:
        k = min(per_chunk, n_boot - done)
        yield rng.integers(0, n, size=(k, n))
        done += k


def _weights(idx: np.ndarray, n: int) -> np.ndarray:
    """How many times each item is drawn in each resample: shape (k, n), float counts."""
    k = idx.shape[0]
    flat = (idx + (np.arange(k) * n)[:, None]).ravel()
    return np.bincount(flat, minlength=k * n).reshape(k, n).astype(float)


class _DrawMemo:
    """The last few bootstrap draws, as per-resample item counts, keyed by the generator's state before drawing.

    Every interval here starts from a fixed seed, so pairs with the same
    number of items draw the very same indices; a ladder report makes dozens
    of such intervals, and drawing took most of their time. A hit returns the
    stored counts and moves the generator to the state drawing would have
    left, so results do not depend on the memo.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, int, int], tuple[list[np.ndarray], dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def weights(self, rng: np.random.Generator, n: int, n_boot: int) -> list[np.ndarray]:
        key = (repr(rng.bit_generator.state), n, n_boot)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
        if hit is not None:
            rng.bit_generator.state = hit[1]
            return hit[0]
        chunks = [_weights(idx, n) for idx in _index_chunks(rng, n, n_boot)]
        for chunk in chunks:
            chunk.setflags(write=False)
        with self._lock:
            self._entries[key] = (chunks, rng.bit_generator.state)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return chunks


_DRAWS = _DrawMemo(size=8)  # at most 8 x _MAX_BOOT_CELLS counts held


def _resampled_means(rng: np.random.Generator, columns: Sequence[np.ndarray], n_boot: int) -> list[np.ndarray]:
    """Bootstrap means of each column, resampling rows jointly (pairing kept).

    Each resample's mean is its item counts times the column, over n: the
    same number as averaging the drawn values (exactly so for token counts,
    which are integers), at a fraction of the cost of gathering them.
    """
    n = len(columns[0])
    table = np.column_stack([np.asarray(column, dtype=float) for column in columns])
    means = np.concatenate([counts @ table for counts in _DRAWS.weights(rng, n, n_boot)]) / n
    return [means[:, j] for j in range(len(columns))]


def _percentile_ci(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_ratio_of_means_ci(
    a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval for mean(b)/mean(a), resampling items jointly."""
    rng = np.random.default_rng(seed)
    mean_a, mean_b = _resampled_means(rng, [a, b], n_boot)
    return _percentile_ci(mean_b / mean_a, confidence)


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
    _aligned({**inputs, "finish_a": finish_a, "finish_b": finish_b})
    a, b = _as_floats(tokens_a), _as_floats(tokens_b)
    present = ~(np.isnan(a) | np.isnan(b))
    return a, b, present, present & _as_bools(correct_a) & _as_bools(correct_b)


def _has_both_correct(a: np.ndarray, both: np.ndarray) -> bool:
    return bool(both.sum() >= 2 and a[both].sum() > 0)


# ---------------------------------------------------------------- task time


def _speed_draws(rng: np.random.Generator, speed: EndpointSpeed, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws of (mean TTFT, mean seconds per token); constant when entered by hand."""
    ttft = np.asarray(speed.ttft_s, dtype=float)
    spt = 1.0 / np.asarray(speed.decode_tps, dtype=float)
    if not speed.measured:
        return np.full(n_boot, ttft.mean()), np.full(n_boot, spt.mean())
    mean_ttft, mean_spt = _resampled_means(rng, [ttft, spt], n_boot)
    return mean_ttft, mean_spt


def _mean_task_time(mean_tokens: Any, mean_ttft: Any, mean_spt: Any) -> Any:
    """Mean over items of TTFT + tokens / speed; works on scalars and bootstrap arrays."""
    return mean_ttft + mean_tokens * mean_spt


def compare_task_time(
    tokens_a: Any,
    tokens_b: Any,
    speed_a: EndpointSpeed,
    speed_b: EndpointSpeed,
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> TaskTimeChange:
    """B/A ratio of mean task time under `TASK_TIME_MODEL`, with a bootstrap interval.

    Each bootstrap replicate resamples the paired items jointly and, for each
    measured endpoint independently, its speed-probe requests (TTFT and speed
    of one request stay together). A hand-entered speed is held fixed, so the
    interval then carries only the token uncertainty on that side.
    """
    _aligned({"tokens_a": tokens_a, "tokens_b": tokens_b})
    a, b = _as_floats(tokens_a), _as_floats(tokens_b)
    present = ~(np.isnan(a) | np.isnan(b))
    a, b = a[present], b[present]
    if a.size < 2:
        raise TimingInputError(f"need at least 2 paired items with token counts, got {a.size}")
    rng = np.random.default_rng(seed)
    boot_a, boot_b = _resampled_means(rng, [a, b], n_boot)
    ttft_a, spt_a = _speed_draws(rng, speed_a, n_boot)
    ttft_b, spt_b = _speed_draws(rng, speed_b, n_boot)
    draws = _mean_task_time(boot_b, ttft_b, spt_b) / _mean_task_time(boot_a, ttft_a, spt_a)
    time_a = _mean_task_time(a.mean(), speed_a.mean_ttft_s, speed_a.seconds_per_token)
    time_b = _mean_task_time(b.mean(), speed_b.mean_ttft_s, speed_b.seconds_per_token)
    return TaskTimeChange(
        n_items=int(a.size),
        mean_time_a_s=float(time_a),
        mean_time_b_s=float(time_b),
        ratio=float(time_b / time_a),
        ci=_percentile_ci(draws, confidence),
        token_ratio=float(b.mean() / a.mean()),
        speed_ratio=speed_b.effective_tps / speed_a.effective_tps,
        speed_a=speed_a.describe(),
        speed_b=speed_b.describe(),
        confidence=confidence,
        fixed_speeds=tuple(side for side, speed in (("A", speed_a), ("B", speed_b)) if not speed.measured),
        n_left_out=int((~present).sum()),
    )
