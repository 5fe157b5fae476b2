"""Pairing two runs item by item: which items both answered, and what was left out and why.

Pure functions on pandas DataFrames: no I/O, no database, no CLI. Every run is
an "items frame" with one row per benchmark item (`db.queries.items_frame`,
columns `db.queries.ITEM_COLUMNS`; pairing needs `_REQUIRED_COLUMNS`). Two runs
are compared only on the items both answered without error and with identical
content (same `item_hash`). The tests run on the pairs live in
`evalsvc.statistics.paired_tests`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, reduce
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import UserError

_REQUIRED_COLUMNS = ("item_id", "item_hash", "status", "correct")


class PairingError(UserError, ValueError):
    """Two runs cannot be compared item by item."""


class SettingsMismatch(PairingError):
    """Two runs used a different prompt template, mode or decoding settings."""

    def __init__(self, message: str, differences: tuple[str, ...]) -> None:
        super().__init__(message)
        self.differences = differences


@dataclass(frozen=True)
class RunInfo:
    """What a run was: who answered, on which task, with which settings.

    `config_hash` is informational only; pairing compares `template`, `mode`
    and `decoding` directly so the refusal message can say what differs.
    """

    run_id: int
    endpoint: str
    task: str
    template: str
    decoding: Mapping[str, Any] = field(default_factory=dict)
    mode: str | None = None
    config_hash: str | None = None
    isolation: str | None = None  # how its code was sandboxed (HumanEval); None when no code ran

    @property
    def label(self) -> str:
        return f"run {self.run_id} ({self.endpoint})"


@dataclass(frozen=True)
class DropCounts:
    """Why items of either run were left out of the pairing.

    Each dropped item is counted once, under the first reason that applies in
    this order: missing in A, missing in B, error in A, error in B, hash
    mismatch. An item that failed in both runs is counted as an error in A.
    """

    missing_in_a: int = 0
    missing_in_b: int = 0
    error_in_a: int = 0
    error_in_b: int = 0
    hash_mismatch: int = 0

    @property
    def total(self) -> int:
        return self.missing_in_a + self.missing_in_b + self.error_in_a + self.error_in_b + self.hash_mismatch

    def to_dict(self) -> dict[str, int]:
        return {
            "missing_in_a": self.missing_in_a, "missing_in_b": self.missing_in_b,
            "error_in_a": self.error_in_a, "error_in_b": self.error_in_b,
            "hash_mismatch": self.hash_mismatch,
        }


@dataclass(frozen=True, eq=False)
class Paired:
    """Items both runs answered, in item-id order.

    `at_a` and `at_b` are the row positions of the paired items in each run's
    items frame. `items` is one row per pair, columns suffixed `_a` / `_b`
    except `item_id`, `item_hash` and `reference`; it is built on first use,
    since the 2x2 table (`paired_table`) needs only the correctness columns.
    `differences` lists the settings that differ; it is non-empty only when
    the pairing was forced.
    """

    a_info: RunInfo
    b_info: RunInfo
    a_items: pd.DataFrame = field(repr=False)
    b_items: pd.DataFrame = field(repr=False)
    at_a: np.ndarray = field(repr=False)
    at_b: np.ndarray = field(repr=False)
    dropped: DropCounts
    forced: bool = False
    differences: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.at_a)

    @cached_property
    def items(self) -> pd.DataFrame:
        return _side_by_side(self.a_items.iloc[self.at_a], self.b_items.iloc[self.at_b])

    def values(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """One column of A's and of B's items on the paired items, as aligned arrays."""
        return self.a_items[column].to_numpy()[self.at_a], self.b_items[column].to_numpy()[self.at_b]

    def correct(self) -> tuple[np.ndarray, np.ndarray]:
        """Correctness of A and of B on the paired items, as aligned boolean arrays."""
        a, b = self.values("correct")
        return np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)


# --- pairing ---------------------------------------------------------------


def pair_runs(
    a_items: pd.DataFrame, b_items: pd.DataFrame, a_info: RunInfo, b_info: RunInfo, force: bool = False,
    arrays: tuple[RunArrays, RunArrays] | None = None,
) -> Paired:
    """Join two runs on the items both answered, refusing incomparable runs.

    Raises `PairingError` when the runs are on different tasks or no item
    pairs, and `SettingsMismatch` when template, mode or decoding differ and
    `force` is false. `arrays`, the two runs' `RunArrays` when the caller
    already has them, spares converting the frames again.
    """
    if a_info.task != b_info.task:
        raise PairingError(f"{a_info.label} is on task '{a_info.task}' but {b_info.label} is on '{b_info.task}'")
    differences = settings_differences(a_info, b_info)
    if differences and not force:
        raise SettingsMismatch(_mismatch_message(a_info, b_info, differences), differences)
    at_a, at_b, dropped = match_arrays(*arrays) if arrays else match_items(a_items, b_items)
    if not len(at_a):
        raise PairingError(
            f"{a_info.label} and {b_info.label} share no error-free item with the same content "
            f"(dropped: {format_drops(dropped)})"
        )
    return Paired(a_info, b_info, a_items, b_items, at_a, at_b, dropped, forced=bool(differences),
                  differences=differences)


def settings_differences(a_info: RunInfo, b_info: RunInfo) -> tuple[str, ...]:
    """Human-readable list of prompt and decoding settings that differ."""
    found = []
    if a_info.template != b_info.template:
        found.append(f"prompt template ({a_info.template!r} vs {b_info.template!r})")
    if a_info.mode != b_info.mode:
        found.append(f"mode ({a_info.mode!r} vs {b_info.mode!r})")
    if a_info.isolation != b_info.isolation:
        found.append(f"sandbox isolation ({a_info.isolation!r} vs {b_info.isolation!r})")
    for key in sorted(set(a_info.decoding) | set(b_info.decoding)):
        value_a = a_info.decoding.get(key, "unset")
        value_b = b_info.decoding.get(key, "unset")
        if value_a != value_b:
            found.append(f"decoding {key} ({value_a!r} vs {value_b!r})")
    return tuple(found)


def _mismatch_message(a_info: RunInfo, b_info: RunInfo, differences: tuple[str, ...]) -> str:
    return (
        f"{a_info.label} and {b_info.label} differ in {'; '.join(differences)}, so accuracy differences "
        "would mix the optimization with the settings; use --force to compare them anyway"
    )


def format_drops(dropped: DropCounts) -> str:
    """Dropped counts in words, e.g. '3 missing in B, 1 error in A'."""
    labels = {
        "missing_in_a": "missing in A", "missing_in_b": "missing in B",
        "error_in_a": "error in A", "error_in_b": "error in B", "hash_mismatch": "changed item content",
    }
    parts = [f"{count} {labels[name]}" for name, count in dropped.to_dict().items() if count]
    return ", ".join(parts) or "none"


def join_items(a_items: pd.DataFrame, b_items: pd.DataFrame) -> tuple[pd.DataFrame, DropCounts]:
    """Inner-join two items frames on `item_id`, keeping error-free items
    with equal `item_hash`, and count what was dropped and why.

    The kept rows come sorted by item id. Columns both frames carry get the
    suffixes `_a` and `_b`, except `item_hash` (equal on kept rows) and
    `reference` (taken from A).
    """
    at_a, at_b, dropped = match_items(a_items, b_items)
    return _side_by_side(a_items.iloc[at_a], b_items.iloc[at_b]), dropped


@dataclass(frozen=True, eq=False)
class RunArrays:
    """What pairing reads of one run's items frame, as arrays: made once when a run is paired several times."""

    ids: np.ndarray
    ok: np.ndarray
    hashes: np.ndarray

    @classmethod
    def of(cls, items: pd.DataFrame, name: str = "A") -> "RunArrays":
        """Raises `PairingError` when the frame lacks a column pairing needs or repeats an item id."""
        _check_items_frame(name, items)
        return cls(_objects(items["item_id"]), _objects(items["status"]) == "ok", _objects(items["item_hash"]))


