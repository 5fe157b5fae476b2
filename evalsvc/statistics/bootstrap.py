"""Percentile bootstrap of paired means, shared by the length and the task-time intervals. Pure: no I/O.

Items are resampled jointly (the pairing is kept) with a fixed seed, so a
report is reproducible; the resampling counts are remembered for the few
sizes a report asks for again and again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_MAX_BOOT_CELLS = 2_000_000  # resampled values held in memory at once


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


def resampled_means(rng: np.random.Generator, columns: Sequence[np.ndarray], n_boot: int) -> list[np.ndarray]:
    """Bootstrap means of each column, resampling rows jointly (pairing kept).

    Each resample's mean is its item counts times the column, over n: the
    same number as averaging the drawn values (exactly so for token counts,
    which are integers), at a fraction of the cost of gathering them.
    """
    n = len(columns[0])
    table = np.column_stack([np.asarray(column, dtype=float) for column in columns])
    means = np.concatenate([counts @ table for counts in _DRAWS.weights(rng, n, n_boot)]) / n
    return [means[:, j] for j in range(len(columns))]


def percentile_ci(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_ratio_of_means_ci(
    a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval for mean(b)/mean(a), resampling items jointly."""
    rng = np.random.default_rng(seed)
    mean_a, mean_b = resampled_means(rng, [a, b], n_boot)
    return percentile_ci(mean_b / mean_a, confidence)
