"""The embedded CPU ladder end to end through the CLI: build (or reuse) the engine,
launch each real SmolLM2 step, evaluate a handful of GSM8K items, stop it, compare.
Slow (a real model on the CPU), run in CI."""

from __future__ import annotations

import json
import sqlite3

import pytest

from evalsvc.engine.demo import embedded_ladder_path
from tests.conftest import GSM8K_TEST, run_cli_process

STEPS = ["q4_1", "q4_1+prompt-lookup", "q4_0-pure+prompt-lookup"]


@pytest.mark.slow
def test_embedded_ladder_runs_three_real_steps_then_reuses_them(db_path: str) -> None:
    args = ["ladder", "run", str(embedded_ladder_path()), "--task", "gsm8k", "--limit", "3",
            "--max-tokens", "192", "--concurrency", "1", "--data", GSM8K_TEST, "--db", db_path, "--json"]
    first = run_cli_process(*args, timeout=1500)
    assert first.returncode == 0, first.stderr[-3000:]
    out = json.loads(first.stdout)
    assert [s["step"] for s in out["steps"]] == STEPS
    assert all(s["error"] is None and len(s["run_ids"]) == 1 and not s["reused"] for s in out["steps"])
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("select status, count(*), count(completion_tokens), min(completion_tokens) "
                            "from items group by status").fetchall()
        fingerprints = [json.loads(f) for (f,) in conn.execute("select fingerprint from endpoints")]
    assert rows and rows[0][0] == "ok" and rows[0][1] == 9 and rows[0][2] == 9 and rows[0][3] > 0
    assert all(fp["models"] == ["smollm2-135m-instruct"] for fp in fingerprints)
    pairs = [(c["step_a"], c["step_b"]) for c in out["report"]["comparisons"]]
    assert ("q4_1", "q4_1+prompt-lookup") in pairs and ("q4_1+prompt-lookup", "q4_0-pure+prompt-lookup") in pairs
    assert all(c["n_paired"] == 3 for c in out["report"]["comparisons"])

    second = run_cli_process(*args, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)["steps"]
    assert all(s["reused"] == ["gsm8k"] for s in again)
    assert [s["run_ids"] for s in again] == [s["run_ids"] for s in out["steps"]]
