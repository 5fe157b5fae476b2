"""`evalsvc run`, `runs`, `show` end to end: real HTTP server, real SQLite file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GSM8K_TEST, ROOT, run_cli, run_cli_process, stored_count, wrong_when
from tests.fake_openai import Fault, FakeOpenAI, gsm8k_answers, gsm8k_oracle

pytestmark = pytest.mark.usefixtures("quick_backoff")  # retried items wait less; the same attempts


def expected_correct(limit: int) -> int:
    questions = list(gsm8k_answers())[:limit]
    return sum(not wrong_when(q) for q in questions)


def run_args(server: FakeOpenAI, db: str, *extra: str) -> list[str]:
    return ["run", "--endpoint", "step3", "--url", server.base_url, "--model", "fake-model",
            "--data", GSM8K_TEST, "--db", db, "--no-progress", *extra]


@pytest.mark.slow
def test_run_stores_400_items_with_tokens_and_right_accuracy(oracle_server: FakeOpenAI, db_path: str) -> None:
    result = run_cli(*run_args(oracle_server, db_path), "--json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    correct = expected_correct(400)
    assert (run["task"], run["endpoint"], run["n"], run["errors"]) == ("gsm8k", "step3", 400, 0)
    assert run["correct"] == correct and run["accuracy"] == pytest.approx(correct / 400)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("select count(*), count(completion_tokens), sum(correct) from items").fetchone()
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
        mean_tokens = conn.execute("select avg(completion_tokens) from items").fetchone()[0]
    assert rows == (400, 400, correct)
    assert run["mean_completion_tokens"] == pytest.approx(mean_tokens)
    assert len(oracle_server.requests) == 400


def test_rerun_same_config_does_not_redo_items(oracle_server: FakeOpenAI, db_path: str) -> None:
    assert run_cli(*run_args(oracle_server, db_path), "--limit", "20").exit_code == 0
    again = json.loads(run_cli(*run_args(oracle_server, db_path), "--limit", "20", "--json").stdout)["runs"][0]
    assert len(oracle_server.requests) == 20
    assert (again["run_id"], again["resumed"], again["skipped"], again["n"]) == (1, True, 20, 20)


def test_larger_limit_reuses_the_stored_items_and_asks_only_for_new_ones(oracle_server: FakeOpenAI, db_path: str) -> None:
    assert run_cli(*run_args(oracle_server, db_path), "--limit", "20").exit_code == 0
    grown = json.loads(run_cli(*run_args(oracle_server, db_path), "--limit", "30", "--json").stdout)["runs"][0]
    assert len(oracle_server.requests) == 30  # 20, then only the 10 new items
    assert (grown["run_id"], grown["skipped"], grown["n"], grown["status"]) == (2, 20, 30, "complete")
    assert grown["correct"] == expected_correct(30)
    with sqlite3.connect(db_path) as conn:
        first = conn.execute("select item_id, completion, correct from items where run_id = 1 order by item_id").fetchall()
        copied = conn.execute("select item_id, completion, correct from items where run_id = 2 order by item_id").fetchall()
    assert copied[:20] == first and len(copied) == 30


def test_repeat_starts_a_new_run(oracle_server: FakeOpenAI, db_path: str) -> None:
    run_cli(*run_args(oracle_server, db_path), "--limit", "5")
    second = json.loads(run_cli(*run_args(oracle_server, db_path), "--limit", "5", "--repeat", "--json").stdout)
    assert second["runs"][0]["run_id"] == 2 and second["runs"][0]["repeat"] == 1
    assert len(oracle_server.requests) == 10


def test_runs_and_show_output(oracle_server: FakeOpenAI, db_path: str) -> None:
    run_cli(*run_args(oracle_server, db_path), "--limit", "8")
    listing = run_cli("runs", "--db", db_path).output.splitlines()
    correct = expected_correct(8)
    assert listing[0].split() == ["run", "endpoint", "task", "status", "items", "correct", "errors", "accuracy",
                                  "mean", "tok"]
    assert listing[1].split()[:7] == ["1", "step3", "gsm8k", "complete", "8/8", str(correct), "0"]
    assert listing[1].split()[7] == f"{correct / 8:.1%}"
    shown = run_cli("show", "step3", "--db", db_path).output
    assert f"items 8/8: {correct}/8 correct ({correct / 8:.1%}), 0 errors, 0 truncated" in shown
    assert "template zeroshot-chat@v1, mode chat, status complete" in shown
    as_json = json.loads(run_cli("show", "1", "--db", db_path, "--json").stdout)
    assert as_json["decoding"]["temperature"] == 0.0 and as_json["correct"] == correct
    runs_json = json.loads(run_cli("runs", "--db", db_path, "--json").stdout)
    assert [r["run_id"] for r in runs_json["runs"]] == [1]


def test_truncation_is_recorded(db_path: str) -> None:
    from tests.fake_openai import Reply

    with FakeOpenAI(lambda b: Reply(text="The answer is", finish_reason="length", completion_tokens=2048)) as s:
        out = json.loads(run_cli(*run_args(s, db_path), "--limit", "3", "--json").stdout)["runs"][0]
    assert out["truncated"] == 3 and out["correct"] == 0


def test_endpoint_errors_are_stored_apart_from_wrong_answers(db_path: str) -> None:
    # Item requests whose question contains "eggs" always fail with 400: stored as errors, not as wrong.
    plan = lambda i, body: Fault("status", 400) if "eggs" in json.dumps(body) else None  # noqa: E731
    with FakeOpenAI(gsm8k_oracle(lambda q: False), faults=plan) as server:
        out = json.loads(run_cli(*run_args(server, db_path), "--limit", "40", "--json").stdout)["runs"][0]
    failing = sum("eggs" in q for q in list(gsm8k_answers())[:40])
    assert failing > 0
    assert (out["errors"], out["correct"], out["n"]) == (failing, 40 - failing, 40)
    assert out["accuracy"] == 1.0
    with sqlite3.connect(db_path) as conn:
        errors = conn.execute("select correct, error from items where status = 'error'").fetchall()
    assert all(c is None and "HTTP 400" in e for c, e in errors)


def test_too_many_errors_marks_the_run_failed(db_path: str) -> None:
    with FakeOpenAI(faults=lambda i, b: Fault("status", 404)) as server:
        result = run_cli(*run_args(server, db_path), "--limit", "5", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["runs"][0]["status"] == "failed"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--model": "other"}, "does not serve model 'other'; /v1/models lists: fake-model"),
        ({"--url": "http://127.0.0.1:9/v1"}, "is unreachable"),
        ({"--data": "/nonexistent/test.jsonl"}, "does not exist; pass --data PATH"),
        ({"--db": "/proc/forbidden/x.db"}, "cannot open database"),
        ({"--endpoint": "x" * 201}, "endpoint name must be 1 to 200 characters, got 201"),
        ({"--db": "postgresql://u:secret@127.0.0.1:9/nodb"}, "cannot open database postgresql://u:***@127.0.0.1:9"),
    ],
)
def test_bad_input_is_one_line_error(oracle_server: FakeOpenAI, db_path: str, change: dict, message: str) -> None:
    args = run_args(oracle_server, db_path)
    for key, value in change.items():
        args[args.index(key) + 1] = value
    result = run_cli(*args)
    assert result.exit_code == (3 if "unreachable" in message else 2) and result.stdout == ""
    # A password typed on the command line gets a warning line first (see test_secrets_end_to_end).
    errors = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0]
    assert "secret" not in result.output
    assert not Path(db_path).exists()  # a run that never started leaves no store behind


@pytest.mark.slow
def test_kill_mid_run_then_rerun_finishes_with_exactly_400(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when), latency_s=0.02) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", *run_args(server, db_path)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and stored_count(db_path) < 60:
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = stored_count(db_path)
        assert 60 <= killed_at < 400
        result = run_cli_process(*run_args(server, db_path), "--json")
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)["runs"][0]
    assert out["resumed"] and out["skipped"] >= killed_at and out["n"] == 400
    assert out["correct"] == expected_correct(400)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("select count(*), count(distinct item_id) from items").fetchone() == (400, 400)
        assert conn.execute("select count(*) from runs").fetchone()[0] == 1


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_keeps_finished_items(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when), latency_s=0.02) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", *run_args(server, db_path)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and stored_count(db_path) < 30:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted" in err and "Traceback" not in err
    with sqlite3.connect(db_path) as conn:
        status = conn.execute("select status from runs").fetchone()[0]
        stored = conn.execute("select count(*) from items").fetchone()[0]
    assert status == "interrupted" and 30 <= stored < 400


def test_run_without_data_uses_the_shipped_gsm8k_and_resumes_a_run_made_from_the_file(
    oracle_server: FakeOpenAI, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EVALSVC_GSM8K_DATA", raising=False)
    assert run_cli(*run_args(oracle_server, db_path), "--limit", "6").exit_code == 0
    args = ["run", "--endpoint", "step3", "--url", oracle_server.base_url, "--model", "fake-model", "--db", db_path,
            "--no-progress", "--limit", "6", "--json"]
    again = json.loads(run_cli(*args).stdout)["runs"][0]
    assert (again["run_id"], again["resumed"], again["skipped"]) == (1, True, 6)  # same item ids and hashes
    assert again["correct"] == expected_correct(6)
    assert len(oracle_server.requests) == 6