def match_items(a_items: pd.DataFrame, b_items: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, DropCounts]:
    """Row positions in A and in B of the items `join_items` keeps, in item-id order, and the drop counts."""
    return match_arrays(RunArrays.of(a_items, "A"), RunArrays.of(b_items, "B"))


def match_arrays(a: RunArrays, b: RunArrays) -> tuple[np.ndarray, np.ndarray, DropCounts]:
    """`match_items` on runs already turned into arrays.

    Array work only: a ladder report pairs a hundred runs, and building a
    joined frame for each (a pandas merge) cost most of its time.
    """
    if len(a.ids) == len(b.ids) and np.array_equal(a.ids, b.ids) and _ascending(a.ids):
        at_a = at_b = np.arange(len(a.ids))  # the usual case: the same items, stored in id order
        n_common = len(a.ids)
    else:
        try:
            common, at_a, at_b = np.intersect1d(a.ids, b.ids, assume_unique=True, return_indices=True)
        except TypeError as exc:  # ids of types that do not sort together
            raise PairingError(f"item ids of the two runs cannot be matched: {exc}") from exc
        n_common = len(common)
    error_a = ~a.ok[at_a]
    error_b = ~error_a & ~b.ok[at_b]
    usable = ~error_a & ~error_b
    mismatch = usable & ~_same(a.hashes[at_a], b.hashes[at_b])
    dropped = DropCounts(
        len(b.ids) - n_common, len(a.ids) - n_common, int(error_a.sum()), int(error_b.sum()), int(mismatch.sum())
    )
    keep = usable & ~mismatch
    return at_a[keep], at_b[keep], dropped


