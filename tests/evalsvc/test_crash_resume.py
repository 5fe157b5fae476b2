"""`kill -9` of the runner at random moments, several times, then a resume.

Whatever moment the process dies at (starting up, migrating, mid-run), the
store must end with exactly one row per item, none lost, none duplicated, the
correct answers unchanged, and a status that never claims more than is stored.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GSM8K_TEST, ROOT, run_cli, run_cli_process, stored_count, wrong_when
from tests.fake_openai import FakeOpenAI, gsm8k_answers, gsm8k_oracle

N_ITEMS = 200
KILLS = 5
SEED = int(os.environ.get("EVALSVC_CRASH_SEED", "20240609"))


def run_args(server: FakeOpenAI, db: str) -> list[str]:
    return ["run", "--endpoint", "victim", "--url", server.base_url, "--model", "fake-model", "--data", GSM8K_TEST,
            "--db", db, "--no-progress", "--concurrency", "8", "--limit", str(N_ITEMS)]


def snapshot(db: str) -> tuple[list[tuple[str, int]], list[str]]:
    """(status and n_items of each run, stored item ids) as a separate reader sees them."""
    if not Path(db).exists():
        return [], []
    with sqlite3.connect(db, timeout=30) as conn:
        if not conn.execute("select 1 from sqlite_master where name = 'items'").fetchone():
            return [], []
        runs = conn.execute("select status, n_items from runs").fetchall()
        items = [r[0] for r in conn.execute("select item_id from items where status = 'ok'")]
    return runs, items


def kill_when(server: FakeOpenAI, db: str, stored_at_least: int, extra_s: float) -> None:
    """Start the runner; SIGKILL it `extra_s` after `stored_at_least` rows are visible (0: after start)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", *run_args(server, db)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while stored_at_least and stored_count(db) < stored_at_least and time.monotonic() < deadline:
        assert proc.poll() is None, "the runner exited before it could be killed"
        time.sleep(0.02)
    time.sleep(extra_s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def kill_points(rng: random.Random) -> list[tuple[int, float]]:
    """One kill while starting up, then kills after growing random numbers of stored items."""
    targets = sorted(rng.sample(range(1, N_ITEMS - 30), KILLS - 1))
    return [(0, rng.uniform(0.05, 1.5))] + [(t, rng.uniform(0.0, 0.05)) for t in targets]


@pytest.mark.slow
def test_repeated_kill_9_then_resume_stores_each_item_exactly_once(db_path: str) -> None:
    rng = random.Random(SEED)
    seen: list[int] = []
    with FakeOpenAI(gsm8k_oracle(wrong_when), latency_s=0.01) as server:
        for target, extra_s in kill_points(rng):
            kill_when(server, db_path, target, extra_s)
            runs, items = snapshot(db_path)
            assert len(items) == len(set(items)), f"duplicate rows after a kill (seed {SEED})"
            assert not seen or len(items) >= seen[-1], f"rows lost after a kill (seed {SEED}): {seen} -> {len(items)}"
            assert len(items) >= target
            # A killed run never claims to be finished.
            assert all(status == "running" for status, _ in runs) and len(runs) <= 1
            seen.append(len(items))
        result = run_cli_process(*run_args(server, db_path), "--json")
        assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)["runs"][0]
    assert seen[-1] < N_ITEMS, f"the last kill came too late to test a resume (seed {SEED}, counts {seen})"
    assert (out["status"], out["n"], out["errors"], out["resumed"]) == ("complete", N_ITEMS, 0, True)
    assert out["skipped"] == seen[-1]
    questions = list(gsm8k_answers())[:N_ITEMS]
    assert out["correct"] == sum(not wrong_when(q) for q in questions)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
        assert conn.execute("select count(*), count(distinct item_id) from items").fetchone() == (N_ITEMS, N_ITEMS)
        assert conn.execute("select count(*), min(status) from runs").fetchone() == (1, "complete")
        stored = {r[0] for r in conn.execute("select item_id from items")}
    assert stored == {f"gsm8k/test/{i:04d}" for i in range(N_ITEMS)}


def test_database_refuses_a_second_row_for_an_item(db_path: str) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as server:
        assert run_cli(*run_args(server, db_path)[:-2], "--limit", "3").exit_code == 0
    with sqlite3.connect(db_path) as conn:
        columns = [r[1] for r in conn.execute("pragma table_info(items)") if r[1] != "id"]
        copy = f"insert into items ({', '.join(columns)}) select {', '.join(columns)} from items limit 1"
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed: items.run_id, items.item_id"):
            conn.execute(copy)
        assert conn.execute("select count(*) from items").fetchone()[0] == 3
