"""A run against an endpoint that misbehaves on a share of requests.

Every kind of transient fault the client classifies as retryable is injected
on the first attempt of some items, and a few items fail on every attempt.
The server counts requests per item, so the test sees retries directly.

The client's timeout is tested on a stall (a request the server never answers,
whatever the machine's load) with the server recording that the client hung
up; every other run gets a timeout no busy machine trips, so an item's attempts
are the faults it met, never a reply that was merely late.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from typing import Any, Callable

import pytest

from harness.client import RetryPolicy
from tests.conftest import GSM8K_TEST, run_cli, wrong_when
from tests.fake_openai import Fault, FakeOpenAI, gsm8k_answers, gsm8k_oracle, question_of

pytestmark = pytest.mark.usefixtures("quick_backoff")  # retried items wait less; the same attempts

LIMIT = 60
TIMEOUT_S = 120.0  # whole-request limit for runs whose faults do not include a stall: no busy machine trips it
STALL_TIMEOUT_S = 2.5  # the run with a stalled item: the stall is what times out; a normal reply takes milliseconds
RETRY_AFTER_S = 1.0
MAX_ATTEMPTS = RetryPolicy().max_attempts
# By item index modulo 15: which fault its first attempt meets. 7 fails on every attempt.
FIRST_ATTEMPT_FAULTS = {
    0: Fault("status", 500),
    1: Fault("status", 429, retry_after=RETRY_AFTER_S),
    2: Fault("status", 502),
    3: Fault("drop"),
    4: Fault("malformed"),
    5: Fault("truncated"),
    6: Fault("empty_choices"),
}
ALWAYS_FAILS = 7
QUESTIONS = list(gsm8k_answers())[:LIMIT]
INDEX = {q: i for i, q in enumerate(QUESTIONS)}


class PerItemFaults:
    """A fault plan keyed by item and attempt; also counts the requests each item caused."""

    def __init__(self, first: dict[int, Fault], always: Callable[[int], Fault | None]) -> None:
        self.first, self.always = first, always
        self.attempts: Counter[int] = Counter()
        self.first_request: dict[int, int] = {}  # item -> the server's index of its first request
        self._lock = threading.Lock()

    def __call__(self, request: int, body: dict[str, Any]) -> Fault | None:
        index = INDEX[question_of(body)]
        with self._lock:
            self.attempts[index] += 1
            attempt = self.attempts[index]
            self.first_request.setdefault(index, request)
        forever = self.always(index)
        if forever is not None:
            return forever
        return self.first.get(index % 15) if attempt == 1 else None


def run_args(server: FakeOpenAI, db: str, limit: int = LIMIT, timeout_s: float = TIMEOUT_S) -> list[str]:
    return ["run", "--endpoint", "flaky", "--url", server.base_url, "--model", "fake-model", "--data", GSM8K_TEST,
            "--db", db, "--no-progress", "--limit", str(limit), "--timeout", str(timeout_s), "--concurrency", "16",
            "--json"]


def stored_items(db: str) -> dict[int, tuple[str, bool | None, int, float, str | None]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select item_id, status, correct, attempts, latency_s, error from items").fetchall()
    return {int(r[0].rsplit("/", 1)[1]): (r[1], None if r[2] is None else bool(r[2]), r[3], r[4], r[5])
            for r in rows}


def test_faulty_endpoint_run_completes_with_errors_counted_apart(db_path: str) -> None:
    plan = PerItemFaults(FIRST_ATTEMPT_FAULTS, lambda i: Fault("status", 503) if i % 15 == ALWAYS_FAILS else None)
    with FakeOpenAI(gsm8k_oracle(wrong_when), faults=plan) as server:
        result = run_cli(*run_args(server, db_path))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)["runs"][0]
    items = stored_items(db_path)
    failing = {i for i in range(LIMIT) if i % 15 == ALWAYS_FAILS}
    faulted_once = {i for i in range(LIMIT) if i % 15 in FIRST_ATTEMPT_FAULTS}
    scored = set(range(LIMIT)) - failing
    correct = sum(not wrong_when(QUESTIONS[i]) for i in scored)

    assert sorted(items) == list(range(LIMIT))
    assert (out["status"], out["n"], out["errors"], out["correct"]) == ("complete", LIMIT, len(failing), correct)
    assert out["accuracy"] == correct / len(scored)
    assert all(items[i][0] == "error" and items[i][1] is None and "HTTP 503" in items[i][4] for i in failing)
    assert all(items[i][0] == "ok" and items[i][1] == (not wrong_when(QUESTIONS[i])) for i in scored)
    # Retried within bounds: the server saw exactly what the policy allows.
    expected = {i: MAX_ATTEMPTS if i in failing else 2 if i in faulted_once else 1 for i in range(LIMIT)}
    assert dict(plan.attempts) == expected
    # A row counts every attempt the client made: those the server saw, plus any whose connection a busy machine
    # lost before the request reached the server (retried, as a connection error should be), never more than allowed.
    assert all(plan.attempts[i] <= row[2] <= MAX_ATTEMPTS for i, row in items.items())
    # Such losses are rare: a count kept wrongly (say, one too many everywhere) would show on most items.
    assert len([i for i, row in items.items() if row[2] != plan.attempts[i]]) <= LIMIT // 20
    assert {i: row[2] for i, row in items.items() if i in failing} == {i: MAX_ATTEMPTS for i in failing}


def test_retry_after_and_timeouts_show_in_item_latency(db_path: str) -> None:
    stall = {**FIRST_ATTEMPT_FAULTS, 2: Fault("stall")}
    plan = PerItemFaults(stall, lambda i: None)
    with FakeOpenAI(gsm8k_oracle(wrong_when), faults=plan) as server:
        assert run_cli(*run_args(server, db_path, limit=3, timeout_s=STALL_TIMEOUT_S)).exit_code == 0
    items = stored_items(db_path)
    # Backoff alone would wait at most 0.5 s: only honouring Retry-After explains the wait.
    assert items[1][3] >= RETRY_AFTER_S and items[1][2] == 2
    # The stalled first attempt ended because the client gave up on it (the server saw the hang-up), then a
    # retry answered; the row's latency covers the whole wait.
    assert server.hung_up == [plan.first_request[2]]
    assert items[2][0] == "ok" and items[2][2] == plan.attempts[2] >= 2 and items[2][3] >= STALL_TIMEOUT_S


def test_too_many_failing_items_mark_the_run_failed_not_low_scoring(db_path: str) -> None:
    plan = PerItemFaults({}, lambda i: Fault("status", 500) if i % 3 == 0 else None)
    with FakeOpenAI(gsm8k_oracle(lambda q: False), faults=plan) as server:
        result = run_cli(*run_args(server, db_path, limit=15))
        shown = run_cli("show", "1", "--db", db_path).output
    out = json.loads(result.stdout)["runs"][0]
    assert result.exit_code == 1
    assert (out["status"], out["errors"], out["correct"], out["accuracy"]) == ("failed", 5, 10, 1.0)
    with sqlite3.connect(db_path) as conn:
        status, error = conn.execute("select status, error from runs").fetchone()
    assert status == "failed" and error.startswith("5 of 15 items failed (more than 10%); most common error (5 of them)")
    assert "status failed" in shown and "error: 5 of 15 items failed" in shown
    assert max(plan.attempts.values()) == MAX_ATTEMPTS
