"""`evalsvc export`: per-item JSONL and CSV and a per-run summary, checked against the SQLite rows,
with the evalsvc version and endpoint fingerprint and no secret."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from importlib.metadata import version
from pathlib import Path

from tests.conftest import GSM8K_TEST, run_cli, wrong_when
from tests.fake_openai import FakeOpenAI, gsm8k_oracle

KEY = "sk-export-test-0123456789"


def stored_items(db: str, run_id: int) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("select item_id, status, correct, extracted, completion, completion_tokens from items "
                            "where run_id = ? order by item_id", (run_id,)).fetchall()


def test_export_items_and_summary(db_path: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EVALSVC_API_KEY", KEY)
    with FakeOpenAI(gsm8k_oracle(wrong_when), api_key=KEY) as server:
        ran = run_cli("run", "--endpoint", "step3", "--url", server.base_url, "--model", "fake-model", "--data",
                      GSM8K_TEST, "--limit", "12", "--no-progress", "--db", db_path)
        assert ran.exit_code == 0, ran.output
    rows = stored_items(db_path, 1)

    jsonl = run_cli("export", "step3", "--db", db_path)
    assert jsonl.exit_code == 0, jsonl.output
    records = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [(r["item_id"], r["status"], r["correct"], r["extracted"], r["completion"], r["completion_tokens"])
            for r in records] == [(i, s, bool(c), e, t, n) for i, s, c, e, t, n in rows]
    assert all(r["run_id"] == 1 and r["endpoint"] == "step3" and r["request"]["mode"] == "chat" for r in records)

    table = list(csv.DictReader(io.StringIO(run_cli("export", "1", "--format", "csv", "--db", db_path).stdout)))
    assert [(r["item_id"], r["completion"], r["completion_tokens"]) for r in table] == [
        (i, t, str(n)) for i, _, _, _, t, n in rows]

    out = tmp_path / "results"
    written = run_cli("export", "1", "--out", str(out), "--db", db_path)
    assert written.stdout.split() == [str(out / f"run-1-{name}") for name in
                                      ("items.jsonl", "items.csv", "summary.json")]
    summary = json.loads((out / "run-1-summary.json").read_text())
    assert summary["evalsvc_version"] == version("evalsvc")
    assert summary["endpoint_detail"]["fingerprint"]["models"] == ["fake-model"]
    assert (summary["run_id"], summary["n"], summary["correct"]) == (1, 12, sum(bool(r[2]) for r in rows))
    assert (out / "run-1-items.jsonl").read_text() == jsonl.stdout
    for path in out.iterdir():
        assert KEY not in path.read_text(), path


def test_export_of_an_unknown_run_is_a_one_line_error(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as server:
        run_cli("run", "--endpoint", "step3", "--url", server.base_url, "--model", "fake-model", "--data",
                GSM8K_TEST, "--limit", "2", "--no-progress", "--db", db_path)
    result = run_cli("export", "99", "--db", db_path)
    assert result.exit_code == 2 and result.stderr == "error: no run with id 99; `evalsvc runs` lists them\n"


def test_a_run_records_the_evalsvc_version_that_started_it(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as server:
        run_cli("run", "--endpoint", "step3", "--url", server.base_url, "--model", "fake-model", "--data",
                GSM8K_TEST, "--limit", "2", "--no-progress", "--db", db_path)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("select evalsvc_version from runs").fetchone()[0] == version("evalsvc")
    shown = json.loads(run_cli("show", "1", "--json", "--db", db_path).stdout)
    assert shown["evalsvc_version"] == version("evalsvc")
    assert f"started by evalsvc {version('evalsvc')}" in run_cli("show", "1", "--db", db_path).stdout
