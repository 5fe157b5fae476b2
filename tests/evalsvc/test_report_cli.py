"""`evalsvc compare`, `report`, `speed --tokens-per-second` and `decide` on runs stored
through the CLI in a real SQLite file; figures checked against statsmodels."""

from __future__ import annotations

import json
import sqlite3

import pytest
from statsmodels.stats.contingency_tables import mcnemar

from tests.conftest import copy_store, run_cli, store_run


@pytest.fixture(scope="module")
def stored_ladder(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three steps' runs, stored through the CLI once for the module."""
    db = str(tmp_path_factory.mktemp("ladder") / "evalsvc.db")
    store_run(db, "bf16", lambda q: len(q) % 4 == 0, lambda q: 100 + len(q) % 17)
    store_run(db, "int4", lambda q: len(q) % 5 == 0, lambda q: 121 + len(q) % 19)
    store_run(db, "int3", lambda q: len(q) % 2 == 0, lambda q: 130 + len(q) % 23)
    return db


@pytest.fixture
def ladder_db(stored_ladder: str, db_path: str) -> str:
    """A copy of the stored ladder each test may change."""
    return copy_store(stored_ladder, db_path)


def table_from_sqlite(db: str, a: str, b: str) -> tuple[int, int, int, int]:
    query = """
        select ia.correct, ib.correct from items ia join items ib on ia.item_id = ib.item_id
        join runs ra on ia.run_id = ra.id join endpoints ea on ra.endpoint_id = ea.id
        join runs rb on ib.run_id = rb.id join endpoints eb on rb.endpoint_id = eb.id
        where ea.name = ? and eb.name = ?"""
    with sqlite3.connect(db) as conn:
        pairs = conn.execute(query, (a, b)).fetchall()
    return (sum(x and y for x, y in pairs), sum(x and not y for x, y in pairs),
            sum(y and not x for x, y in pairs), sum(not x and not y for x, y in pairs))


def test_compare_json_matches_statsmodels(ladder_db: str) -> None:
    out = json.loads(run_cli("compare", "bf16", "int3", "--db", ladder_db, "--json").stdout)["comparisons"][0]
    both, a_only, b_only, neither = table_from_sqlite(ladder_db, "bf16", "int3")
    assert (out["n_paired"], out["both_correct"], out["a_only"], out["b_only"], out["neither"]) == (
        120, both, a_only, b_only, neither)
    table = [[both, a_only], [b_only, neither]]
    assert out["p_exact"] == pytest.approx(mcnemar(table, exact=True).pvalue, rel=1e-9)
    assert out["p_chi2"] == pytest.approx(mcnemar(table, exact=False, correction=True).pvalue, rel=1e-9)
    assert out["diff"] == pytest.approx((b_only - a_only) / 120)
    assert out["diff_ci_low"] < out["diff"] < out["diff_ci_high"]
    assert out["verdict"] == "worse" and out["diff_ci_high"] < 0 and out["diff_ci_low"] <= -0.02
    assert 0 < out["mde"] <= (a_only + b_only) / 120


def test_compare_text_and_disagreements(ladder_db: str) -> None:
    text = run_cli("compare", "bf16", "int4", "--db", ladder_db, "--disagreements").output
    _, a_only, b_only, _ = table_from_sqlite(ladder_db, "bf16", "int4")
    assert text.splitlines()[0].split()[:3] == ["task", "A", "B"]
    assert "items where exactly one side was right" in text
    listed = [line for line in text.splitlines() if line.startswith("gsm8k/test/")]
    assert len(listed) == a_only + b_only
    markdown = run_cli("compare", "bf16", "int4", "--db", ladder_db, "--markdown").output
    assert markdown.startswith("| task |")


def test_compare_refuses_different_templates_unless_forced(db_path: str) -> None:
    store_run(db_path, "a", lambda q: False, lambda q: 10)
    store_run(db_path, "b", lambda q: False, lambda q: 10, "--max-tokens", "256")
    refused = run_cli("compare", "a", "b", "--db", db_path)
    assert refused.exit_code == 2 and "--force" in refused.output and "max_tokens" in refused.output
    forced = json.loads(run_cli("compare", "a", "b", "--db", db_path, "--force", "--json").stdout)["comparisons"][0]
    assert forced["forced"] is True and forced["n_paired"] == 120


def test_margin_option_takes_points_per_task(ladder_db: str) -> None:
    out = json.loads(run_cli("compare", "bf16", "int4", "--db", ladder_db, "--json", "--margin", "1",
                             "--margin", "gsm8k=7.5").stdout)["comparisons"][0]
    assert out["margin"] == pytest.approx(0.075)
    bad = run_cli("compare", "bf16", "int4", "--db", ladder_db, "--margin", "mmlu=3")
    assert bad.exit_code == 2 and "unknown task 'mmlu'" in bad.output
    assert "Verdict rule" in run_cli("compare", "--help").output


def test_report_over_a_ladder_holm_adjusts(ladder_db: str) -> None:
    report = json.loads(run_cli("report", "--endpoints", "bf16,int4,int3", "--db", ladder_db, "--json").stdout)
    kinds = [(c["step_a"], c["step_b"], c["vs"]) for c in report["comparisons"]]
    assert kinds == [("bf16", "int4", "previous"), ("int4", "int3", "previous"), ("bf16", "int3", "baseline")]
    from statsmodels.stats.multitest import multipletests

    raw = [c["p_exact"] for c in report["comparisons"]]
    assert [c["p_holm"] for c in report["comparisons"]] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert report["cochran_q"]["gsm8k"]["n_items"] == 120
    text = run_cli("report", "--endpoints", "bf16,int4,int3", "--db", ladder_db).output
    assert "Cochran's Q" in text and "Decisions" in text


def test_repeat_runs_give_a_noise_floor(db_path: str) -> None:
    store_run(db_path, "a", lambda q: len(q) % 4 == 0, lambda q: 10)
    # The repeat flips 6 of 120 items; b differs from a on 4 (within noise), c on 20 (beyond it).
    store_run(db_path, "a", lambda q: len(q) % 4 == 0 or len(q) % 9 == 0, lambda q: 10, "--repeat", "--new-url")
    store_run(db_path, "b", lambda q: len(q) % 4 == 0 or len(q) % 17 == 0, lambda q: 10)
    store_run(db_path, "c", lambda q: len(q) % 4 == 0 or len(q) % 7 == 0, lambda q: 10)
    near = json.loads(run_cli("compare", "a", "b", "--db", db_path, "--json").stdout)["comparisons"][0]
    far = json.loads(run_cli("compare", "a", "c", "--db", db_path, "--json").stdout)["comparisons"][0]
    assert near["flip_rate"] == pytest.approx(6 / 120)
    assert near["noise_floor"] is True and far["noise_floor"] is False


def decide_json(db: str) -> dict[str, dict]:
    # 120 identical answers settle a verdict only at a 5-point margin (2 points needs more items).
    out = json.loads(run_cli("decide", "step3", "step4", "--margin", "5", "--db", db, "--json").stdout)
    return {w["workload"]: w for w in out["workloads"]}


def test_worked_example_more_tokens_cancel_faster_decoding(db_path: str) -> None:
    # Same answers; step4 decodes 252 tok/s against 226 but writes 21% more tokens.
    store_run(db_path, "step3", lambda q: len(q) % 4 == 0, lambda q: 200 + len(q) % 40)
    store_run(db_path, "step4", lambda q: len(q) % 4 == 0, lambda q: round((200 + len(q) % 40) * 1.21))
    for name, tps in (("step3", "226"), ("step4", "252")):
        r = run_cli("speed", "--endpoint", name, "--workload", "math", "--tokens-per-second", tps,
                    "--source", "vendor table", "--db", db_path)
        assert r.exit_code == 0 and f"{float(tps):.1f} tok/s entered by hand" in r.output
    math = decide_json(db_path)["math"]
    assert math["decision"] == "stop at A" and math["take_b"] is False
    assert math["explanation"].startswith("stop at step3 for math, tasks finish 8.5% later on step4")
    assert math["token_ratio"] == pytest.approx(1.21, abs=0.005)
    assert math["time_ratio"] == pytest.approx(1.21 * 226 / 252, abs=0.005)


def test_same_length_faster_decoding_takes_the_step(db_path: str) -> None:
    store_run(db_path, "step3", lambda q: len(q) % 4 == 0, lambda q: 200 + len(q) % 40)
    store_run(db_path, "step4", lambda q: len(q) % 4 == 0, lambda q: 200 + len(q) % 40)
    run_cli("speed", "--endpoint", "step3", "--workload", "math", "--tokens-per-second", "226", "--source", "x",
            "--db", db_path)
    run_cli("speed", "--endpoint", "step4", "--workload", "math", "--tokens-per-second", "268", "--source", "x",
            "--db", db_path)
    decisions = decide_json(db_path)
    assert decisions["math"]["take_b"] is True and decisions["math"]["explanation"].startswith("take step4 for math")
    code = decisions["code"]
    assert code["decision"] == "can't tell yet" and "humaneval" in code["explanation"]
    assert [r["kind"] for r in code["reasons"]] == ["no_run", "no_run"]


def test_unknown_endpoint_is_a_clear_error(ladder_db: str) -> None:
    result = run_cli("compare", "bf16", "nope", "--db", ladder_db)
    assert result.exit_code == 2
    assert result.output.strip() == "error: no endpoint named 'nope'; known endpoints: bf16, int3, int4"
