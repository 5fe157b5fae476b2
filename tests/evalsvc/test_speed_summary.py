"""The one summary of an endpoint's speed samples, checked against numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalsvc.statistics.speed import summarize_speed
from harness.types import SpeedSample


def make_samples(rates: list[float], ttfts: list[float]) -> list[SpeedSample]:
    return [
        SpeedSample(index=i, ttft_s=t, decode_tps=r, output_tokens=100 + i, token_source="usage")
        for i, (r, t) in enumerate(zip(rates, ttfts))
    ]


def test_summary_medians_match_numpy_and_ci_matches_scipy_bootstrap() -> None:
    rng = np.random.default_rng(7)
    rates = list(rng.normal(226.0, 12.0, 40))
    ttfts = list(rng.gamma(4.0, 0.02, 40))
    samples = make_samples(rates, ttfts) + [SpeedSample(index=99, error="HTTP 500")]
    summary = summarize_speed(samples, n_boot=20000, seed=3)

    assert (summary.n, summary.n_ok, summary.n_errors) == (41, 40, 1)
    assert summary.median_decode_tps == pytest.approx(float(np.median(rates)))
    assert summary.median_ttft_s == pytest.approx(float(np.median(ttfts)))
    assert summary.mean_decode_tps == pytest.approx(float(np.mean(rates)))
    assert summary.mean_output_tokens == pytest.approx(119.5) and summary.median_output_tokens == 119.5
    reference = stats.bootstrap(
        (np.array(rates),), np.mean, n_resamples=20000, method="percentile", random_state=11
    ).confidence_interval
    low, high = summary.mean_decode_tps_ci
    assert low == pytest.approx(reference.low, abs=0.4)
    assert high == pytest.approx(reference.high, abs=0.4)
    # And the t interval, a third way: same width within 10%.
    t_half = stats.t.ppf(0.975, 39) * np.std(rates, ddof=1) / math.sqrt(40)
    assert (high - low) / 2 == pytest.approx(t_half, rel=0.10)


def test_a_failed_request_counts_apart_and_changes_no_figure() -> None:
    good = make_samples([100.0, 200.0, 300.0], [0.1, 0.2, 0.3])
    # A broken stream must never look fast: even figures a failed sample carried are left out.
    failed = SpeedSample(index=9, ttft_s=0.001, decode_tps=1e9, output_tokens=10**6, finish_reason="length",
                         accept_length=9.0, reasoning_tokens=5, error="usage chunks disagree")
    with_failure, alone = summarize_speed([*good, failed]), summarize_speed(good)
    assert (with_failure.n, with_failure.n_ok, with_failure.n_errors) == (4, 3, 1)
    figures = ("median_ttft_s", "median_decode_tps", "mean_decode_tps", "mean_decode_tps_ci", "mean_output_tokens",
               "truncated", "mean_accept_length", "n_accept_length", "mean_reasoning_tokens")
    assert [getattr(with_failure, f) for f in figures] == [getattr(alone, f) for f in figures]
    assert (alone.median_decode_tps, alone.median_ttft_s, alone.truncated) == (200.0, 0.2, 0)


def test_every_request_failed_gives_counts_and_no_figures() -> None:
    summary = summarize_speed([SpeedSample(index=0, error="HTTP 503"), SpeedSample(index=1, error="HTTP 503")])
    assert (summary.n, summary.n_ok, summary.median_decode_tps, summary.mean_decode_tps_ci) == (2, 0, None, None)
    assert (summary.median_ttft_s, summary.mean_output_tokens, summary.token_source) == (None, None, None)


def test_one_token_answers_cut_answers_reasoning_and_acceptance() -> None:
    samples = [
        SpeedSample(index=0, ttft_s=0.1, decode_tps=None, output_tokens=1, token_source="usage"),  # no decode window
        SpeedSample(index=1, ttft_s=0.3, decode_tps=50.0, output_tokens=64, token_source="chunks",
                    finish_reason="length", accept_length=3.0, reasoning_tokens=40),
        SpeedSample(index=2, ttft_s=0.2, decode_tps=70.0, output_tokens=30, token_source="usage",
                    finish_reason="stop", accept_length=2.0, reasoning_tokens=10),
    ]
    summary = summarize_speed(samples)
    assert (summary.n_ok, summary.median_ttft_s, summary.median_decode_tps) == (3, 0.2, 60.0)
    assert summary.mean_decode_tps_ci is not None and 50.0 <= summary.mean_decode_tps_ci[0] <= 60.0
    assert (summary.truncated, summary.token_source, summary.mean_accept_length, summary.n_accept_length) == (
        1, "chunks+usage", 2.5, 2)
    # Sample 0 has no reasoning count: a mean over the others would read as every request's reasoning.
    assert summary.mean_reasoning_tokens is None
    assert summarize_speed(samples[1:]).mean_reasoning_tokens == 25.0


def test_the_statistics_load_no_http_client_store_or_cli() -> None:
    """The length, task-time and speed models take `harness.types` records, so reading them costs no client."""
    import os
    import pkgutil
    import subprocess
    import sys
    from pathlib import Path

    import evalsvc.statistics

    root = Path(__file__).resolve().parents[2]
    modules = ", ".join(f"evalsvc.statistics.{m.name}" for m in pkgutil.iter_modules(evalsvc.statistics.__path__))
    heavy = ("httpx", "sqlalchemy", "click", "streamlit")
    code = f"import sys, {modules}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "evalsvc.statistics.task_time" in modules and "evalsvc.statistics.speed" in modules
    assert out.stdout.strip() == "[]"
