"""Comparisons, ladders and their renderings on hand-built runs."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.contingency_tables import cochrans_q as sm_cochrans_q
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.multitest import multipletests

from evalsvc.decision import compare
from evalsvc.decision.compare import LadderStep, StepRun
from evalsvc.decision.rule import Verdict
from evalsvc.report import accuracy_report
from evalsvc.statistics.paired_tests import Table2x2
from evalsvc.statistics.pairing import RunInfo, SettingsMismatch
from tests.evalsvc.frames import items_frame


def outcomes(table: Table2x2) -> tuple[list[bool], list[bool]]:
    """Per-item correctness of A and B realising a 2x2 table."""
    a = [True] * table.both_correct + [True] * table.a_only + [False] * table.b_only + [False] * table.neither
    b = [True] * table.both_correct + [False] * table.a_only + [True] * table.b_only + [False] * table.neither
    return a, b


def run_frame(correct: list[bool], run: RunInfo, extra: Sequence[tuple[str, str, bool]] = ()) -> pd.DataFrame:
    """Items frame with item ids i000.. for `correct`, then `extra` rows
    given as (item_id, status, correct)."""
    rows = [(f"i{k:03d}", "ok", value) for k, value in enumerate(correct)] + list(extra)
    return items_frame([(item, f"h-{item}", status, value) for item, status, value in rows], run.run_id,
                       run.endpoint, run.task, extracted="x", reference="x", completion_tokens=10, prompt_tokens=5,
                       latency_s=0.5)


def run_info(run_id: int, endpoint: str, task: str = "gsm8k", **decoding: object) -> RunInfo:
    return RunInfo(run_id, endpoint, task, "cot-v1", {"temperature": 0.0, **decoding}, mode="chat")


def compare_table(table: Table2x2, task: str = "gsm8k", **options: object) -> compare.Comparison:
    a, b = outcomes(table)
    info_a, info_b = run_info(1, "bf16", task), run_info(2, "awq", task)
    return compare.compare_runs(run_frame(a, info_a), run_frame(b, info_b), info_a, info_b, **options)


# --- one comparison ---------------------------------------------------------------

JSON_KEYS = {
    "n_paired", "both_correct", "a_only", "b_only", "neither", "p_exact", "p_midp", "p_chi2", "diff",
    "diff_ci_low", "diff_ci_high", "verdict", "mde", "acc_a", "acc_b", "dropped", "forced", "differences",
    "noise_floor", "flip_rate", "margin", "task", "endpoint_a", "endpoint_b", "run_a", "run_b", "settle",
    "isolation",
}


def test_comparison_figures_and_json() -> None:
    table = Table2x2(both_correct=50, a_only=10, b_only=1, neither=19)
    result = compare_table(table).to_dict()
    assert set(result) == JSON_KEYS
    assert (result["n_paired"], result["both_correct"], result["a_only"], result["b_only"], result["neither"]) == (
        80, 50, 10, 1, 19,
    )
    layout = np.array([[50, 10], [1, 19]])
    assert result["p_exact"] == pytest.approx(sm_mcnemar(layout, exact=True).pvalue)
    assert result["p_chi2"] == pytest.approx(sm_mcnemar(layout, exact=False, correction=True).pvalue)
    assert result["acc_a"] == pytest.approx(60 / 80)
    assert result["acc_b"] == pytest.approx(51 / 80)
    assert result["diff"] == pytest.approx(-9 / 80)
    assert result["verdict"] == "worse"
    assert result["noise_floor"] is None
    assert json.loads(json.dumps(result)) == result


def test_margin_is_configurable() -> None:
    table = Table2x2(both_correct=361, a_only=3, b_only=4, neither=33)  # 95% CI about -1.3 to +1.8 points
    assert compare_table(table).verdict is Verdict.SAME
    assert compare_table(table, margin=0.015).verdict is Verdict.NO_WORSE
    assert compare_table(table, margin=0.01).verdict is Verdict.INCONCLUSIVE


def test_refusal_and_forced_comparison() -> None:
    a, b = outcomes(Table2x2(10, 1, 1, 3))
    info_a, info_b = run_info(1, "bf16"), run_info(2, "awq", temperature=0.6)
    with pytest.raises(SettingsMismatch):
        compare.compare_runs(run_frame(a, info_a), run_frame(b, info_b), info_a, info_b)
    forced = compare.compare_runs(run_frame(a, info_a), run_frame(b, info_b), info_a, info_b, force=True)
    assert forced.forced
    assert forced.to_dict()["differences"] == ["decoding temperature (0.0 vs 0.6)"]
    assert "Pairing was forced although the runs differ in decoding temperature (0.0 vs 0.6)." in (
        accuracy_report.describe_comparison(forced)
    )


def test_noise_floor_sentences() -> None:
    # 11 discordant of 80 with a 20% flip rate: within noise either way.
    lopsided = compare_table(Table2x2(50, 10, 1, 19), flip_rate=0.20)
    balanced = compare_table(Table2x2(50, 6, 5, 19), flip_rate=0.20)
    assert lopsided.noise_floor and balanced.noise_floor
    assert "the verdict stands" in accuracy_report.describe_comparison(lopsided)
    assert "The 11 disagreements are no more than run-to-run noise makes (flip rate 20.0%" in (
        accuracy_report.describe_comparison(balanced))
    assert compare_table(Table2x2(50, 6, 5, 19), flip_rate=0.01).noise_floor is False


def test_no_discordant_pairs_detect_no_difference() -> None:
    result = compare_table(Table2x2(70, 0, 0, 30))
    assert (result.p_exact, result.p_midp, result.p_chi2, result.diff) == (1.0, 1.0, 1.0, 0.0)
    assert result.mde is None
    assert "With 100 items, of which no item was answered differently, the test detects no difference" in (
        accuracy_report.describe_comparison(result))


def test_mde_beyond_the_disagreement_rate_is_none() -> None:
    # 164 items, 1 disagreement: Connor's MDE (about 1.7 points) exceeds the 0.6 points one disagreement can show.
    assert compare_table(Table2x2(120, 1, 0, 43), task="humaneval").mde is None
    # 400 items, 40 disagreements: by hand, sqrt(0.1) (1.95996 * 20 + 0.84162 * sqrt(396.867)) / 400.708
    # = 0.04417, below the 10% disagreement rate, so reported.
    assert compare_table(Table2x2(300, 20, 20, 60)).mde == pytest.approx(0.04417, abs=5e-5)


def test_164_identical_answers_say_which_margin_they_can_establish() -> None:
    result = compare_table(Table2x2(164, 0, 0, 0), task="humaneval")
    assert result.verdict is Verdict.INCONCLUSIVE and result.settle is not None
    assert result.settle.best_margin == pytest.approx(-result.diff_ci_low) and result.settle.best_margin > 0.02
    sentence = accuracy_report.describe_comparison(result)
    assert "164 items can never establish 2.0 points" in sentence and "--margin humaneval=2.3" in sentence
    assert compare_table(Table2x2(164, 0, 0, 0), task="humaneval", margin=0.023).verdict is Verdict.SAME


def test_more_gsm8k_items_settle_an_inconclusive_pair() -> None:
    result = compare_table(Table2x2(380, 6, 4, 10))  # 400 items, 95% CI -2.4 to +1.3 points
    assert result.verdict is Verdict.INCONCLUSIVE and result.settle is not None
    needed = result.settle.items_needed
    assert needed is not None and 400 < needed <= 1319
    scaled = Table2x2(round(380 * needed / 400), round(6 * needed / 400), round(4 * needed / 400), 0)
    scaled = scaled._replace(neither=needed - scaled.both_correct - scaled.a_only - scaled.b_only)
    assert compare_table(scaled).verdict is not Verdict.INCONCLUSIVE
    assert f"about {needed} items at the observed rates would settle it" in accuracy_report.describe_comparison(result)


# --- rendering: exact output -------------------------------------------------------


def rendering_case() -> list[compare.Comparison]:
    first = compare_table(Table2x2(both_correct=361, a_only=3, b_only=4, neither=33))
    a, b = outcomes(Table2x2(both_correct=12, a_only=1, b_only=5, neither=2))
    info_a, info_b = run_info(3, "bf16", "humaneval"), run_info(4, "awq", "humaneval")
    a_items = run_frame(a, info_a, [("i900", "error", False), ("i901", "ok", True)])
    b_items = run_frame(b, info_b, [("i900", "ok", True)])
    return [first, compare.compare_runs(a_items, b_items, info_a, info_b)]


# Hand-worked figures. gsm8k: 364/401 = 90.8%, 365/401 = 91.0%, diff 1/401; p exact
# min(1, 2 P(X <= 3 | 7)) = 1; mid-p 1 - 35/128 = 0.727. humaneval: 13/20, 17/20,
# diff 4/20; p exact 2 * 7/64 = 0.219; mid-p 8/64 = 0.125; MDE for n = 20,
# psi = 0.3 is 32.3 points, more than the 30 points the 6 disagreements could show, so "none" (as for
# gsm8k: 1.8 points needed, 7/401 = 1.7 possible). Intervals from Newcombe's method 10 by hand; verdicts
# by the rule: gsm8k's interval holds 0 inside (-2, +2), humaneval's reaches from -5.2 to above 0.
EXPECTED_TEXT = """\
task       A     B      n  both  A only  B only  neither  acc A  acc B    B-A         95% CI  p exact  p mid-p   MDE  verdict
---------  ----  ---  ---  ----  ------  ------  -------  -----  -----  -----  -------------  -------  -------  ----  -------------------------------------
gsm8k      bf16  awq  401   361       3       4       33  90.8%  91.0%   +0.2   -1.3 to +1.8    1.000    0.727  none  no change beyond the margin (2.0 pts)
humaneval  bf16  awq   20    12       1       5        2  65.0%  85.0%  +20.0  -5.2 to +42.6    0.219    0.125  none  inconclusive

