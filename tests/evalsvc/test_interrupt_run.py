"""Ctrl-C during `evalsvc run`, at 20 different moments, against a slow scripted server over real HTTP.

Each time: exit 130, the one documented line on stderr (no traceback, no "Aborted!"), the run marked
interrupted, every item stored before still there; then the same command finishes the run with each item
exactly once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import RESUME_HINT
from tests.conftest import GSM8K_TEST, ROOT, wrong_when
from tests.fake_openai import FakeOpenAI, gsm8k_oracle

LIMIT = 80
CONCURRENCY = 2
MOMENTS = 20


def run_argv(server: FakeOpenAI, db: Path) -> list[str]:
    return [sys.executable, "-m", "evalsvc.cli", "run", "--endpoint", "step3", "--url", server.base_url,
            "--model", "fake-model", "--data", GSM8K_TEST, "--limit", str(LIMIT), "--concurrency",
            str(CONCURRENCY), "--no-progress", "--db", str(db)]


def stored(db: Path) -> tuple[list[str], set[str]]:
    """(statuses of every run, ids of the items answered without error)."""
    if not db.exists():
        return [], set()
    with sqlite3.connect(db, timeout=60) as conn:
        statuses = [row[0] for row in conn.execute("select status from runs order by id")]
        items = [row[0] for row in conn.execute("select item_id from items where status = 'ok'")]
    assert len(items) == len(set(items)), "an item stored twice"
    return statuses, set(items)


def wait_for_moment(server: FakeOpenAI, moment: int, gets_before: int, requests_before: int) -> None:
    """Moment 0 of every five: the run's first request (GET /v1/models, before the run is opened again);
    otherwise once 1 to 4 new item requests arrived, then 0 to 90 ms later (mid-reply, mid-commit)."""
    kind = (moment + 1) % 5
    if kind == 0:
        arrived = server.wait_until(lambda s: len(s.gets) > gets_before)
    else:
        arrived = server.wait_until(lambda s: len(s.requests) >= requests_before + kind)
        time.sleep(0.03 * (moment // 5 + kind % 2))
    assert arrived, f"moment {moment}: the run never reached the server"


@pytest.mark.slow
def test_ctrl_c_at_twenty_moments_always_exits_130_and_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "evalsvc.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kept: set[str] = set()
    with FakeOpenAI(gsm8k_oracle(wrong_when), latency_s=0.15) as server:
        for moment in range(MOMENTS):
            gets_before, requests_before = len(server.gets), len(server.requests)
            proc = subprocess.Popen(run_argv(server, db), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            try:
                wait_for_moment(server, moment, gets_before, requests_before)
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=120)  # a hang fails here
            finally:
                if proc.poll() is None:
                    proc.kill()
            statuses, items = stored(db)
            where = f"moment {moment}: exit {proc.returncode}, stderr {err!r}, stdout {out!r}"
            assert proc.returncode == 130, where
            # Before the run is opened again (moment 4, 9, ...) the line cannot name it yet.
            lines = [line for line in err.splitlines() if not (moment == 0 and line.startswith("created a new"))]
            assert lines in ([f"interrupted by SIGINT: run 1 interrupted; {RESUME_HINT}"],
                                        [f"interrupted by SIGINT: stopped; {RESUME_HINT}"]), where
            assert statuses == ["interrupted"], where
            assert kept <= items, f"{where}: lost {sorted(kept - items)}"
            assert len(items) < LIMIT, where
            kept = items
        finished = subprocess.run(run_argv(server, db), env=env, capture_output=True, text=True, timeout=300)
        asked = len(server.requests)
    assert finished.returncode == 0, finished.stderr
    assert f"(resumed, {len(kept)} items already done)" in finished.stdout
    statuses, items = stored(db)
    assert statuses == ["complete"] and len(items) == LIMIT
    # Each interrupt may cost at most the items in flight; everything stored was asked for once.
    assert LIMIT <= asked <= LIMIT + MOMENTS * CONCURRENCY


SIGNAL_AT_EXIT = """
import atexit, os, signal, sys
from evalsvc.cli import main
# Runs among the exit functions, after the command has finished and printed: a Ctrl-C (or kill) that comes
# while the program is leaving.
atexit.register(lambda: os.kill(os.getpid(), signal.{sig}))
main(sys.argv[1:], prog_name="evalsvc")
"""


@pytest.mark.slow  # a CLI process per case
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_command_finished_still_ends_in_one_line_and_its_exit_code(
        sig: signal.Signals, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as server:
        argv = run_argv(server, tmp_path / "evalsvc.db")
        argv[argv.index("--limit") + 1] = "2"
        done = subprocess.run([sys.executable, "-c", SIGNAL_AT_EXIT.format(sig=sig.name), *argv[3:]], env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 128 + sig, done.stderr
    assert "run 1 step3 gsm8k: complete" in done.stdout  # the command's output is all there
    lines = [line for line in done.stderr.splitlines() if not line.startswith("created a new")]
    assert lines == [f"interrupted by {sig.name}: stopped; {RESUME_HINT}"], done.stderr
    statuses, items = stored(tmp_path / "evalsvc.db")
    assert statuses == ["complete"] and len(items) == 2


SIGNAL_WHILE_LOADING = """
import importlib.abc, os, signal, sys

class CtrlCOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "evalsvc.cli.runs":  # a command module, half-way through loading the command line
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlCOnImport())
from evalsvc.cli import main
print("loaded", flush=True)
main(sys.argv[1:], prog_name="evalsvc")
"""


@pytest.mark.slow  # a CLI process per case
def test_ctrl_c_while_the_command_line_loads_ends_in_one_line_and_130(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_LOADING, "runs", "--db", str(tmp_path / "x.db")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (130, "loaded\n"), done.stderr  # the command never started
    assert done.stderr == f"interrupted by SIGINT: stopped; {RESUME_HINT}\n"
