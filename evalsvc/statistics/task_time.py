"""Task time of step B against step A on one workload: output tokens and measured speed together. Pure: no I/O.

`compare_task_time` gives the B/A ratio of mean task time under
`TASK_TIME_MODEL`, with an interval that carries both token and speed
uncertainty: items are resampled jointly (the pairing is kept); each
endpoint's speed samples are resampled independently of the items and of
each other, because they come from separate speed-probe runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalsvc.statistics.bootstrap import percentile_ci, resampled_means
from evalsvc.statistics.output_length import TimingInputError, as_floats, check_aligned
from harness.types import SpeedSample

TASK_TIME_MODEL = (
    "task time per item = time to first token + output tokens / decode tokens per second. "
    "Output tokens are the completion tokens of the accuracy run (reasoning included); time to "
    "first token and decode speed are the endpoint's batch-1 streaming figures for the workload. "
    "The mean over items is mean TTFT + mean tokens x mean seconds per token. Queueing, "
    "concurrent load and tool round trips are not modelled."
)


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


# ---------------------------------------------------------------- task time


def _speed_draws(rng: np.random.Generator, speed: EndpointSpeed, n_boot: int) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws of (mean TTFT, mean seconds per token); constant when entered by hand."""
    ttft = np.asarray(speed.ttft_s, dtype=float)
    spt = 1.0 / np.asarray(speed.decode_tps, dtype=float)
    if not speed.measured:
        return np.full(n_boot, ttft.mean()), np.full(n_boot, spt.mean())
    mean_ttft, mean_spt = resampled_means(rng, [ttft, spt], n_boot)
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
    check_aligned({"tokens_a": tokens_a, "tokens_b": tokens_b})
    a, b = as_floats(tokens_a), as_floats(tokens_b)
    present = ~(np.isnan(a) | np.isnan(b))
    a, b = a[present], b[present]
    if a.size < 2:
        raise TimingInputError(f"need at least 2 paired items with token counts, got {a.size}")
    rng = np.random.default_rng(seed)
    boot_a, boot_b = resampled_means(rng, [a, b], n_boot)
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
        ci=percentile_ci(draws, confidence),
        token_ratio=float(b.mean() / a.mean()),
        speed_ratio=speed_b.effective_tps / speed_a.effective_tps,
        speed_a=speed_a.describe(),
        speed_b=speed_b.describe(),
        confidence=confidence,
        fixed_speeds=tuple(side for side, speed in (("A", speed_a), ("B", speed_b)) if not speed.measured),
        n_left_out=int((~present).sum()),
    )
