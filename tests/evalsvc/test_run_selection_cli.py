"""Which run an endpoint name stands for is said, never silently changed; a reused name keeps its URL;
a failed run says why; --fail-on lets CI gate on a verdict or a decision."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import GSM8K_TEST, run_cli
from tests.fake_openai import Fault, FakeOpenAI, gsm8k_oracle

pytestmark = pytest.mark.usefixtures("quick_backoff")  # retried items wait less; the same attempts


def run(server: FakeOpenAI, db: str, name: str, limit: int, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli("run", "--endpoint", name, "--url", server.base_url, "--model", "fake-model", "--data",
                   GSM8K_TEST, "--limit", str(limit), "--no-progress", "--db", db, *extra)


def digest(db: str) -> str:
    with sqlite3.connect(db) as conn:
        conn.execute("pragma wal_checkpoint(truncate)")
    return hashlib.sha256(Path(db).read_bytes()).hexdigest()


def test_a_name_keeps_its_url_unless_the_endpoint_moved(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(lambda q: False)) as first, FakeOpenAI(gsm8k_oracle(lambda q: False)) as second:
        assert run(first, db_path, "step3", 3).exit_code == 0
        before = digest(db_path)
        refused = run(second, db_path, "step3", 3)
        assert refused.exit_code == 2 and refused.stdout == ""
        assert refused.stderr.strip() == (
            f"error: endpoint 'step3' was stored at {first.base_url}, not {second.base_url}; use a new --endpoint "
            "name for another server, or add --new-url if this endpoint moved")
        assert digest(db_path) == before and second.requests == []
        moved = run(second, db_path, "step3", 3, "--new-url")
        assert moved.exit_code == 0, moved.output
    with sqlite3.connect(db_path) as conn:
        url, metadata = conn.execute("select base_url, metadata from endpoints").fetchone()
    assert url == second.base_url
    assert [m["url"] for m in json.loads(metadata)["earlier_urls"]] == [first.base_url]


def test_a_small_later_run_never_replaces_the_full_one_and_reports_name_their_runs(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(lambda q: len(q) % 4 == 0)) as server:
        for name, limit in (("step3", 12), ("step4", 12), ("step4", 3)):
            assert run(server, db_path, name, limit).exit_code == 0
    compared = json.loads(run_cli("compare", "step3", "step4", "--db", db_path, "--json").stdout)
    assert compared["comparisons"][0]["n_paired"] == 12 and compared["comparisons"][0]["run_b"] == 2
    assert compared["runs"]["used"] == [
        {"task": "gsm8k", "step": "step3", "run_id": 1, "n_items": 12},
        {"task": "gsm8k", "step": "step4", "run_id": 2, "n_items": 12}]
    assert [(a["run_id"], a["reason"]) for a in compared["runs"]["set_aside"]] == [(3, "fewer items")]
    for command in (["compare", "step3", "step4"], ["decide", "step3", "step4"],
                    ["report", "--endpoints", "step3,step4"]):
        text = run_cli(*command, "--db", db_path).stdout
        assert "  gsm8k: step3 run 1 (12 items), step4 run 2 (12 items)\n" in text, command
        assert "set aside: step4 gsm8k run 3: fewer items (3 items where the other steps have 12)" in text, command
    shown = run_cli("show", "step4", "--db", db_path).stdout
    assert shown.startswith("run 2: step4") and "also stored: run 3 (3 items, complete); `evalsvc show 3`" in shown
    assert json.loads(run_cli("show", "step4", "--db", db_path, "--json").stdout)["run_id"] == 2


def test_a_failed_run_says_why_and_how_to_retry(db_path: str) -> None:
    plan = lambda i, body: Fault("status", 404)  # noqa: E731
    with FakeOpenAI(faults=plan) as server:
        failed = run(server, db_path, "broken", 5)
    assert failed.exit_code == 1
    why = (f"5 of 5 items failed (more than 10%); most common error (5 of them): POST {server.base_url}/chat/"
           'completions: HTTP 404 {"error": {"message": "injected"}}; fix the cause and run the same command: '
           "it retries only the failed items")
    assert failed.stderr.splitlines()[-1] == f"error: run 1 gsm8k failed: {why}"
    assert f"error: {why}" in run_cli("show", "broken", "--db", db_path).stdout


def test_fail_on_gates_ci_on_the_verdict_and_the_decision(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(lambda q: False)) as good, FakeOpenAI(gsm8k_oracle(lambda q: len(q) % 2 == 0)) as bad:
        assert run(good, db_path, "a", 60).exit_code == 0
        assert run(bad, db_path, "b", 60).exit_code == 0
    plain = run_cli("compare", "a", "b", "--db", db_path)
    assert plain.exit_code == 0 and "worse" in plain.stdout
    gated = run_cli("compare", "a", "b", "--fail-on", "worse", "--db", db_path)
    assert gated.exit_code == 1 and gated.stdout == plain.stdout
    assert gated.stderr == "gate: gsm8k is worse (--fail-on worse)\n"
    assert run_cli("compare", "b", "b2", "--db", db_path).exit_code == 2  # unknown name: usage, not the gate
    decided = run_cli("decide", "a", "b", "--fail-on", "stop", "--db", db_path)
    assert decided.exit_code == 1 and decided.stderr.startswith("gate: math: stop at A")
    assert run_cli("decide", "a", "b", "--db", db_path).exit_code == 0
