"""Paired statistics checked against statsmodels, scipy and hand-worked tables."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import cochrans_q as sm_cochrans_q
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from evalsvc.statistics import paired_tests
from evalsvc.statistics import pairing
from evalsvc.statistics.paired_tests import Table2x2
from evalsvc.statistics.pairing import DropCounts, PairingError, RunInfo, SettingsMismatch
from tests.evalsvc.frames import items_frame


def random_tables(count: int, seed: int) -> list[Table2x2]:
    """Seeded tables of mixed sizes, from a handful of items to a thousand."""
    rng = np.random.default_rng(seed)
    tables = []
    for _ in range(count):
        n = int(rng.choice([1, 5, 20, 80, 400, 1000]))
        cells = rng.multinomial(n, rng.dirichlet([1.0, 1.0, 1.0, 1.0]))
        tables.append(Table2x2(*(int(cell) for cell in cells)))
    return tables


def sm_table(table: Table2x2) -> np.ndarray:
    """statsmodels layout: rows A right/wrong, columns B right/wrong."""
    return np.array([[table.both_correct, table.a_only], [table.b_only, table.neither]])


def info(run_id: int, endpoint: str, template: str = "cot-v1", **decoding: object) -> RunInfo:
    settings = {"temperature": 0.0, "max_tokens": 2048, **decoding}
    return RunInfo(run_id, endpoint, "gsm8k", template, settings, mode="chat")


# --- McNemar -------------------------------------------------------------------


def test_exact_p_matches_statsmodels_on_random_tables() -> None:
    for table in random_tables(300, seed=6):
        expected = sm_mcnemar(sm_table(table), exact=True).pvalue
        exact = paired_tests.mcnemar_exact_p(table.a_only, table.b_only)
        assert exact == pytest.approx(expected, rel=1e-10, abs=1e-300)


def test_chi2_matches_statsmodels_when_sides_differ() -> None:
    checked = 0
    for table in random_tables(300, seed=7):
        if table.a_only == table.b_only:
            continue
        result = sm_mcnemar(sm_table(table), exact=False, correction=True)
        statistic, p_value = paired_tests.mcnemar_chi2(table.a_only, table.b_only)
        assert statistic == pytest.approx(result.statistic, rel=1e-12)
        assert p_value == pytest.approx(result.pvalue, rel=1e-9, abs=1e-300)
        checked += 1
    assert checked > 200


@pytest.mark.parametrize("count", [1, 2, 7, 40])
def test_chi2_is_zero_when_sides_tie(count: int) -> None:
    # The corrected |b - c| - 1 is floored at 0; statsmodels would report 1/(b+c).
    assert paired_tests.mcnemar_chi2(count, count) == (0.0, 1.0)


def test_midp_matches_hand_formula_on_random_tables() -> None:
    for table in random_tables(300, seed=8):
        n, k = table.discordant, table.a_only
        if n == 0:
            expected = 1.0
        else:
            tail = min(sps.binom.cdf(k - 1, n, 0.5), sps.binom.sf(k, n, 0.5))
            expected = min(1.0, 2 * tail + sps.binom.pmf(k, n, 0.5))
        assert paired_tests.mcnemar_midp(table.a_only, table.b_only) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_bentur_example_of_fagerland_2013() -> None:
    # Fagerland, Lydersen & Laake 2013: b = 1, c = 7 gives exact 0.070, mid-p 0.039.
    # By hand: P(X <= 1) = 9/256 and P(X = 1) = 8/256 for X ~ Bin(8, 1/2).
    result = paired_tests.mcnemar(Table2x2(1, 1, 7, 12))
    assert result.p_exact == pytest.approx(float(Fraction(18, 256)), rel=1e-12)
    assert result.p_midp == pytest.approx(float(Fraction(10, 256)), rel=1e-12)
    assert result.chi2 == pytest.approx(25 / 8)
    assert round(result.p_exact, 3) == 0.070
    assert round(result.p_midp, 3) == 0.039


def test_no_discordant_pairs_gives_p_one() -> None:
    result = paired_tests.mcnemar(Table2x2(30, 0, 0, 12))
    assert (result.p_exact, result.p_midp, result.p_chi2) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize("k", [1, 3, 10, 25])
def test_all_discordant_one_way(k: int) -> None:
    exact = 2 * 0.5**k
    for a_only, b_only in ((k, 0), (0, k)):
        result = paired_tests.mcnemar(Table2x2(5, a_only, b_only, 5))
        assert result.p_exact == pytest.approx(min(1.0, exact), rel=1e-12)
        assert result.p_midp == pytest.approx(min(1.0, exact - 0.5**k), rel=1e-12)
        expected_chi2 = sm_mcnemar(np.array([[5, a_only], [b_only, 5]]), exact=False, correction=True)
        assert result.p_chi2 == pytest.approx(expected_chi2.pvalue, rel=1e-9)


def test_single_item_tables() -> None:
    assert paired_tests.mcnemar(Table2x2(1, 0, 0, 0)).p_exact == 1.0
    one_discordant = paired_tests.mcnemar(Table2x2(0, 0, 1, 0))
    assert one_discordant.p_exact == 1.0
    assert one_discordant.p_midp == pytest.approx(0.5)  # 2 * 1/2 - 1/2
    assert one_discordant.p_chi2 == 1.0


def test_midp_never_exceeds_exact() -> None:
    for table in random_tables(200, seed=9):
        result = paired_tests.mcnemar(table)
        assert result.p_midp <= result.p_exact + 1e-15


# --- paired difference interval -------------------------------------------------


def wilson_by_roots(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson limits as the roots of (p_hat - p)^2 = z^2 p (1 - p) / n."""
    p_hat = successes / n
    coefficients = [1 + z * z / n, -(2 * p_hat + z * z / n), p_hat * p_hat]
    roots = sorted(np.roots(coefficients).real)
    return roots[0], roots[1]