def _ascending(ids: np.ndarray) -> bool:
    """True when the ids are strictly increasing (sorted and distinct)."""
    try:
        return bool(np.all(ids[1:] > ids[:-1]))
    except TypeError:
        return False


def _objects(column: pd.Series) -> np.ndarray:
    """A column as Python objects, missing values as None."""
    return column.to_numpy(dtype=object, na_value=None)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise equality where a missing value equals nothing, as in pandas."""
    present = ~(pd.isna(a) | pd.isna(b))
    same = np.zeros(len(a), dtype=bool)
    same[present] = a[present] == b[present]
    return same


def _check_items_frame(name: str, frame: pd.DataFrame) -> None:
    missing = [column for column in _REQUIRED_COLUMNS if column not in frame.columns]
    if missing:
        raise PairingError(f"items frame of run {name} lacks columns: {', '.join(missing)}")
    if frame["item_id"].is_unique:
        return
    duplicated = frame["item_id"][frame["item_id"].duplicated()]
    if not duplicated.empty:
        raise PairingError(f"items frame of run {name} has repeated item ids, e.g. {duplicated.iloc[0]!r}")


def _side_by_side(a_rows: pd.DataFrame, b_rows: pd.DataFrame) -> pd.DataFrame:
    """Aligned rows of A and B as one frame, shared columns suffixed."""
    shared = (set(a_rows.columns) & set(b_rows.columns)) - {"item_id"}
    a_part = a_rows.reset_index(drop=True).rename(columns={c: f"{c}_a" for c in shared})
    b_part = b_rows.drop(columns=["item_id"]).reset_index(drop=True).rename(columns={c: f"{c}_b" for c in shared})
    tidy = pd.concat([a_part, b_part], axis=1)
    tidy = tidy.rename(columns={"item_hash_a": "item_hash"}).drop(columns=["item_hash_b"])
    if "reference_a" in tidy.columns:
        tidy = tidy.rename(columns={"reference_a": "reference"})
    tidy["correct_a"] = tidy["correct_a"].astype(bool)
    tidy["correct_b"] = tidy["correct_b"].astype(bool)
    return tidy


def align_steps(items_frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Correctness of the items every run answered without error, with the
    same content in all runs: index item_id (sorted), one boolean column per run.

    The pairing rule is `match_arrays`'s: the first run is paired with every run
    (itself too, which drops its own errors) and an item stays when every pairing keeps it.
    """
    if not items_frames:
        raise ValueError("no runs to align")
    runs = [RunArrays.of(frame, str(position)) for position, frame in enumerate(items_frames)]
    matches = [match_arrays(runs[0], run)[:2] for run in runs]
    kept = reduce(np.intersect1d, [at_first for at_first, _ in matches])  # row positions in the first run
    kept = kept[np.argsort(runs[0].ids[kept], kind="stable")]  # in item-id order
    columns = {}
    for position, (frame, (at_first, at_run)) in enumerate(zip(items_frames, matches)):
        order = np.argsort(at_first)
        rows = at_run[order][np.searchsorted(at_first[order], kept)]
        columns[position] = np.asarray(frame["correct"].to_numpy()[rows], dtype=bool)
    return pd.DataFrame(columns, index=pd.Index(runs[0].ids[kept], name="item_id"))


# --- disagreements -----------------------------------------------------------

DISAGREEMENT_COLUMNS = (
    "item_id", "right", "extracted_a", "extracted_b", "reference",
    "completion_tokens_a", "completion_tokens_b", "reasoning_tokens_a", "reasoning_tokens_b",
)


def list_disagreements(paired: Paired) -> pd.DataFrame:
    """The items on which exactly one side was right, sorted by item id.

    Columns are `DISAGREEMENT_COLUMNS`; `right` is 'A' or 'B'. A column whose
    source is absent from the items frames is filled with None.
    """
    items = paired.items
    differs = items[items["correct_a"] != items["correct_b"]].reset_index(drop=True)
    out = pd.DataFrame({"item_id": differs["item_id"], "right": np.where(differs["correct_a"], "A", "B")})
    for column in DISAGREEMENT_COLUMNS[2:]:
        out[column] = differs[column] if column in differs.columns else None
    return out
