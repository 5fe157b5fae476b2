"""A dashboard job (a detached `evalsvc run`) stopped by any signal: within 10
seconds no process it started is left, its state says what happened, and
starting the same job again resumes the same run and completes it."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
import uuid
from pathlib import Path

import pytest

from dashboard import job_manager
from tests.conftest import GSM8K_TEST, ROOT, process_tree, still_running, tagged_processes, wait_until_gone
from tests.evalsvc.test_crash_resume import stored_count
from tests.fake_openai import FakeOpenAI, Reply, gsm8k_oracle

N_ITEMS = 40
STATES = {signal.SIGINT: "interrupted", signal.SIGTERM: "interrupted", signal.SIGHUP: "interrupted",
          signal.SIGKILL: "lost"}
RETURN_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGKILL: None}


def only_job(db: str) -> job_manager.Job:
    (job,) = job_manager.list_jobs(db)
    return job


def wait_mid_run(db: str, job_id: str, stored_at_least: int = 4) -> job_manager.Job:
    """The running job once it has stored some items."""
    deadline = time.monotonic() + 240
    while True:
        job = next(j for j in job_manager.list_jobs(db) if j.job_id == job_id)
        assert job.state in ("starting", "running"), job_manager.log_tail(job)
        if job.pid is not None and stored_count(db) >= stored_at_least:
            return job
        assert time.monotonic() < deadline, f"the job stored nothing in 240 s: {job_manager.log_tail(job)}"
        time.sleep(0.05)


def wait_ended(db: str, job_id: str, timeout_s: float = 240) -> job_manager.Job:
    deadline = time.monotonic() + timeout_s
    while True:
        job = next(j for j in job_manager.list_jobs(db) if j.job_id == job_id)
        if job.state not in ("starting", "running"):
            return job
        assert time.monotonic() < deadline, f"the job did not end in {timeout_s} s: {job_manager.log_tail(job)}"
        time.sleep(0.1)


def runs_and_items(db: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    with sqlite3.connect(db, timeout=30) as conn:
        return (conn.execute("select id, status from runs").fetchall(),
                conn.execute("select id, item_id from items order by id").fetchall())


@pytest.mark.slow
@pytest.mark.parametrize("sig", list(STATES), ids=lambda s: s.name)
def test_signal_to_a_dashboard_job_leaves_nothing_and_the_job_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    tag = uuid.uuid4().hex
    monkeypatch.setenv("EVALSVC_TEST_TAG", tag)  # the job inherits it, as does anything it starts
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    db = str(tmp_path / "jobs.db")
    with FakeOpenAI(gsm8k_oracle(lambda question: False), latency_s=0.2) as server:
        request = job_manager.EvalRequest("job-step", server.base_url, "fake-model", ("gsm8k",), limit=N_ITEMS,
                                         data=GSM8K_TEST, concurrency=2)
        first = job_manager.start_job(request, db)
        job = wait_mid_run(db, first.job_id)
        assert job.pid in tagged_processes(tag)

        os.kill(job.pid, sig)
        left, waited = wait_until_gone(lambda: tagged_processes(tag))
        assert left == [], (f"{sig.name}: job processes {left} still alive {waited:.1f} s after the signal\n"
                            + job_manager.log_tail(job))
        ended = wait_ended(db, first.job_id, timeout_s=30)
        assert (ended.state, ended.returncode) == (STATES[sig], RETURN_CODES[sig]), job_manager.log_tail(ended)
        runs, kept = runs_and_items(db)
        (run_id, status), = runs
        assert status == ("running" if sig == signal.SIGKILL else "interrupted")
        assert 4 <= len(kept) < N_ITEMS

        again = job_manager.start_job(request, db)
        done = wait_ended(db, again.job_id)
        assert done.state == "finished", job_manager.log_tail(done)
    runs, items = runs_and_items(db)
    assert runs == [(run_id, "complete")]
    assert len(items) == N_ITEMS == len({item_id for _, item_id in items})
    assert items[: len(kept)] == kept  # finished before the signal, kept and not redone
    assert wait_until_gone(lambda: tagged_processes(tag))[0] == []  # the job records its exit code, then exits


@pytest.mark.slow
def test_stop_reaches_a_job_whose_dashboard_ignores_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dashboard started as a script's background job has SIGINT ignored, and its jobs inherit that; the
    Stop button (SIGINT) must still stop the job, with its finished items kept."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    db = str(tmp_path / "jobs.db")
    with FakeOpenAI(gsm8k_oracle(lambda question: False), latency_s=0.2) as server:
        request = job_manager.EvalRequest("job-step", server.base_url, "fake-model", ("gsm8k",), limit=N_ITEMS,
                                         data=GSM8K_TEST, concurrency=2)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            started = job_manager.start_job(request, db)
        finally:
            signal.signal(signal.SIGINT, previous)
        assert job_manager.stop_job(wait_mid_run(db, started.job_id))
        ended = wait_ended(db, started.job_id, timeout_s=30)
    assert (ended.state, ended.returncode) == ("interrupted", 130), job_manager.log_tail(ended)
    assert 4 <= stored_count(db) < N_ITEMS


def slow_code(body: dict) -> Reply:
    """A HumanEval answer whose body sleeps a little: each item keeps a sandbox process busy."""
    return Reply(text="```python\n    import time\n    time.sleep(0.3)\n    return None\n```")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_humaneval_job_takes_its_sandbox_processes_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    db = str(tmp_path / "jobs.db")
    with FakeOpenAI(slow_code, latency_s=0.1) as server:
        request = job_manager.EvalRequest("code-step", server.base_url, "fake-model", ("humaneval",), limit=30,
                                         concurrency=2)
        first = job_manager.start_job(request, db)
        job = wait_mid_run(db, first.job_id, stored_at_least=3)
        tree = process_tree(job.pid)
        assert len(tree) >= 2, "the job runs no sandbox process: nothing to check"
        os.kill(job.pid, sig)
        left, waited = wait_until_gone(lambda: still_running(tree))
        assert left == [], f"{sig.name}: {left} of the job's processes {tree} alive {waited:.1f} s after the signal"
        assert wait_ended(db, first.job_id, timeout_s=30).state == STATES[sig]

        again = job_manager.start_job(request, db)
        done = wait_ended(db, again.job_id)
        assert done.state == "finished", job_manager.log_tail(done)
    runs, items = runs_and_items(db)
    assert [status for _, status in runs] == ["complete"] and len(items) == 30
