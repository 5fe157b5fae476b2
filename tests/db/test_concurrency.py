"""Several runs writing one SQLite file at once, each its own process, with a reader polling.

The writers start together on a file that does not exist yet, so they also
race to create and migrate it. The reader reads as the dashboard does
(`open_store`, `summarize_runs`, `items_frame`) the whole time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GSM8K_TEST, ROOT, wrong_when
from tests.fake_openai import FakeOpenAI, Reply, Responder, gsm8k_answers, gsm8k_oracle

WRITERS = 3
LIMIT = 120
READER = r"""
import json, sys, time
from pathlib import Path
from db import queries
from db.engine import open_store

db, stop, ready, progress = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
LIMIT = int(sys.argv[5])
polls, errors, history, partial = 0, [], {}, False
ready.touch()  # imports are done: the writers may start
while not Path(db).exists():
    time.sleep(0.01)
store = open_store(db)
while not stop.exists():
    try:
        with store.session() as session:
            for summary in queries.summarize_runs(session):
                frame = queries.items_frame(session, summary.run_id)
                history.setdefault(summary.endpoint, []).append((summary.n, len(frame)))
                partial = partial or 0 < summary.n < LIMIT
        polls += 1
        progress.write_text(json.dumps({"polls": polls, "partial": partial}))
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    time.sleep(0.02)
print(json.dumps({"polls": polls, "errors": errors, "history": history}))
"""


def held_until_read(respond: Responder, progress: Path, after: int) -> Responder:
    """`respond`, but once `after` requests are answered the rest wait until the reader has polled more than ten
    times and seen a run in progress: a busy machine cannot let the writers finish before the reader looks.
    The wait ends after two minutes whatever the reader did, and the assertions then say what it missed."""
    lock, served, released = threading.Lock(), [0], threading.Event()

    def reader_caught_up() -> bool:
        try:
            seen = json.loads(progress.read_text())
        except (OSError, ValueError):  # not written yet, or read while being written
            return False
        return seen["polls"] > 10 and seen["partial"]

    def respond_held(body: dict[str, Any]) -> Reply:
        with lock:
            served[0] += 1
            hold = served[0] > after
        deadline = time.monotonic() + 120
        while hold and not released.is_set() and time.monotonic() < deadline:
            if reader_caught_up():
                released.set()
            else:
                time.sleep(0.05)
        return respond(body)

    return respond_held


def writer(server: FakeOpenAI, db: str, name: str) -> subprocess.Popen[str]:
    args = ["run", "--endpoint", name, "--url", server.base_url, "--model", "fake-model", "--data", GSM8K_TEST,
            "--db", db, "--no-progress", "--limit", str(LIMIT), "--concurrency", "8", "--json"]
    return subprocess.Popen([sys.executable, "-m", "evalsvc.cli", *args], env=_env(), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_concurrent_runs_and_a_reader_share_one_sqlite_file(tmp_path: Path) -> None:
    db, stop, ready = str(tmp_path / "shared.db"), tmp_path / "stop", tmp_path / "ready"
    progress = tmp_path / "progress"
    reader = subprocess.Popen([sys.executable, "-c", READER, db, str(stop), str(ready), str(progress), str(LIMIT)],
                              env=_env(), cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:  # a slow start must not let the writers finish first
        time.sleep(0.05)
    # A quarter of the items answered, the rest wait for the reader: it meets the runs in progress.
    with FakeOpenAI(held_until_read(gsm8k_oracle(wrong_when), progress, WRITERS * LIMIT // 4)) as server:
        procs = {f"w{i}": writer(server, db, f"w{i}") for i in range(WRITERS)}
        outputs = {name: proc.communicate(timeout=300) for name, proc in procs.items()}
    time.sleep(0.2)  # let the reader see the finished state at least once
    stop.touch()
    read_out, read_err = reader.communicate(timeout=60)

    for name, (out, err) in outputs.items():
        assert "locked" not in err, f"{name}: {err}"
        assert procs[name].returncode == 0, f"{name}: {err}"
        (run,) = json.loads(out)["runs"]
        assert (run["endpoint"], run["status"], run["n"], run["errors"]) == (name, "complete", LIMIT, 0)
        assert run["correct"] == sum(not wrong_when(q) for q in list(gsm8k_answers())[:LIMIT])
    with sqlite3.connect(db) as conn:
        per_run = conn.execute("select run_id, count(*), count(distinct item_id) from items group by run_id").fetchall()
        assert conn.execute("select count(*) from alembic_version").fetchone()[0] == 1
    assert sorted(per_run) == [(i, LIMIT, LIMIT) for i in range(1, WRITERS + 1)]

    assert reader.returncode == 0, read_err
    seen = json.loads(read_out)
    assert seen["errors"] == [] and seen["polls"] > 10
    assert sorted(seen["history"]) == [f"w{i}" for i in range(WRITERS)]
    for name, points in seen["history"].items():
        counts = [n for n, _ in points]
        # items_frame reads after summarize_runs, so it may see more rows, never fewer.
        assert all(rows >= n for n, rows in points), f"{name}: items vanished between two reads: {points}"
        assert counts == sorted(counts), f"{name}: the reader saw rows disappear: {counts}"
        assert counts[-1] == LIMIT
    partial = [n for points in seen["history"].values() for n, _ in points if 0 < n < LIMIT]
    assert partial, "the reader never saw a run in progress, so it did not read while they wrote"