B-A, CI and MDE in accuracy points; MDE at 80% power (none: these items detect no difference). Verdicts read the 95% CI against the margin (the rule: `evalsvc compare --help`).

gsm8k, awq vs bf16: No change beyond the margin of 2.0 points: accuracy changed by +0.2 points (95% CI -1.3 to +1.8 points; exact McNemar p = 1.000). With 401 items, of which the runs disagree on only 7, the test detects no difference with 80% power.
humaneval, awq vs bf16: Inconclusive: the interval reaches from a drop of 2.0 points or more to no drop at all: accuracy changed by +20.0 points (95% CI -5.2 to +42.6 points; exact McNemar p = 0.219). What would settle it: these 20 items establish a margin of 5.2 points; about 22 items at the observed rates would settle it at a 2.0-point margin (--limit 22 reuses the stored items). With 20 items, of which the runs disagree on only 6, the test detects no difference with 80% power. 2 items were left out (1 missing in B, 1 error in A).
"""

EXPECTED_MARKDOWN = """\
| task | A | B | n | both | A only | B only | neither | acc A | acc B | B-A | 95% CI | p exact | p mid-p | MDE | verdict |
| :--- | :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |
| gsm8k | bf16 | awq | 401 | 361 | 3 | 4 | 33 | 90.8% | 91.0% | +0.2 | -1.3 to +1.8 | 1.000 | 0.727 | none | no change beyond the margin (2.0 pts) |
| humaneval | bf16 | awq | 20 | 12 | 1 | 5 | 2 | 65.0% | 85.0% | +20.0 | -5.2 to +42.6 | 0.219 | 0.125 | none | inconclusive |

