"""Output-length inflation and task time (the decision on them: test_decision.py).

Statistics are checked against independent computations: hand-worked
tables, an enumerated exact Wilcoxon distribution, the normal approximation
written out, the delta method, and bootstrap coverage on simulated data with
a known truth.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from evalsvc.statistics import output_length
from evalsvc.statistics import bootstrap
from evalsvc.statistics.output_length import TimingInputError, measure_length_inflation
from evalsvc.statistics.task_time import TASK_TIME_MODEL, EndpointSpeed, compare_task_time
from harness.types import SpeedSample

# ---------------------------------------------------------------- simulated workloads


@dataclass(frozen=True)
class Workload:
    tokens_a: np.ndarray
    tokens_b: np.ndarray
    correct_a: np.ndarray
    correct_b: np.ndarray
    speed_a: EndpointSpeed
    speed_b: EndpointSpeed


def speed_samples(rng: np.random.Generator, tps: float, ttft_s: float, n: int) -> list[SpeedSample]:
    rates = rng.normal(tps, 0.02 * tps, n)
    ttfts = rng.normal(ttft_s, 0.1 * ttft_s, n)
    return [
        SpeedSample(index=i, ttft_s=float(t), decode_tps=float(r), output_tokens=300, token_source="usage")
        for i, (t, r) in enumerate(zip(ttfts, rates))
    ]


def simulate(seed: int, n_items: int, mean_tokens: float, token_ratio: float, tps_a: float, tps_b: float) -> Workload:
    """Per-item tokens with B = A x ratio x noise, and speed-probe samples around each speed."""
    rng = np.random.default_rng(seed)
    spread, noise = 0.5, 0.12
    tokens_a = np.round(rng.lognormal(math.log(mean_tokens) - spread**2 / 2, spread, n_items))
    tokens_b = np.round(tokens_a * token_ratio * rng.lognormal(-(noise**2) / 2, noise, n_items))
    correct_a = rng.random(n_items) < 0.8
    correct_b = correct_a & (rng.random(n_items) < 0.97)
    return Workload(
        tokens_a=tokens_a,
        tokens_b=tokens_b,
        correct_a=correct_a,
        correct_b=correct_b,
        speed_a=EndpointSpeed.from_samples(speed_samples(rng, tps_a, 0.05, 20), "probe A"),
        speed_b=EndpointSpeed.from_samples(speed_samples(rng, tps_b, 0.05, 20), "probe B"),
    )


# ---------------------------------------------------------------- length: hand-worked


def test_length_figures_match_a_hand_worked_table() -> None:
    # item:       1      2         3      4       5 (A failed: no tokens)
    tokens_a = [100, 200, 300, 400, None]
    tokens_b = [120, 260, 300, 380, 900]
    correct_a = [True, True, False, True, False]
    correct_b = [True, False, False, True, True]
    finish_a = ["stop", "length", "stop", None, None]
    finish_b = ["length", "length", "stop", "stop", "length"]
    result = measure_length_inflation(tokens_a, tokens_b, correct_a, correct_b, finish_a, finish_b, n_boot=500)

    # Means over items 1-4: A 1000/4, B 1060/4; per-item ratios 1.2, 1.3, 1.0, 0.95 -> median 1.1.
    assert (result.all_items.n, result.n_missing) == (4, 1)
    assert result.all_items.mean_a == 250.0 and result.all_items.mean_b == 265.0
    assert result.all_items.ratio_of_means == pytest.approx(1.06)
    assert result.all_items.median_item_ratio == pytest.approx(1.1)
    # Both correct: items 1 and 4 -> (120+380)/(100+400) = 1.0, ratios 1.2 and 0.95.
    assert result.both_correct is not None
    assert result.both_correct.n == 2
    assert result.both_correct.ratio_of_means == pytest.approx(1.0)
    assert result.both_correct.median_item_ratio == pytest.approx(1.075)
    assert (result.truncated_a, result.truncated_b) == (1, 3)
    low, high = result.all_items.ci
    assert low <= 1.06 <= high


def test_series_inputs_with_missing_values_match_arrays() -> None:
    index = [f"gsm8k/test/{i}" for i in range(6)]
    a = pd.Series([10, 20, np.nan, 40, 50, 60], index=index, dtype="Float64")
    b = pd.Series([12, 18, 30, 44, pd.NA, 66], index=index, dtype="Int64")
    ok = pd.Series([True] * 6, index=index)
    result = measure_length_inflation(a, b, ok, ok, n_boot=200)
    assert (result.all_items.n, result.n_missing) == (4, 2)
    assert result.all_items.ratio_of_means == pytest.approx((12 + 18 + 44 + 66) / (10 + 20 + 40 + 60))


def test_misaligned_series_are_refused() -> None:
    a = pd.Series([1.0, 2.0, 3.0], index=["x", "y", "z"])
    b = pd.Series([1.0, 2.0, 3.0], index=["x", "z", "y"])
    ok = [True, True, True]
    with pytest.raises(TimingInputError, match="not aligned"):
        measure_length_inflation(a, b, ok, ok)
    with pytest.raises(TimingInputError, match="differ in length"):
        measure_length_inflation([1, 2, 3], [1, 2], ok, ok)


def test_long_wrong_answers_do_not_drive_the_both_correct_ratio() -> None:
    rng = np.random.default_rng(21)
    n = 300
    a = np.round(rng.uniform(150, 350, n))
    b = np.round(a * rng.uniform(0.95, 1.05, n))
    wrong_b = rng.random(n) < 0.2
    b[wrong_b] = 2048  # runs to the cap writing garbage
    correct_a = np.ones(n, dtype=bool)
    finish_b = np.where(wrong_b, "length", "stop")
    result = measure_length_inflation(a, b, correct_a, ~wrong_b, finish_b=finish_b)
    assert result.all_items.ratio_of_means > 2.0
    assert result.both_correct is not None
    assert result.both_correct.ratio_of_means == pytest.approx(1.0, abs=0.02)
    assert result.both_correct.ci[0] < 1.0 < result.both_correct.ci[1]
    assert result.truncated_b == int(wrong_b.sum())
    assert result.truncated_a == 0


# ---------------------------------------------------------------- Wilcoxon, independently


def exact_two_sided_p(diffs: list[float]) -> float:
    """Exact signed-rank p by enumerating all 2^n sign patterns (no ties or zeros)."""
    ranks = pd.Series(np.abs(diffs)).rank().to_numpy()
    w_plus = ranks[np.array(diffs) > 0].sum()
    observed = min(w_plus, ranks.sum() - w_plus)
    sums = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product([0, 1], repeat=len(ranks))]
    return min(1.0, 2 * sum(1 for s in sums if s <= observed) / len(sums))


def normal_approx_p(diffs: np.ndarray) -> float:
    """Normal approximation with the usual tie correction, zeros dropped first."""
    diffs = diffs[diffs != 0]
    magnitudes = pd.Series(np.abs(diffs))
    ranks = magnitudes.rank().to_numpy()
    n = len(diffs)
    w_plus = ranks[diffs > 0].sum()
    mean = n * (n + 1) / 4
    ties = magnitudes.value_counts().to_numpy()
    variance = n * (n + 1) * (2 * n + 1) / 24 - (ties**3 - ties).sum() / 48
    return math.erfc(abs(w_plus - mean) / math.sqrt(variance) / math.sqrt(2))


def test_wilcoxon_small_sample_matches_exact_enumeration() -> None:
    a = np.array([100.0, 200, 300, 400, 500, 600, 700, 800])
    diffs = [1.0, 2.5, -3.0, 4.0, 5.5, -6.0, 7.0, 8.5]
    result = measure_length_inflation(a, a + diffs, [True] * 8, [True] * 8, n_boot=200)
    assert result.all_items.wilcoxon_p == pytest.approx(exact_two_sided_p(diffs))
    assert result.all_items.wilcoxon_statistic == pytest.approx(9.0)  # W- = 3 + 6


def test_wilcoxon_large_sample_matches_normal_approximation() -> None:
    w = simulate(seed=164, n_items=164, mean_tokens=260, token_ratio=1.02, tps_a=226, tps_b=252)
    a, b = w.tokens_a + np.arange(164) * 1e-6, w.tokens_b  # break ties so the formula needs no correction
    result = measure_length_inflation(a, b, w.correct_a, w.correct_b, n_boot=200)
    assert result.all_items.wilcoxon_p == pytest.approx(normal_approx_p(b - a), rel=1e-6)
    both = w.correct_a & w.correct_b
    assert result.both_correct.wilcoxon_p == pytest.approx(normal_approx_p(b[both] - a[both]), rel=1e-6)


def test_wilcoxon_small_sample_with_ties_and_zeros_uses_the_corrected_normal_approximation() -> None:
    a = np.full(11, 200.0)
    diffs = np.array([0.0, 3, 3, -3, 5, 5, 8, -1, 12, 12, 0])
    result = measure_length_inflation(a, a + diffs, [True] * 11, [True] * 11, n_boot=200)
    assert result.all_items.wilcoxon_p == pytest.approx(normal_approx_p(diffs), rel=1e-9)


def test_identical_lengths_give_p_of_one() -> None:
    a = [10.0, 20.0, 30.0]
    result = measure_length_inflation(a, a, [True] * 3, [True] * 3, n_boot=100)
    assert result.all_items.wilcoxon_p == 1.0
    assert result.all_items.ci == (1.0, 1.0)


# ---------------------------------------------------------------- bootstrap, independently


def test_paired_interval_agrees_with_the_delta_method() -> None:
    rng = np.random.default_rng(99)
    n = 400
    a = rng.lognormal(5.5, 0.6, n)
    b = a * 1.1 * rng.lognormal(0.0, 0.1, n)  # strongly paired: an unpaired bootstrap would be ~4x wider
    result = measure_length_inflation(a, b, np.ones(n, bool), np.ones(n, bool), n_boot=4000, seed=1)
    ratio = b.mean() / a.mean()
    cov = np.cov(a, b, ddof=1)
    variance = (cov[1, 1] - 2 * ratio * cov[0, 1] + ratio**2 * cov[0, 0]) / (n * a.mean() ** 2)
    half = 1.959964 * math.sqrt(variance)
    low, high = result.all_items.ci
    assert (high - low) / 2 == pytest.approx(half, rel=0.12)
    assert (low + high) / 2 == pytest.approx(ratio, abs=0.25 * half)


def test_length_interval_covers_the_true_ratio_about_95_percent() -> None:
    rng = np.random.default_rng(2024)
    true_ratio, n, datasets = 1.15, 80, 200
    covered = 0
    for k in range(datasets):
        a = rng.lognormal(5.0, 0.7, n)
        b = a * true_ratio * rng.lognormal(-(0.3**2) / 2, 0.3, n)  # E[b] = true_ratio * E[a]
        low, high = measure_length_inflation(a, b, np.ones(n, bool), np.ones(n, bool), n_boot=1000, seed=k).all_items.ci
        covered += low <= true_ratio <= high
    print(f"length interval coverage {covered / datasets:.3f}")
    assert 0.88 <= covered / datasets <= 0.99


def test_task_time_interval_covers_the_true_ratio_about_95_percent() -> None:
    # Lognormal speeds and TTFTs make the true mean task time exact:
    # E[ttft] + E[tokens] * E[1/tps], with E[1/tps] = exp(-mu + s^2/2).
    rng = np.random.default_rng(77)
    n_items, n_speed, datasets = 100, 15, 200
    tok_mu, tok_s, ratio_true = 5.6, 0.6, 1.2
    speeds = {"a": (math.log(226), 0.08), "b": (math.log(252), 0.08)}
    ttft_mu, ttft_s = math.log(0.05), 0.3

    def true_time(endpoint: str, mean_tokens: float) -> float:
        mu, s = speeds[endpoint]
        return math.exp(ttft_mu + ttft_s**2 / 2) + mean_tokens * math.exp(-mu + s**2 / 2)

    mean_tok_a = math.exp(tok_mu + tok_s**2 / 2)
    truth = true_time("b", ratio_true * mean_tok_a) / true_time("a", mean_tok_a)

    def draw_speed(endpoint: str) -> EndpointSpeed:
        mu, s = speeds[endpoint]
        return EndpointSpeed(
            ttft_s=tuple(rng.lognormal(ttft_mu, ttft_s, n_speed)),
            decode_tps=tuple(rng.lognormal(mu, s, n_speed)),
            source="simulated",
            measured=True,
        )

    covered = 0
    for k in range(datasets):
        a = rng.lognormal(tok_mu, tok_s, n_items)
        b = a * ratio_true * rng.lognormal(-(0.25**2) / 2, 0.25, n_items)
        change = compare_task_time(a, b, draw_speed("a"), draw_speed("b"), n_boot=1000, seed=k)
        covered += change.ci[0] <= truth <= change.ci[1]
    print(f"task-time interval coverage {covered / datasets:.3f}")
    assert 0.88 <= covered / datasets <= 0.99


# ---------------------------------------------------------------- task time


def test_task_time_point_estimate_is_the_average_over_items_and_speed_requests() -> None:
    rng = np.random.default_rng(3)
    tokens_a = rng.integers(50, 500, 30).astype(float)
    tokens_b = rng.integers(50, 500, 30).astype(float)
    samples_a = speed_samples(rng, 226, 0.08, 7)
    samples_b = speed_samples(rng, 252, 0.06, 9)
    change = compare_task_time(
        tokens_a, tokens_b, EndpointSpeed.from_samples(samples_a), EndpointSpeed.from_samples(samples_b), n_boot=200
    )

    def brute_force(tokens: np.ndarray, samples: list[SpeedSample]) -> float:
        # Every item served at every measured request's speed, one task at a time.
        return float(np.mean([s.ttft_s + t / s.decode_tps for t in tokens for s in samples]))

    assert change.mean_time_a_s == pytest.approx(brute_force(tokens_a, samples_a))
    assert change.mean_time_b_s == pytest.approx(brute_force(tokens_b, samples_b))
    assert change.ratio == pytest.approx(change.mean_time_b_s / change.mean_time_a_s)
    assert change.model == TASK_TIME_MODEL
    assert "time to first token + output tokens / decode tokens per second" in TASK_TIME_MODEL


def test_hand_entered_speeds_are_fixed_and_exact() -> None:
    tokens_a = np.array([100.0, 300.0, 200.0, 400.0])
    tokens_b = tokens_a * 1.21
    a = EndpointSpeed.by_hand(226.0, source="vendor table", ttft_s=0.1)
    b = EndpointSpeed.by_hand(252.0, source="vendor table", ttft_s=0.1)
    change = compare_task_time(tokens_a, tokens_b, a, b, n_boot=500)
    # By hand: A = 0.1 + 250/226 s, B = 0.1 + 302.5/252 s.
    expected = (0.1 + 302.5 / 252) / (0.1 + 250 / 226)
    assert change.ratio == pytest.approx(expected)
    assert change.speed_ratio == pytest.approx(252 / 226)
    assert "entered by hand (vendor table), fixed" in change.speed_b
    # No TTFT and exactly proportional tokens: every resample gives 1.21 x 226/252, so no spread is left.
    no_ttft = compare_task_time(
        tokens_a, tokens_b, EndpointSpeed.by_hand(226.0, "table"), EndpointSpeed.by_hand(252.0, "table"), n_boot=500
    )
    assert no_ttft.ci == (pytest.approx(1.21 * 226 / 252), pytest.approx(1.21 * 226 / 252))


def test_measured_speed_widens_the_interval_over_a_fixed_one() -> None:
    w = simulate(seed=11, n_items=164, mean_tokens=260, token_ratio=1.21, tps_a=226, tps_b=252)
    b_fixed = EndpointSpeed.by_hand(w.speed_b.effective_tps, source="vendor table", ttft_s=w.speed_b.mean_ttft_s)
    measured = compare_task_time(w.tokens_a, w.tokens_b, w.speed_a, w.speed_b, seed=4)
    fixed = compare_task_time(w.tokens_a, w.tokens_b, w.speed_a, b_fixed, seed=4)
    assert fixed.ratio == pytest.approx(measured.ratio)
    assert (fixed.ci[1] - fixed.ci[0]) < (measured.ci[1] - measured.ci[0])
    assert "measured over 20 requests" in measured.speed_b
    assert (measured.fixed_speeds, fixed.fixed_speeds) == ((), ("B",))


def test_too_few_speed_samples_are_refused() -> None:
    samples = [SpeedSample(index=0, ttft_s=0.1, decode_tps=200.0), SpeedSample(index=1, error="HTTP 500")]
    with pytest.raises(TimingInputError, match="at least 2 successful speed samples.*got 1 of 2"):
        EndpointSpeed.from_samples(samples, source="endpoint q4")
    with pytest.raises(TimingInputError, match="must be positive"):
        EndpointSpeed.by_hand(0.0, source="guess")


def test_bootstrap_means_equal_averaging_the_drawn_values() -> None:
    """The count-matrix shortcut gives the means of the drawn indices: exactly on integer token counts."""
    tokens = np.random.default_rng(8).integers(0, 900, size=(300, 2)).astype(float)
    drawn = np.random.default_rng(4).integers(0, 300, size=(700, 300))
    means = bootstrap.resampled_means(np.random.default_rng(4), [tokens[:, 0], tokens[:, 1]], 700)
    for column in range(2):
        assert np.array_equal(means[column], tokens[drawn, column].mean(axis=1))


def test_remembered_draws_change_no_result_and_leave_the_generator_where_drawing_would() -> None:
    a = np.random.default_rng(1).integers(10, 400, 123).astype(float)
    fresh, repeat = np.random.default_rng(6), np.random.default_rng(6)
    first = bootstrap.resampled_means(fresh, [a, a + 3], 1500)
    second = bootstrap.resampled_means(repeat, [a, a + 3], 1500)  # served from the memo
    assert all(np.array_equal(x, y) for x, y in zip(first, second))
    assert fresh.bit_generator.state == repeat.bit_generator.state
    expected = np.random.default_rng(6)
    expected.integers(0, 123, size=(1500, 123))
    assert repeat.random() == expected.random()


@pytest.mark.parametrize("seed", range(12))
def test_large_sample_wilcoxon_matches_scipy(seed: int) -> None:
    """The written-out normal approximation gives scipy's statistic and p, ties and zeros included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(51, 600))
    diffs = rng.integers(-25, 30, n).astype(float) * (1 if seed % 2 else 0.5)
    statistic, p = output_length._wilcoxon(diffs)
    expected = sps.wilcoxon(diffs, zero_method="wilcox", method="approx")
    assert statistic == pytest.approx(expected.statistic) and p == pytest.approx(expected.pvalue, rel=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_token_ratios_are_the_point_figures_of_the_full_measurement(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    a = rng.integers(0, 800, n).astype(float)
    b = rng.integers(0, 800, n).astype(float)
    a[rng.random(n) < 0.05] = np.nan  # failed requests
    correct_a, correct_b = rng.random(n) < 0.6, rng.random(n) < 0.6
    try:
        full = measure_length_inflation(a, b, correct_a, correct_b, n_boot=50)
    except output_length.TimingInputError as exc:
        with pytest.raises(output_length.TimingInputError, match=str(exc)[:30]):
            output_length.token_ratios(a, b, correct_a, correct_b)
        return
    assert output_length.token_ratios(a, b, correct_a, correct_b) == full.ratios


def test_token_ratios_refuse_what_the_full_measurement_refuses() -> None:
    with pytest.raises(output_length.TimingInputError, match="at least 2 paired items"):
        output_length.token_ratios([10.0], [12.0], [True], [True])
    with pytest.raises(output_length.TimingInputError, match="wrote no tokens"):
        output_length.token_ratios([0.0, 0.0], [5.0, 6.0], [True, True], [True, True])
    ratios = output_length.token_ratios([10.0, 20.0, 30.0], [20.0, 20.0, 60.0], [True, False, True], [True, True, True])
    assert ratios == output_length.TokenRatios(100 / 60, 80 / 40)