def newcombe_reference(both: int, a_only: int, b_only: int, neither: int) -> tuple[float, float]:
    """Newcombe 1998 method 10, written from the paper's notation (a, b, c, d)
    with the first proportion = B's accuracy, for comparison."""
    a, b, c, d = both, b_only, a_only, neither
    n = a + b + c + d
    z = sps.norm.ppf(0.975)
    p1, p2 = (a + b) / n, (a + c) / n
    l2, u2 = wilson_by_roots(a + b, n, z)
    l3, u3 = wilson_by_roots(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    if margins == 0 or 0 <= cross <= n / 2:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    else:
        phi = cross / math.sqrt(margins)
    delta = math.sqrt(max(0.0, (p1 - l2) ** 2 - 2 * phi * (p1 - l2) * (u3 - p2) + (u3 - p2) ** 2))
    epsilon = math.sqrt(max(0.0, (u2 - p1) ** 2 - 2 * phi * (u2 - p1) * (p2 - l3) + (p2 - l3) ** 2))
    theta = p1 - p2
    return max(-1.0, theta - delta), min(1.0, theta + epsilon)


def test_newcombe_matches_published_cavo_example() -> None:
    # Fagerland, Lydersen & Laake (2017), ch. 8, Cavo et al. 2012: table
    # [[59, 6], [16, 80]] gives -0.0621 (95% CI -0.1186 to -0.0046).
    result = paired_tests.paired_diff_ci(Table2x2(both_correct=59, a_only=16, b_only=6, neither=80))
    assert (round(result.diff, 4), round(result.low, 4), round(result.high, 4)) == (-0.0621, -0.1186, -0.0046)


def test_newcombe_matches_reference_on_random_tables() -> None:
    for table in random_tables(300, seed=10):
        low, high = newcombe_reference(*table)
        result = paired_tests.paired_diff_ci(table)
        assert (result.low, result.high) == pytest.approx((low, high), abs=1e-9)


def test_newcombe_interval_is_sane() -> None:
    extremes = [Table2x2(0, 1, 0, 0), Table2x2(0, 0, 1, 0), Table2x2(0, 30, 0, 0), Table2x2(40, 0, 0, 0)]
    for table in random_tables(300, seed=11) + extremes:
        result = paired_tests.paired_diff_ci(table)
        assert -1.0 <= result.low <= result.diff <= result.high <= 1.0
        assert result.high > result.low
        assert result.diff == pytest.approx((table.b_only - table.a_only) / table.n)


def test_newcombe_swapping_sides_mirrors_the_interval() -> None:
    for table in random_tables(100, seed=12):
        forward = paired_tests.paired_diff_ci(table)
        swapped = paired_tests.paired_diff_ci(Table2x2(table.both_correct, table.b_only, table.a_only, table.neither))
        assert (swapped.low, swapped.high) == pytest.approx((-forward.high, -forward.low), abs=1e-12)


def test_newcombe_coverage_is_near_nominal() -> None:
    rng = np.random.default_rng(13)
    probabilities = [0.60, 0.08, 0.04, 0.28]  # both, a_only, b_only, neither
    truth = probabilities[2] - probabilities[1]
    draws = rng.multinomial(150, probabilities, size=2000)
    covered = 0
    for cells in draws:
        result = paired_tests.paired_diff_ci(Table2x2(*(int(cell) for cell in cells)))
        covered += result.low <= truth <= result.high
    assert 0.925 <= covered / len(draws) <= 0.975


def test_empty_table_has_no_interval() -> None:
    with pytest.raises(ValueError):
        paired_tests.paired_diff_ci(Table2x2(0, 0, 0, 0))


# --- detectable difference --------------------------------------------


def connor_n(delta: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Connor 1987 sample size for McNemar's test."""
    z_a, z_b = sps.norm.ppf(1 - alpha / 2), sps.norm.ppf(power)
    return (z_a * math.sqrt(psi) + z_b * math.sqrt(psi - delta**2)) ** 2 / delta**2


def mde_80(n: int, psi: float) -> float:
    """The MDE at the verdicts' 5% two-sided level and 80% power (Connor's worked setting)."""
    return paired_tests.mde(n, psi, 0.05, 0.8)


def test_mde_hand_computed_value() -> None:
    # n = 400, psi = 0.10, z_a = 1.959964, z_b = 0.841621:
    # sqrt(0.1) * (1.959964 * 20 + 0.841621 * sqrt(400 - 3.841459 + 0.708326)) / (400 + 0.708326)
    # = 0.316228 * (39.199280 + 16.766367) / 400.708326 = 0.044167
    assert mde_80(400, 0.10) == pytest.approx(0.044167, abs=2e-6)


@pytest.mark.parametrize(("n", "psi"), [(100, 0.3), (400, 0.1), (1319, 0.06), (164, 0.2)])
def test_mde_solves_connor_formula(n: int, psi: float) -> None:
    assert connor_n(mde_80(n, psi), psi) == pytest.approx(n, rel=1e-9)


def test_mde_shrinks_with_more_items() -> None:
    assert mde_80(1600, 0.1) < mde_80(400, 0.1) < mde_80(100, 0.1)


def test_mde_has_about_eighty_percent_power_by_simulation() -> None:
    n, psi = 400, 0.15
    delta = mde_80(n, psi)
    rng = np.random.default_rng(14)
    discordant = rng.binomial(n, psi, size=4000)
    b_only = rng.binomial(discordant, (psi + delta) / (2 * psi))
    a_only = discordant - b_only
    p_values = np.minimum(1.0, 2 * sps.binom.cdf(np.minimum(a_only, b_only), discordant, 0.5))
    power = float(np.mean(p_values < 0.05))
    assert 0.70 <= power <= 0.88  # the exact test is a little conservative


@pytest.mark.parametrize(("n", "psi"), [(0, 0.1), (100, 0.0), (100, 1.5)])
def test_mde_rejects_impossible_inputs(n: int, psi: float) -> None:
    with pytest.raises(ValueError):
        mde_80(n, psi)


# --- ladders -----------------------------------------------------------------------


def test_holm_matches_statsmodels() -> None:
    rng = np.random.default_rng(15)
    cases = [list(rng.uniform(0, 0.2, size=m)) for m in (1, 2, 5, 12)]
    cases += [[0.01, 0.01, 0.04, 1.0], [1.0, 1.0], [0.0, 0.5, 0.02]]
    for p_values in cases:
        expected = multipletests(p_values, method="holm")[1]
        assert paired_tests.holm_adjust(p_values) == pytest.approx(list(expected), abs=1e-15)


def test_cochran_q_matches_statsmodels() -> None:
    rng = np.random.default_rng(16)
    for _ in range(100):
        n, k = int(rng.integers(5, 200)), int(rng.integers(2, 6))
        matrix = rng.random((n, k)) < rng.uniform(0.2, 0.9, size=k)
        if matrix.all(axis=1).sum() + (~matrix).all(axis=1).sum() == n:
            continue  # every row constant: statsmodels divides by zero
        expected = sm_cochrans_q(matrix.astype(int))
        result = paired_tests.cochran_q(matrix)
        assert result.statistic == pytest.approx(expected.statistic, rel=1e-10)
        assert result.p_value == pytest.approx(expected.pvalue, rel=1e-8, abs=1e-300)
        assert result.df == expected.df == k - 1


def test_cochran_q_with_two_steps_is_uncorrected_mcnemar() -> None:
    # Q for k = 2 reduces to (b - c)^2 / (b + c): here (9 - 3)^2 / 12 = 3.
    rows = [(1, 1)] * 20 + [(1, 0)] * 9 + [(0, 1)] * 3 + [(0, 0)] * 8
    result = paired_tests.cochran_q(np.array(rows))
    assert result.statistic == pytest.approx(3.0)
    assert result.p_value == pytest.approx(sps.chi2.sf(3.0, 1))
    assert result.n_items == 40


def test_cochran_q_when_no_item_separates_the_steps() -> None:
    result = paired_tests.cochran_q(np.array([[1, 1, 1], [0, 0, 0], [1, 1, 1]]))
    assert (result.statistic, result.df, result.p_value) == (0.0, 2, 1.0)


def test_align_steps_keeps_items_every_step_answered_alike() -> None:
    step1 = items_frame([("q1", "h1", "ok", True), ("q2", "h2", "ok", False), ("q3", "h3", "ok", True),
                         ("q4", "h4", "ok", True), ("q5", "h5", "ok", False)])
    step2 = items_frame([("q1", "h1", "ok", False), ("q2", "h2", "error", False), ("q3", "h3", "ok", True),
                         ("q5", "h5", "ok", True)])
    step3 = items_frame([("q1", "h1", "ok", True), ("q2", "h2", "ok", True), ("q3", "hX", "ok", True),
                         ("q4", "h4", "ok", True), ("q5", "h5", "ok", False)])
    aligned = pairing.align_steps([step1, step2, step3])
    assert list(aligned.index) == ["q1", "q5"]
    assert aligned.to_numpy().tolist() == [[True, False, True], [False, True, False]]


@pytest.mark.parametrize("seed", range(10))
def test_align_steps_agrees_with_plain_merges_on_random_runs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(4):
        ids = [f"q{i}" for i in rng.permutation(40) if rng.random() < 0.9]
        frames.append(items_frame([(item, f"h{item}" if rng.random() < 0.95 else "hX",
                                    "ok" if rng.random() < 0.9 else "error", bool(rng.random() < 0.5)) for item in ids]))
    expected = None
    for position, frame in enumerate(frames):
        ok = frame[frame["status"] == "ok"][["item_id", "item_hash", "correct"]]
        ok = ok.rename(columns={"correct": position, "item_hash": f"hash_{position}"})
        expected = ok if expected is None else expected.merge(ok, on="item_id")
    hashes = expected[[f"hash_{position}" for position in range(4)]]
    expected = expected[hashes.eq(hashes["hash_0"], axis=0).all(axis=1)].set_index("item_id")[list(range(4))]
    pd.testing.assert_frame_equal(pairing.align_steps(frames), expected.sort_index(), check_dtype=False,
                                  check_index_type=False, check_column_type=False)


# --- pairing ------------------------------------------------------------------------


def pairing_fixture() -> tuple[pd.DataFrame, pd.DataFrame]:
    a_items = items_frame([
        ("q1", "h1", "ok", True), ("q2", "h2", "ok", True), ("q3", "h3", "ok", False),
        ("q4", "h4", "error", False), ("q5", "h5", "ok", True), ("q6", "h6", "ok", True),
        ("q7", "h7", "error", False), ("q9", "h9", "ok", False),
    ], run_id=1, endpoint="bf16")
    b_items = items_frame([
        ("q1", "h1", "ok", True), ("q2", "h2", "ok", False), ("q3", "h3", "ok", True),
        ("q4", "h4", "ok", True), ("q5", "h5", "error", False), ("q6", "hX", "ok", True),
        ("q7", "h7", "error", False), ("q8", "h8", "ok", True), ("q9", "h9", "ok", False),
    ], run_id=2, endpoint="awq")
    return a_items, b_items


def test_pair_runs_counts_each_drop_reason() -> None:
    a_items, b_items = pairing_fixture()
    paired = pairing.pair_runs(a_items, b_items, info(1, "bf16"), info(2, "awq"))
    assert list(paired.items["item_id"]) == ["q1", "q2", "q3", "q9"]
    assert paired.dropped == DropCounts(missing_in_a=1, missing_in_b=0, error_in_a=2, error_in_b=1, hash_mismatch=1)
    assert paired.n + paired.dropped.total == 9
    assert not paired.forced
    assert paired_tests.paired_table(paired) == Table2x2(both_correct=1, a_only=1, b_only=1, neither=1)


def merge_reference(a_items: pd.DataFrame, b_items: pd.DataFrame) -> tuple[pd.DataFrame, DropCounts]:
    """The pairing rule written plainly with a pandas outer merge, to check the fast join against."""
    merged = a_items.merge(b_items, on="item_id", how="outer", suffixes=("_a", "_b"), indicator=True)
    both = merged["_merge"] == "both"
    error_a = both & (merged["status_a"] != "ok")
    error_b = both & ~error_a & (merged["status_b"] != "ok")
    usable = both & ~error_a & ~error_b
    mismatch = usable & (merged["item_hash_a"] != merged["item_hash_b"])
    dropped = DropCounts(int((merged["_merge"] == "right_only").sum()), int((merged["_merge"] == "left_only").sum()),
                         int(error_a.sum()), int(error_b.sum()), int(mismatch.sum()))
    kept = merged[usable & ~mismatch].drop(columns=["_merge", "item_hash_b"])
    kept = kept.rename(columns={"item_hash_a": "item_hash", "reference_a": "reference"})
    return kept.sort_values("item_id").reset_index(drop=True), dropped


@pytest.mark.parametrize("same_items", [False, True], ids=["shuffled-and-missing", "same-ids-in-order"])
@pytest.mark.parametrize("seed", range(20))
def test_join_items_agrees_with_a_plain_merge_on_random_runs(seed: int, same_items: bool) -> None:
    rng = np.random.default_rng(seed)

    def random_run(run_id: int) -> pd.DataFrame:
        if same_items:  # the usual ladder: every run has the same items, stored in id order
            ids = sorted(f"q{i:02d}" for i in range(60))
        else:
            ids = [f"q{i}" for i in rng.permutation(60) if rng.random() < 0.8]  # unsorted, some missing
        rows = [(item, f"h{item}" if rng.random() < 0.9 else "hX", "ok" if rng.random() < 0.85 else "error",
                 bool(rng.random() < 0.6)) for item in ids]
        return items_frame(rows, run_id=run_id, endpoint=f"ep{run_id}")

    a_items, b_items = random_run(1), random_run(2)
    joined, dropped = pairing.join_items(a_items, b_items)
    expected, expected_dropped = merge_reference(a_items, b_items)
    assert dropped == expected_dropped
    assert list(joined.columns) == list(expected.columns)
    pd.testing.assert_frame_equal(joined, expected, check_dtype=False)


def test_join_items_treats_a_missing_hash_as_changed_content() -> None:
    a_items = items_frame([("q1", "h1", "ok", True), ("q2", "h2", "ok", True)])
    b_items = items_frame([("q1", "h1", "ok", False), ("q2", "h2", "ok", True)])
    a_items.loc[1, "item_hash"] = None
    joined, dropped = pairing.join_items(a_items, b_items)
    assert list(joined["item_id"]) == ["q1"]
    assert dropped.hash_mismatch == 1


def test_pair_runs_refuses_different_settings_and_says_what_differs() -> None:
    a_items, b_items = pairing_fixture()
    with pytest.raises(SettingsMismatch) as caught:
        pairing.pair_runs(a_items, b_items, info(1, "bf16"), info(2, "awq", template="cot-v2", temperature=0.6))
    message = str(caught.value)
    assert "prompt template ('cot-v1' vs 'cot-v2')" in message
    assert "decoding temperature (0.0 vs 0.6)" in message
    assert "--force" in message
    assert len(caught.value.differences) == 2


def test_pair_runs_forced_records_the_differences() -> None:
    a_items, b_items = pairing_fixture()
    paired = pairing.pair_runs(a_items, b_items, info(1, "bf16"), info(2, "awq", seed=7), force=True)
    assert paired.forced
    assert paired.differences == ("decoding seed ('unset' vs 7)",)
    assert paired.n == 4


def test_pair_runs_never_pairs_different_tasks() -> None:
    a_items, b_items = pairing_fixture()
    other = RunInfo(2, "awq", "humaneval", "cot-v1", {"temperature": 0.0, "max_tokens": 2048}, mode="chat")
    with pytest.raises(PairingError, match="humaneval"):
        pairing.pair_runs(a_items, b_items, info(1, "bf16"), other, force=True)


def test_pair_runs_rejects_empty_and_duplicated_frames() -> None:
    a_items = items_frame([("q1", "h1", "error", False)])
    b_items = items_frame([("q1", "h1", "ok", True)])
    with pytest.raises(PairingError, match="1 error in A"):
        pairing.pair_runs(a_items, b_items, info(1, "bf16"), info(2, "awq"))
    duplicated = items_frame([("q1", "h1", "ok", True), ("q1", "h1", "ok", False)])
    with pytest.raises(PairingError, match="repeated item ids"):
        pairing.pair_runs(duplicated, b_items, info(1, "bf16"), info(2, "awq"))


def test_list_disagreements() -> None:
    a_items, b_items = pairing_fixture()
    paired = pairing.pair_runs(a_items, b_items, info(1, "bf16"), info(2, "awq"))
    table = pairing.list_disagreements(paired)
    assert list(table.columns) == list(pairing.DISAGREEMENT_COLUMNS)
    assert table[["item_id", "right", "extracted_a", "extracted_b", "reference"]].to_dict("records") == [
        {"item_id": "q2", "right": "A", "extracted_a": "bf16-q2", "extracted_b": "awq-q2", "reference": "ref-q2"},
        {"item_id": "q3", "right": "B", "extracted_a": "bf16-q3", "extracted_b": "awq-q3", "reference": "ref-q3"},
    ]
    assert table["completion_tokens_a"].tolist() == [101, 102]
    assert table["completion_tokens_b"].tolist() == [201, 202]


# --- repeatability --------------------------------------------------------------------


def test_flip_rate_counts_changed_items() -> None:
    run1 = items_frame([(f"q{i}", f"h{i}", "ok", i % 2 == 0) for i in range(10)])
    flipped = {1, 4, 7}
    rows = [(f"q{i}", f"h{i}", "ok", (i % 2 == 0) != (i in flipped)) for i in range(10)]
    rows[9] = ("q9", "h9", "error", False)
    run2 = items_frame(rows)
    result = paired_tests.flip_rate(run1, run2)
    assert (result.n_paired, result.flips) == (9, 3)
    assert result.rate == pytest.approx(1 / 3)


def test_noise_floor_flags_up_to_the_binomial_quantile() -> None:
    n, rate = 400, 0.04
    quantile = next(k for k in range(n + 1) if sps.binom.cdf(k, n, rate) >= 0.95)
    assert sps.binom.cdf(quantile - 1, n, rate) < 0.95
    assert paired_tests.within_noise_floor(quantile, n, rate)
    assert not paired_tests.within_noise_floor(quantile + 1, n, rate)
    assert paired_tests.within_noise_floor(0, n, 0.0)
    assert not paired_tests.within_noise_floor(1, n, 0.0)


@pytest.mark.slow
def test_statistics_do_not_import_the_cli_or_database() -> None:
    import subprocess
    import sys

    code = (
        "import sys, evalsvc.statistics.paired_tests; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('db', 'click', 'sqlalchemy', 'streamlit') "
        "or m in ('evalsvc.cli', 'evalsvc.report.accuracy_report')]; "
        "print(','.join(bad))"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert result.stdout.strip() == ""
