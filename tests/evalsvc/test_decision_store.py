"""One decision, one truth, on a stored 4-step ladder: the seed's scenario, chat from probe lengths,
runs set aside, and `compare`, `report`, `decide` and the dashboard agreeing on every pair."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from dashboard import data
from db import queries
from db.engine import Store, open_store
from db.models import Run
from harness.types import DecodingSettings, SpeedSample
from tests.conftest import run_cli
from tests.dashboard import seed
from tests.dashboard.test_app import open_app, shown_tables

STEPS = ("s1", "s2", "s3", "s4")
MATH_TPS = {"s1": 200.0, "s2": 250.0, "s3": 286.0, "s4": 302.0}
CODE_TPS = {"s1": 180.0, "s2": 200.0, "s3": 226.0, "s4": 252.0}
CHAT_TPS = {"s1": 150.0, "s2": 160.0, "s3": 177.0, "s4": 196.0}
CHAT_PROMPTS = 20


def chat_tokens(k: int) -> int:
    return 600 + 10 * k  # true chat answers around 700 tokens


def math_run(step: str) -> list[seed.Outcome]:
    return [seed.math_outcome(i, i < 320, 150 + i % 50) for i in range(seed.GSM8K_N)]


def code_run(step: str) -> list[seed.Outcome]:
    scale = 1.21 if step == "s4" else 1.0  # step 4 writes 1.21x the code tokens
    return [seed.code_outcome(i, i < 100, round((180 + i % 41) * scale)) for i in range(seed.HUMANEVAL_N)]


def add_chat_probe(store: Store, step: str, cap: int = 2048, tokens: Sequence[int] | None = None,
                   tps: float | None = None) -> None:
    counts = tokens or [chat_tokens(k) for k in range(CHAT_PROMPTS)]
    samples = []
    for k, count in enumerate(counts):
        jitter = 1 + 0.01 * ((k % 5) - 2)  # +-2% request to request
        cut = count >= cap
        samples.append((f"chat/{k:02d}", SpeedSample(
            k, ttft_s=0.05, decode_tps=(tps or CHAT_TPS[step]) * jitter, output_tokens=min(count, cap), token_source="usage",
            finish_reason="length" if cut else "stop")))
    with store.session() as session:
        queries.add_speed_run(session, queries.get_endpoint(session, step), "chat", samples, "probe", cap, None)


def scenario_store(db: str) -> Store:
    """Same answers on every step; only lengths and speeds differ."""
    store = open_store(db)
    math_samples = [seed.gsm8k_sample(i) for i in range(seed.GSM8K_N)]
    code_samples = [seed.humaneval_sample(i) for i in range(seed.HUMANEVAL_N)]
    for index, step in enumerate(STEPS):
        when = seed.START + timedelta(hours=index + 1)
        seed.add_run(store, step, "gsm8k", math_samples, math_run(step), finished_at=when)
        seed.add_run(store, step, "humaneval", code_samples, code_run(step), finished_at=when)
        seed.add_speeds(store, step, {"math": MATH_TPS[step], "code": CODE_TPS[step]})
        add_chat_probe(store, step)
    return store


@pytest.fixture
def scenario_db(tmp_path: Path) -> str:
    db = str(tmp_path / "scenario.db")
    scenario_store(db).dispose()
    return db


def cli_json(*args: str) -> dict:
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def decide(db: str, a: str, b: str) -> dict[str, dict]:
    return {w["workload"]: w for w in cli_json("decide", a, b, "--db", db)["workloads"]}


# --- the seed's scenario -----------------------------------------------------------------


def test_more_code_tokens_stop_at_step_3_while_math_and_chat_take_step_4(scenario_db: str) -> None:
    decisions = decide(scenario_db, "s3", "s4")
    code = decisions["code"]
    assert code["decision"] == "stop at A" and code["accuracy_verdict"] == "no change beyond the margin"
    assert code["token_ratio"] == pytest.approx(1.21, abs=0.003)
    assert code["time_ratio"] == pytest.approx(1.21 * 226 / 252, abs=0.002)  # 1.085
    assert code["explanation"].startswith("stop at s3 for code, tasks finish 8.5% later on s4")
    math = decisions["math"]
    assert math["decision"] == "take B" and math["time_ratio"] == pytest.approx(286 / 302, abs=1e-3)
    chat = decisions["chat"]
    assert chat["decision"] == "take B" and chat["token_ratio"] == pytest.approx(1.0)
    assert chat["time_ci"][1] < 1 and (chat["truncated_a"], chat["truncated_b"]) == (0, 0)
    assert chat["explanation"].startswith("take s4 for chat, tasks finish") and "sooner on s4" in chat["explanation"]


def test_chat_answers_cut_by_the_probe_cap_refuse_the_chat_decision(scenario_db: str) -> None:
    store = open_store(scenario_db)
    # A 512-token probe over answers of about 700 (B writing 1.21x): every answer cut, ratio near 1.
    add_chat_probe(store, "s3", cap=512)
    add_chat_probe(store, "s4", cap=512, tokens=[round(1.21 * chat_tokens(k)) for k in range(CHAT_PROMPTS)])
    store.dispose()
    chat = decide(scenario_db, "s3", "s4")["chat"]
    assert chat["decision"] == "can't tell yet" and chat["time_ratio"] is None
    assert (chat["truncated_a"], chat["truncated_b"]) == (CHAT_PROMPTS, CHAT_PROMPTS)
    cut = next(r for r in chat["reasons"] if r["kind"] == "truncated")
    assert "cut at the probe's cap (512 and 512 tokens)" in cut["note"] and "--max-tokens" in cut["note"]


# --- runs set aside ------------------------------------------------------------------------


def test_a_rerun_with_other_settings_and_small_or_unfinished_runs_are_set_aside(
    scenario_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(scenario_db)
    later = seed.START + timedelta(days=1)
    math_samples = [seed.gsm8k_sample(i) for i in range(seed.GSM8K_N)]
    rerun = seed.add_run(store, "s2", "gsm8k", math_samples, math_run("s2"), finished_at=later,
                         settings=DecodingSettings(max_tokens=1024))
    smoke = seed.add_run(store, "s3", "gsm8k", math_samples[:5], math_run("s3")[:5], finished_at=later)
    broken = seed.add_run(store, "s4", "gsm8k", math_samples[:50], math_run("s4")[:50], status="interrupted")
    going = seed.add_run(store, "s1", "gsm8k", math_samples[:50], math_run("s1")[:50], status="running",
                         settings=DecodingSettings(max_tokens=4096))
    with store.session() as session:  # still being written: started, never finished
        run = session.get(Run, going)
        run.finished_at, run.started_at = None, later
        session.commit()
    store.dispose()
    report = cli_json("report", "--endpoints", ",".join(STEPS), "--db", scenario_db)
    aside = {a["run_id"]: a["reason"] for a in report["set_aside"]}
    assert aside == {rerun: "other settings", smoke: "fewer items", broken: "unfinished", going: "unfinished"}
    assert all(c["n_paired"] == seed.GSM8K_N for c in report["comparisons"] if c["task"] == "gsm8k")
    for pair in report["decisions"]:
        assert {w["workload"]: w["decision"] for w in pair["workloads"]}["math"] == "take B"
    q = report["cochran_q"]["gsm8k"]
    assert (q["n_items"], q["statistic"]) == (seed.GSM8K_N, 0.0)
    # The dashboard keeps every decision and lists the three runs aside.
    at = open_app(monkeypatch, scenario_db)
    ship_boxes = [m.value for m in at.markdown if m.value.startswith("####") and "ship" in m.value]
    assert ship_boxes == [r"#### math (gsm8k): ship **s4**, the last step",
                          r"#### code (humaneval): ship **s3**, stop there (not **s4**)",
                          r"#### chat: ship **s4**, the last step"]
    assert not at.warning
    aside_table = next(df for df in shown_tables(at) if "set aside" in df.columns)
    assert sorted(aside_table["run"].astype(int)) == sorted([rerun, smoke, broken, going])


def test_a_step_with_only_other_settings_loses_only_its_task_and_pairs(scenario_db: str) -> None:
    store = open_store(scenario_db)
    with store.session() as session:  # s2's only gsm8k run becomes one with other settings
        run = queries.resolve_run(session, "s2", "gsm8k")
        run.decoding = {**run.decoding, "max_tokens": 1024}
        session.commit()
    store.dispose()
    report = cli_json("report", "--endpoints", ",".join(STEPS), "--db", scenario_db)
    by_pair = {(p["step_a"], p["step_b"]): {w["workload"]: w for w in p["workloads"]} for p in report["decisions"]}
    for pair in (("s1", "s2"), ("s2", "s3")):
        math = by_pair[pair]["math"]
        assert math["decision"] == "can't tell yet" and "max_tokens" in math["explanation"]
        assert by_pair[pair]["code"]["decision"] == "take B"
    assert by_pair[("s3", "s4")]["math"]["decision"] == "take B"


# --- one truth everywhere ------------------------------------------------------------------


@pytest.fixture
def varied_db(tmp_path: Path) -> str:
    """The dashboard's seeded ladder (verdicts: no change, worse, inconclusive; a repeat run; errors and
    truncations in one step) with chat probes of every step."""
    db = str(tmp_path / "varied.db")
    store = seed.seed_store(db)
    for step, tps in zip(seed.STEPS, (150.0, 160.0, 177.0, 196.0)):
        add_chat_probe(store, step, tps=tps)
    store.dispose()
    return db


def test_compare_report_decide_and_dashboard_agree_on_every_pair(
    varied_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, steps = varied_db, seed.STEPS
    report = cli_json("report", "--endpoints", ",".join(steps), "--db", db)
    verdicts = {(c["task"], c["step_a"], c["step_b"]): c["verdict"] for c in report["comparisons"]}
    assert len(verdicts) == 2 * (3 + 2)  # 3 consecutive and 2 more baseline pairs, per task
    assert {"no change beyond the margin", "worse", "inconclusive"} <= set(verdicts.values())
    # The noise floor comes only from a repeat of the same task: bf16 repeated GSM8K, never HumanEval.
    floors = {(c["task"], c["step_a"]): c["flip_rate"] for c in report["comparisons"]}
    assert floors[("gsm8k", "bf16")] == pytest.approx(4 / 400) and floors[("humaneval", "bf16")] is None
    for (task, a, b), verdict in verdicts.items():
        compared = cli_json("compare", a, b, "--task", task, "--db", db)["comparisons"][0]
        assert compared["verdict"] == verdict, (task, a, b)
    reported = {(p["step_a"], p["step_b"]): {w["workload"]: (w["decision"], w["accuracy_verdict"])
                                             for w in p["workloads"]} for p in report["decisions"]}
    for a, b in zip(steps, steps[1:]):
        decided = {name: (w["decision"], w["accuracy_verdict"]) for name, w in decide(db, a, b).items()}
        assert decided == reported[(a, b)], (a, b)

    url = data.db_url(["--db", db])
    found = data.ladder(url, data.load_runs(url), list(steps))
    assert not isinstance(found, str)
    assert {(e.comparison.task, e.step_a, e.step_b): e.comparison.verdict.value
            for e in found.accuracy.entries} == verdicts
    assert {(p.step_a, p.step_b): {w.workload: (w.choice.value, w.verdict.value if w.verdict else None)
                                   for w in p.workloads} for p in found.decisions} == reported

    # The Ladder page, as a reader sees it: every workload's chain of decisions.
    at = open_app(monkeypatch, db)
    words = {"take B": "take {b}", "stop at A": "stop at {a}", "can't tell yet": "can't tell yet"}
    for index, workload in enumerate(("math", "code", "chat")):
        chain = shown_tables(at)[index]
        shown = list(chain["decision"])
        expected = [words[reported[(a, b)][workload][0]].format(a=a, b=b) for a, b in zip(steps, steps[1:])]
        assert shown == expected, workload
    assert len({d for pair in reported.values() for d, _ in pair.values()}) == 3  # take, stop and can't tell
