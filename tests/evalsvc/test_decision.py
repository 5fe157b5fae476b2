"""The verdict rule, per-workload decisions and which runs a ladder picks: pure parts, no store."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from evalsvc.decision import rule
from evalsvc.decision import compare
from evalsvc.decision.pick import AsideReason, RunRecord, pick_runs
from evalsvc.decision.rule import Verdict
from evalsvc.decision.workload import Choice, Reason, ReasonKind, decide_workload
from evalsvc.report import accuracy_report
from evalsvc.statistics import paired_tests
from evalsvc.statistics import pairing
from evalsvc.statistics.output_length import token_ratios
from evalsvc.statistics.task_time import compare_task_time
from tests.evalsvc.test_comparisons import compare_table
from tests.evalsvc.test_length_and_task_time import simulate

# --- the rule: never against the interval, monotone -------------------------------------


def expected_from_interval(low: float, high: float, m: float) -> Verdict:
    """The rule restated from the README, case by case, to check the code against."""
    if low > 0:
        return Verdict.BETTER
    if high < 0 and low > -m:
        return Verdict.WORSE_WITHIN
    if high < 0:
        return Verdict.WORSE
    if low <= -m:
        return Verdict.INCONCLUSIVE
    return Verdict.SAME if high < m else Verdict.NO_WORSE


def random_tables(count: int, seed: int) -> list[tuple[paired_tests.Table2x2, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        n = int(rng.choice([20, 164, 400, 1319, 5000]))
        discordant = int(rng.integers(0, min(n, 200) + 1))
        a_only = int(rng.integers(0, discordant + 1))
        both = int(rng.integers(0, n - discordant + 1))
        table = paired_tests.Table2x2(both, a_only, discordant - a_only, n - discordant - both)
        out.append((table, float(rng.choice([0.01, 0.02, 0.05]))))
    return out


@pytest.mark.parametrize("count", [300, pytest.param(1500, marks=pytest.mark.slow)])
def test_verdict_never_contradicts_the_interval_over_random_tables(count: int) -> None:
    checked = 0
    for table, margin in random_tables(count, seed=14):
        if table.n == 0:
            continue
        c = compare.summarize_pairing(_pairing(table), margin)
        assert c.verdict is expected_from_interval(c.diff_ci_low, c.diff_ci_high, margin), (table, margin)
        words = accuracy_report.describe_comparison(c)
        if "better than A" in words:
            assert c.diff_ci_low > 0
        if "B is worse than A" in words:
            assert c.diff_ci_high < 0
        if "No change beyond the margin" in words or "no worse than A by more than" in words:
            assert c.diff_ci_low <= 0 <= c.diff_ci_high and c.diff_ci_low > -margin
        checked += 1
    assert checked >= count * 2 // 3


def test_verdict_is_monotone_in_the_difference_at_fixed_n() -> None:
    rng = np.random.default_rng(7)
    walks = 0
    for _ in range(300):
        n = int(rng.choice([164, 400, 1319]))
        discordant = int(rng.integers(0, 60))
        both = int(rng.integers(0, n - discordant + 1))
        margin = float(rng.choice([0.01, 0.02, 0.05]))
        ranks = [rule.verdict_for(paired_tests.Table2x2(both, a_only, discordant - a_only, n - discordant - both),
                                  margin).rank for a_only in range(discordant, -1, -1)]  # B - A rising
        assert ranks == sorted(ranks), (n, discordant, both, margin)
        walks += len(ranks)
    assert walks >= 1000


def test_the_issue_tables_are_now_in_order() -> None:
    # The larger loss (9 vs 2) may no longer pass while the smaller one (6 vs 0) is blocked.
    smaller = rule.verdict_for(paired_tests.Table2x2(989, 6, 0, 324), 0.02)
    larger = rule.verdict_for(paired_tests.Table2x2(989, 9, 2, 319), 0.02)
    assert smaller is Verdict.WORSE_WITHIN  # 95% CI -0.88 to -0.04 points
    assert larger.rank <= smaller.rank


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0.001, 0.03, Verdict.BETTER), (-0.01, 0.015, Verdict.SAME), (-0.01, 0.02, Verdict.NO_WORSE),
     (-0.015, -0.001, Verdict.WORSE_WITHIN), (-0.02, -0.001, Verdict.WORSE), (-0.02, 0.0, Verdict.INCONCLUSIVE),
     (-0.05, 0.01, Verdict.INCONCLUSIVE), (0.0, 0.01, Verdict.SAME)],
)
def test_rule_table(low: float, high: float, expected: Verdict) -> None:
    assert rule.verdict_of(low, high, 0.02) is expected


def test_margins_parse_points_per_task() -> None:
    margins = rule.parse_margins(["3", "humaneval=5"], ["gsm8k", "humaneval"])
    assert (margins.of("gsm8k"), margins.of("humaneval")) == (pytest.approx(0.03), pytest.approx(0.05))
    assert rule.parse_margins([], ["gsm8k"]).of("gsm8k") == rule.DEFAULT_MARGIN
    for bad in ("x", "mmlu=3", "gsm8k=0", "-1"):
        with pytest.raises(rule.MarginError):
            rule.parse_margins([bad], ["gsm8k", "humaneval"])


def _pairing(table: paired_tests.Table2x2) -> pairing.Paired:
    a = [True] * table.both_correct + [True] * table.a_only + [False] * table.b_only + [False] * table.neither
    b = [True] * table.both_correct + [False] * table.a_only + [True] * table.b_only + [False] * table.neither
    info_a = pairing.RunInfo(1, "A", "gsm8k", "t")
    info_b = pairing.RunInfo(2, "B", "gsm8k", "t")
    frames = [pd.DataFrame({"item_id": [f"i{k:05d}" for k in range(len(x))], "item_hash": "h", "status": "ok",
                            "correct": x}) for x in (a, b)]
    return pairing.pair_runs(frames[0], frames[1], info_a, info_b)


# --- per-workload decisions ---------------------------------------------------------------


def decide(table: paired_tests.Table2x2, w, margin: float = 0.02,  # type: ignore[no-untyped-def]
           workload: str = "math"):
    c = compare_table(table, margin=margin)
    tokens = token_ratios(w.tokens_a, w.tokens_b, w.correct_a, w.correct_b)
    time = compare_task_time(w.tokens_a, w.tokens_b, w.speed_a, w.speed_b, n_boot=300)
    return decide_workload(workload, "A", "B", accuracy=c, accuracy_from="gsm8k", tokens=tokens, time=time,
                           settle=c.settle)


SAME_ANSWERS = paired_tests.Table2x2(1200, 0, 0, 119)  # 1,319 items, identical: "no change beyond the margin"


def test_more_tokens_cancel_faster_decoding_and_stop_at_a() -> None:
    w = simulate(seed=164, n_items=164, mean_tokens=260, token_ratio=1.21, tps_a=226, tps_b=252)
    d = decide(SAME_ANSWERS, w, workload="code")
    assert d.choice is Choice.STOP_AT_A and d.time is not None and d.time.ci[0] > 1
    assert [r.kind for r in d.reasons] == [ReasonKind.ACCURACY_OK, ReasonKind.LATER]


def test_same_length_faster_decoding_takes_b() -> None:
    w = simulate(seed=1319, n_items=400, mean_tokens=320, token_ratio=1.0, tps_a=226, tps_b=268)
    d = decide(SAME_ANSWERS, w)
    assert d.choice is Choice.TAKE_B and d.take_b is True


def test_worse_accuracy_stops_even_when_faster() -> None:
    w = simulate(seed=5, n_items=200, mean_tokens=300, token_ratio=1.0, tps_a=226, tps_b=268)
    d = decide(paired_tests.Table2x2(250, 30, 5, 115), w)
    assert d.verdict is Verdict.WORSE and d.choice is Choice.STOP_AT_A
    assert [r.kind for r in d.reasons] == [ReasonKind.ACCURACY_WORSE, ReasonKind.SOONER]


def test_inconclusive_and_sooner_cannot_tell_yet_and_says_what_settles_it() -> None:
    w = simulate(seed=5, n_items=200, mean_tokens=300, token_ratio=1.0, tps_a=226, tps_b=268)
    d = decide(paired_tests.Table2x2(330, 8, 5, 57), w)  # 400 items, CI about -2.4 to +1.0 points
    assert d.verdict is Verdict.INCONCLUSIVE and d.choice is Choice.CANT_TELL and d.take_b is None
    assert d.settle is not None and d.settle.items_needed is not None and d.settle.items_needed > 400


def test_inconclusive_but_later_stops_at_a() -> None:
    w = simulate(seed=6, n_items=164, mean_tokens=260, token_ratio=1.21, tps_a=226, tps_b=252)
    d = decide(paired_tests.Table2x2(330, 8, 5, 57), w, workload="code")
    assert d.choice is Choice.STOP_AT_A and {r.kind for r in d.reasons} >= {ReasonKind.LATER}


def test_time_interval_across_one_cannot_tell() -> None:
    w = simulate(seed=8, n_items=12, mean_tokens=300, token_ratio=1.0, tps_a=226, tps_b=232)
    d = decide(SAME_ANSWERS, w)
    assert d.time is not None and d.time.ci[0] < 1.0 <= d.time.ci[1]
    assert d.choice is Choice.CANT_TELL and ReasonKind.TIME_UNCLEAR in {r.kind for r in d.reasons}


def test_missing_evidence_cannot_tell() -> None:
    d = decide_workload("chat", "A", "B", accuracy=None, accuracy_from=None, tokens=None, time=None,
                        missing=[Reason(ReasonKind.NO_SPEED, "no chat speed for A")])
    assert d.choice is Choice.CANT_TELL and d.to_dict()["reasons"][0]["note"] == "no chat speed for A"


# --- which runs a ladder uses -------------------------------------------------------------


def record(run_id: int, step: str, task: str = "gsm8k", status: str = "complete", n: int = 400,
           max_tokens: int = 2048) -> RunRecord:
    info = pairing.RunInfo(run_id, step, task, "t", {"max_tokens": max_tokens}, "chat")
    return RunRecord(info, status, n, (True, str(datetime(2026, 1, 1, 0, run_id)), run_id))


def test_latest_matching_complete_run_with_the_ladder_items_is_picked() -> None:
    records = [
        record(1, "s1"), record(2, "s2"), record(3, "s3"), record(4, "s4"),
        record(5, "s2", max_tokens=1024),  # a re-run with other settings
        record(6, "s3", status="interrupted"),  # an unfinished run
        record(7, "s4", n=5),  # a 5-item smoke run
        record(8, "s1", task="humaneval", n=164), record(9, "s2", task="humaneval", n=164),
    ]
    picked = pick_runs(records, ["s1", "s2", "s3", "s4"])
    assert {k: r.info.run_id for k, r in picked.chosen.items()} == {
        ("gsm8k", "s1"): 1, ("gsm8k", "s2"): 2, ("gsm8k", "s3"): 3, ("gsm8k", "s4"): 4,
        ("humaneval", "s1"): 8, ("humaneval", "s2"): 9,
    }
    aside = {a.run_id: a.reason for a in picked.aside}
    assert aside == {5: AsideReason.OTHER_SETTINGS, 6: AsideReason.UNFINISHED, 7: AsideReason.FEWER_ITEMS}
    assert "max_tokens" in next(a.detail for a in picked.aside if a.run_id == 5)


def test_a_step_with_only_other_settings_loses_only_that_task() -> None:
    records = [record(1, "s1"), record(2, "s2", max_tokens=1024), record(3, "s3"),
               record(4, "s1", task="humaneval", n=164), record(5, "s2", task="humaneval", n=164)]
    picked = pick_runs(records, ["s1", "s2", "s3"])
    assert picked.run("gsm8k", "s2") is None and picked.run("humaneval", "s2") is not None
    assert "max_tokens" in picked.why_missing("gsm8k", "s2")
    forced = pick_runs(records, ["s1", "s2", "s3"], force=True)
    assert forced.run("gsm8k", "s2") is not None