B-A, CI and MDE in accuracy points; MDE at 80% power (none: these items detect no difference). Verdicts read the 95% CI against the margin (the rule: `evalsvc compare --help`).

- gsm8k, awq vs bf16: No change beyond the margin of 2.0 points: accuracy changed by +0.2 points (95% CI -1.3 to +1.8 points; exact McNemar p = 1.000). With 401 items, of which the runs disagree on only 7, the test detects no difference with 80% power.
- humaneval, awq vs bf16: Inconclusive: the interval reaches from a drop of 2.0 points or more to no drop at all: accuracy changed by +20.0 points (95% CI -5.2 to +42.6 points; exact McNemar p = 0.219). What would settle it: these 20 items establish a margin of 5.2 points; about 22 items at the observed rates would settle it at a 2.0-point margin (--limit 22 reuses the stored items). With 20 items, of which the runs disagree on only 6, the test detects no difference with 80% power. 2 items were left out (1 missing in B, 1 error in A).
"""


def test_render_text_exactly() -> None:
    assert accuracy_report.render_comparisons_text(rendering_case()) == EXPECTED_TEXT


def test_render_markdown_exactly() -> None:
    assert accuracy_report.render_comparisons_markdown(rendering_case()) == EXPECTED_MARKDOWN


@pytest.mark.parametrize(
    ("table", "start"),
    [
        (Table2x2(50, 12, 1, 18), "B is worse than A, and may be worse by the margin of 2.0 points or more: "
                                  "accuracy changed by -13.6 points (95% CI"),
        (Table2x2(50, 1, 12, 18), "B is better than A: accuracy changed by +13.6 points (95% CI"),
    ],
)
def test_significant_sentences(table: Table2x2, start: str) -> None:
    sentence = accuracy_report.describe_comparison(compare_table(table))
    assert sentence.startswith(f"gsm8k, awq vs bf16: {start}")
    assert "exact McNemar p = 0.003)." in sentence  # 2 * 14 / 8192 = 0.0034


# --- ladders -------------------------------------------------------------------------


def test_ladder_pairs() -> None:
    assert compare.ladder_pairs(1, 0) == []
    assert compare.ladder_pairs(3, 0) == [(0, 1, "previous"), (1, 2, "previous"), (0, 2, "baseline")]
    assert compare.ladder_pairs(4, 2) == [
        (0, 1, "previous"), (1, 2, "previous"), (2, 3, "previous"), (2, 0, "baseline"),
    ]


def ladder_fixture() -> tuple[list[LadderStep], dict[str, np.ndarray]]:
    """Three steps on gsm8k (200 items), humaneval only on the first and last."""
    rng = np.random.default_rng(21)
    base = rng.random(200) < 0.7
    quant = base.copy()
    quant[np.flatnonzero(base)[:9]] = False  # 9 right -> wrong
    quant[np.flatnonzero(~base)[0]] = True  # 1 wrong -> right
    spec = quant.copy()  # speculative decoding: identical answers
    truth = {"bf16": base, "awq": quant, "eagle": spec}
    steps = []
    for run_id, (name, correct) in enumerate(truth.items(), start=1):
        runs = [StepRun(run_info(run_id, name), run_frame(list(correct), run_info(run_id, name)))]
        if name != "awq":
            he_info = run_info(10 + run_id, name, "humaneval")
            runs.append(StepRun(he_info, run_frame([k % 3 != 0 for k in range(30)], he_info)))
        steps.append(LadderStep(name, tuple(runs)))
    return steps, truth


def test_ladder_report_entries_holm_and_cochran() -> None:
    steps, truth = ladder_fixture()
    report = compare.build_ladder_report(steps)
    described = [(e.comparison.task, e.step_a, e.step_b, e.kind) for e in report.entries]
    assert described == [
        ("gsm8k", "bf16", "awq", "previous"), ("gsm8k", "awq", "eagle", "previous"),
        ("gsm8k", "bf16", "eagle", "baseline"), ("humaneval", "bf16", "eagle", "baseline"),
    ]
    raw = [e.comparison.p_exact for e in report.entries]
    assert raw[0] == pytest.approx(2 * 11 / 1024)  # 9 vs 1 discordant: 2 P(X <= 1 | 10)
    assert [e.p_holm for e in report.entries] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    matrix = np.column_stack([truth["bf16"], truth["awq"], truth["eagle"]]).astype(int)
    expected = sm_cochrans_q(matrix)
    assert report.cochran["gsm8k"].statistic == pytest.approx(expected.statistic)
    assert report.cochran["gsm8k"].p_value == pytest.approx(expected.pvalue)
    assert report.cochran["humaneval"].p_value == 1.0  # identical answers: Q = 0


def test_ladder_verdicts_are_the_pairs_own_and_holm_is_information() -> None:
    steps, _ = ladder_fixture()
    first = steps[0].runs[0], steps[1].runs[0]
    alone = compare.compare_runs(first[0].items, first[1].items, first[0].info, first[1].info)
    entry = compare.build_ladder_report(steps).entries[0]
    assert entry.p_holm == pytest.approx(4 * 2 * 11 / 1024)  # smallest of four p-values
    assert entry.comparison.verdict is alone.verdict is Verdict.WORSE  # 95% CI -7.0 to -0.7 points
    text = accuracy_report.render_ladder_text(compare.build_ladder_report(steps))
    assert "Holm-adjusted p = 0.086 (information only)" in text and "not adjusted for multiplicity" in text


def test_ladder_baseline_and_flip_rates() -> None:
    steps, _ = ladder_fixture()
    rates = {("bf16", "gsm8k"): 0.02, ("awq", "gsm8k"): 0.06, ("bf16", "humaneval"): 0.5}
    report = compare.build_ladder_report(steps, baseline="awq", flip_rates=rates)
    assert report.baseline == "awq"
    gsm8k = [e for e in report.entries if e.comparison.task == "gsm8k"]
    assert [(e.step_a, e.step_b, e.kind) for e in gsm8k] == [
        ("bf16", "awq", "previous"), ("awq", "eagle", "previous"),
    ]
    assert gsm8k[0].comparison.flip_rate == pytest.approx(0.04)
    assert gsm8k[1].comparison.flip_rate == pytest.approx(0.06)


def test_ladder_renderings() -> None:
    steps, _ = ladder_fixture()
    report = compare.build_ladder_report(steps)
    text = accuracy_report.render_ladder_text(report).splitlines()
    assert text[0].split() == [
        "task", "step", "A", "step", "B", "vs", "n", "A", "only", "B", "only", "B-A", "95%", "CI",
        "p", "exact", "p", "Holm", "MDE", "verdict",
    ]
    assert text[2].split()[:7] == ["gsm8k", "bf16", "awq", "previous", "200", "9", "1"]
    assert len([line for line in text if line.startswith(("gsm8k ", "humaneval "))]) == 4
    markdown = accuracy_report.render_ladder_markdown(report)
    assert "| humaneval | bf16 | eagle | baseline | 30 | 0 | 0 | +0.0 |" in markdown
    assert "- Cochran's Q (humaneval, 2 steps, 30 items every step answered): Q = 0.00, df = 1, p = 1.000" in markdown
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["steps"] == ["bf16", "awq", "eagle"]
    assert len(as_json["comparisons"]) == 4
    assert as_json["comparisons"][0]["p_holm"] == pytest.approx(report.entries[0].p_holm)
    assert as_json["cochran_q"]["gsm8k"]["df"] == 2


def test_ladder_rejects_repeated_step_names() -> None:
    steps, _ = ladder_fixture()
    with pytest.raises(ValueError, match="repeat"):
        compare.build_ladder_report([steps[0], steps[0]])
