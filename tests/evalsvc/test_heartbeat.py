"""A runner beats while it works; a run whose runner died without a word reads as "stalled", not "running"."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from db import queries
from db.engine import open_store
from evalsvc.run.runner import RunSpec, run_evaluation
from tests.conftest import GSM8K_TEST, ROOT, run_cli, stored_count, wrong_when
from tests.fake_openai import FakeOpenAI, Reply, gsm8k_oracle

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("status", "silent_s", "shown"), [
    ("running", 5, "running"),
    ("running", queries.STALLED_AFTER_S + 1, "stalled"),
    ("complete", 10_000, "complete"),
    ("failed", 10_000, "failed"),
    ("interrupted", 10_000, "interrupted"),
])
def test_only_a_silent_running_run_reads_stalled(status: str, silent_s: float, shown: str) -> None:
    assert queries.shown_status(status, NOW - timedelta(seconds=silent_s), now=NOW) == shown


def test_naive_times_from_sqlite_count_as_utc_and_runs_without_beats_keep_their_status() -> None:
    naive = (NOW - timedelta(seconds=queries.STALLED_AFTER_S + 1)).replace(tzinfo=None)
    assert queries.shown_status("running", naive, now=NOW) == "stalled"
    assert queries.shown_status("running", None, now=NOW) == "running"  # a run stored before heartbeats existed


def beats(db: str) -> list[str]:
    with sqlite3.connect(db, timeout=30) as conn:
        return [row[0] for row in conn.execute("select heartbeat_at from runs")]


BEATS = 5


def test_a_live_run_keeps_beating(monkeypatch: pytest.MonkeyPatch, db_path: str) -> None:
    monkeypatch.setattr(queries, "HEARTBEAT_S", 0.1)
    seen: set[str] = set()
    moved = threading.Condition()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                new = {b for b in beats(db_path) if b} - seen
            except sqlite3.OperationalError:  # tables not made yet
                new = set()
            with moved:
                seen.update(new)
                moved.notify_all()
            time.sleep(0.02)

    oracle = gsm8k_oracle(wrong_when)

    def respond(body: dict) -> Reply:
        # The first answers wait for the store to show one more beat each: the run cannot end before it beat
        # BEATS times, however fast or slow the machine; a heartbeat that never moves leaves the wait to time out.
        with moved:
            moved.wait_for(lambda: len(seen) >= BEATS, timeout=60)
        return oracle(body)

    watcher = threading.Thread(target=watch)
    with FakeOpenAI(respond) as server:
        store = open_store(db_path)
        watcher.start()
        try:
            spec = RunSpec(endpoint="alive", base_url=server.base_url, model="fake-model", task="gsm8k",
                           data=GSM8K_TEST, limit=4, concurrency=2)
            outcome = run_evaluation(store, spec, progress=False)
        finally:
            done.set()
            watcher.join()
            store.dispose()
    assert outcome.summary.status == "complete"
    assert len(seen) >= BEATS, f"the heartbeat moved only {len(seen)} times while the run waited for it"


@pytest.mark.slow
def test_a_run_killed_with_kill_9_reads_stalled_and_resumes(monkeypatch: pytest.MonkeyPatch, db_path: str) -> None:
    args = ["run", "--endpoint", "victim", "--model", "fake-model", "--data", GSM8K_TEST, "--db", db_path,
            "--no-progress", "--limit", "40", "--concurrency", "2"]
    with FakeOpenAI(gsm8k_oracle(wrong_when), latency_s=0.05) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", *args, "--url", server.base_url], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not stored_count(db_path):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        runs = run_cli("runs", "--db", db_path)
        assert " running " in runs.output  # just killed: not silent long enough to tell
        monkeypatch.setattr(queries, "STALLED_AFTER_S", 0.5)
        time.sleep(1.0)
        runs = run_cli("runs", "--db", db_path)
        assert runs.exit_code == 0 and " stalled " in runs.output and " running " not in runs.output
        resumed = run_cli(*args, "--url", server.base_url)
    assert resumed.exit_code == 0, resumed.output
    assert " complete " in run_cli("runs", "--db", db_path).output
