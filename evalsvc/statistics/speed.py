"""An endpoint's measured batch-1 speed on one workload, summarised. Pure: no I/O.

Failed requests (a sample with `error`) are counted and left out of every
figure; a request that answered with a single token has a TTFT but no decode
speed. `harness.speed` says how each sample's figures are measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalsvc.statistics.bootstrap import percentile_ci, resampled_means
from harness.types import SpeedSample


@dataclass(frozen=True)
class SpeedSummary:
    """Figures of one endpoint's speed samples for one workload (None where no sample has the figure)."""

    n: int  # requests sent
    n_ok: int  # requests measured, failed ones left out
    truncated: int  # measured answers cut at the request's token cap
    median_ttft_s: float | None
    median_decode_tps: float | None
    mean_decode_tps: float | None
    mean_decode_tps_ci: tuple[float, float] | None  # percentile bootstrap at `confidence`
    mean_output_tokens: float | None
    median_output_tokens: float | None
    token_source: str | None  # "usage", "chunks" or "chunks+usage"
    mean_accept_length: float | None  # speculative decoding: the probe's own per-request acceptance
    n_accept_length: int
    mean_reasoning_tokens: float | None  # only when the server counted reasoning for every measured request
    confidence: float = 0.95

    @property
    def n_errors(self) -> int:
        return self.n - self.n_ok


def mean_ci(values: Sequence[float], n_boot: int = 2000, seed: int = 0, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean of `values` (seeded)."""
    rng = np.random.default_rng(seed)
    (means,) = resampled_means(rng, [np.asarray(values, dtype=float)], n_boot)
    return percentile_ci(means, confidence)


def summarize_speed(
    samples: Sequence[SpeedSample], n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> SpeedSummary:
    """Medians of TTFT and decode speed, mean decode speed with a bootstrap interval, output lengths."""
    ok = [s for s in samples if s.ok]
    rates = [s.decode_tps for s in ok if s.decode_tps is not None]
    tokens = [s.output_tokens for s in ok if s.output_tokens is not None]  # an unknown count is not 0
    accepts = [s.accept_length for s in ok if s.accept_length is not None]
    reasoning = [s.reasoning_tokens for s in ok if s.reasoning_tokens is not None]
    sources = sorted({s.token_source for s in ok if s.token_source})
    return SpeedSummary(
        n=len(samples),
        n_ok=len(ok),
        truncated=sum(1 for s in ok if s.finish_reason == "length"),
        median_ttft_s=_median([s.ttft_s for s in ok if s.ttft_s is not None]),
        median_decode_tps=_median(rates),
        mean_decode_tps=_mean(rates),
        mean_decode_tps_ci=mean_ci(rates, n_boot, seed, confidence) if len(rates) >= 2 else None,
        mean_output_tokens=_mean(tokens),
        median_output_tokens=_median(tokens),
        token_source="+".join(sources) if sources else None,
        mean_accept_length=_mean(accepts),
        n_accept_length=len(accepts),
        mean_reasoning_tokens=_mean(reasoning) if ok and len(reasoning) == len(ok) else None,
        confidence=confidence,
    )


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return float(statistics.fmean(values)) if values else None
