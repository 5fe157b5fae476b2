"""Shared fixtures: a GSM8K oracle server, a fresh SQLite store, a CLI runner; and the rule for missing tools:
a test that needs one (`@pytest.mark.needs_tool(path, install_hint)`) skips locally with the reason, and fails
under `CI=true`, where every test must run."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn

import pytest
from click.testing import CliRunner, Result

from evalsvc.run.interrupts import hear_ctrl_c
from tests.fake_openai import GSM8K_TEST_FILE, FakeOpenAI, gsm8k_oracle

ROOT = Path(__file__).resolve().parents[1]
# Tests that build or use the embedded engine under ~/.cache/evalsvc or start the demo on its fixed ports
# 8391-8393: pytest-xdist (`--dist loadgroup`) gives them all to one worker, so two never meet.
ENGINE_GROUP = pytest.mark.xdist_group("embedded-engine")
GSM8K_TEST = str(GSM8K_TEST_FILE)
STOP_BOUND_S = 10.0  # issue 19: nothing evalsvc started for a run is left 10 s after a signal stops it


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip with `reason` locally; under CI=true fail with it, so that a broken setup never passes as green."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true runs every test, so what it needs must be there", pytrace=False)
    pytest.skip(reason)


def needs_tool(path: str, install: str) -> pytest.MarkDecorator:
    """Mark a test that needs the program `path` (a name on PATH or an absolute path); `install` says how to get it."""
    return pytest.mark.needs_tool(path, install)


needs_bwrap = needs_tool("bwrap", "apt-get install bubblewrap")


def check_tools(item: Any) -> None:
    """Skip or fail (see `skip_or_fail`) a test whose `needs_tool` programs are missing."""
    for mark in item.iter_markers("needs_tool"):
        path, install = mark.args
        if shutil.which(path) is None:
            skip_or_fail(f"{path} not found ({install})")


def pytest_configure(config: pytest.Config) -> None:
    """Run as at a terminal, where Ctrl-C reaches the program: a suite started as a script's background job
    (`pytest &`) would otherwise pass SIGINT on ignored to every Ctrl-C test and each command it starts.
    Likewise SIGHUP: under `nohup` it arrives ignored, and evalsvc rightly leaves an ignored SIGHUP alone, so
    every test of what a closed terminal does would fail (4 failures in a busy CI run started with nohup)."""
    hear_ctrl_c()
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_runtest_setup(item: pytest.Item) -> None:
    check_tools(item)


def wrong_when(question: str) -> bool:
    """A deterministic rule for which questions the oracle gets wrong (about a quarter)."""
    return len(question) % 4 == 0


@pytest.fixture(autouse=True)
def whole_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports print whole lines unless a test asks for a width: a $COLUMNS in the caller's shell (or set by
    a test runner) would otherwise fold the lines the tests read."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def oracle_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as server:
        yield server


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process clients wait a twentieth of their backoff between retries (Retry-After is still honoured in
    full): the same attempts, classified the same way, in less time."""
    from harness.client import RetryPolicy

    real = RetryPolicy.delay

    def delay(policy: RetryPolicy, attempt: int, retry_after: float | None) -> float:
        return real(policy, attempt, retry_after) if retry_after is not None else real(policy, attempt, None) / 20

    monkeypatch.setattr(RetryPolicy, "delay", delay)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "evalsvc.db")


def store_run(db: str, name: str, wrong: Callable[[str], bool], tokens: Callable[[str], int], *extra: str,
              limit: int = 120) -> None:
    """Store a GSM8K run of `limit` items for endpoint `name` through the CLI, answered by the oracle."""
    with FakeOpenAI(gsm8k_oracle(wrong, tokens)) as server:
        result = run_cli("run", "--endpoint", name, "--url", server.base_url, "--model", "fake-model",
                         "--data", GSM8K_TEST, "--db", db, "--limit", str(limit), "--no-progress", *extra)
    assert result.exit_code == 0, result.output


def stored_count(db: str) -> int:
    """Items stored so far in the SQLite file at `db`, read as another process would; 0 before the runner made its
    tables (and without creating the file, which the runner must find absent)."""
    if not Path(db).exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return conn.execute("select count(*) from items").fetchone()[0]
    except sqlite3.OperationalError:  # no items table yet: the runner is still migrating
        return 0


def copy_store(source: str, target: str) -> str:
    """Copy the SQLite store at `source` to `target` with SQLite's backup (its write-ahead log included)."""
    with sqlite3.connect(source) as original, sqlite3.connect(target) as copy:
        original.backup(copy)
    return target


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_cli(*args: str) -> Result:
    """Invoke the CLI in-process; exceptions other than exits propagate."""
    from evalsvc.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def run_cli_process(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "evalsvc.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def load_json(text: str) -> dict:
    return json.loads(text)


class StatusLines(logging.Handler):
    """Collects the `evalsvc.run.status` lines a test's code says, and lets the test wait for some."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self._changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        with self._changed:
            self.lines.append(record.getMessage())
            self._changed.notify_all()

    def wait_until(self, holds: Callable[[list[str]], bool], timeout: float = 60.0) -> bool:
        """True once `holds(lines)`; False after `timeout` seconds (generous: it only bounds a broken run)."""
        with self._changed:
            return self._changed.wait_for(lambda: holds(self.lines), timeout)


@pytest.fixture
def status_lines() -> Iterator[StatusLines]:
    from evalsvc.run.status import STATUS_LOGGER

    logger = logging.getLogger(STATUS_LOGGER)
    handler, level = StatusLines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries the test's tag (read from /proc, not from evalsvc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"EVALSVC_TEST_TAG={tag}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until_gone(find: Callable[[], list[int]], timeout_s: float = STOP_BOUND_S) -> tuple[list[int], float]:
    """Poll until `find()` is empty or `timeout_s` has passed; (what is left, seconds waited)."""
    started = time.monotonic()
    while (left := find()) and time.monotonic() - started < timeout_s:
        time.sleep(0.05)
    return left, time.monotonic() - started


def process_tree(root: int) -> list[tuple[int, int]]:
    """(pid, start time) of `root` and every live descendant, from /proc (sandboxed ones too, whose environment
    is cleared)."""
    parents: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else None
        except (OSError, IndexError):
            continue
        if fields and fields[0] != "Z":
            parents[int(entry.name)] = (int(fields[1]), int(fields[19]))
    tree, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        if pid in parents:
            tree.append((pid, parents[pid][1]))
            frontier.extend(child for child, (ppid, _) in parents.items() if ppid == pid)
    return tree


def still_running(processes: list[tuple[int, int]]) -> list[int]:
    """Those of `processes` (pid, start time) that still run: a reused pid does not count."""
    left = []
    for pid, started in processes:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[19]) == started:
            left.append(pid)
    return left
