"""The dashboard's server says it is ready only once every page's first view is computed."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from streamlit.runtime import Runtime

from dashboard import serve
from tests.conftest import ROOT, free_port


class FakeRuntime:
    def __init__(self) -> None:
        self.asked = 0

    @property
    async def is_ready_for_browser_connection(self) -> tuple[bool, str]:
        self.asked += 1
        return True, "ok"


def test_readiness_waits_for_the_warm_up_then_asks_the_runtime() -> None:
    class Gated(FakeRuntime):
        pass

    warmed, seen_before_set = threading.Event(), []
    serve.ready_once_warm(Gated, warmed, wait_s=60)
    runtime = Gated()

    def finish_warm_up() -> None:
        seen_before_set.append(runtime.asked)  # the runtime is not asked while the warm-up runs
        warmed.set()

    timer = threading.Timer(0.2, finish_warm_up)
    timer.start()
    assert asyncio.run(runtime.is_ready_for_browser_connection) == (True, "ok")
    timer.join()
    assert seen_before_set == [0] and runtime.asked == 1
    assert asyncio.run(FakeRuntime().is_ready_for_browser_connection) == (True, "ok")  # the base class is untouched


def test_a_warm_up_that_never_ends_delays_readiness_only_by_the_bound() -> None:
    class Gated(FakeRuntime):
        pass

    serve.ready_once_warm(Gated, threading.Event(), wait_s=0.05)
    assert asyncio.run(Gated().is_ready_for_browser_connection) == (True, "ok")


def test_the_installed_streamlit_has_the_readiness_the_gate_wraps() -> None:
    class Gated(Runtime):
        pass

    serve.ready_once_warm(Gated, threading.Event(), wait_s=1)
    assert isinstance(Runtime.__dict__["is_ready_for_browser_connection"], property)
    assert Gated.__dict__["is_ready_for_browser_connection"].fget is not (
        Runtime.__dict__["is_ready_for_browser_connection"].fget)


HELD_SERVER = """
import sys, time
from pathlib import Path
from dashboard import data, serve

release = Path(sys.argv[1])
def held_warm_up(url):
    while not release.exists():
        time.sleep(0.02)
data.warm_up = held_warm_up
sys.argv = ["dashboard.serve", *sys.argv[2:]]
serve.main()
"""


@pytest.mark.slow
def test_the_real_server_answers_health_only_after_the_warm_up(tmp_path: Path) -> None:
    release, port = tmp_path / "release", free_port()
    argv = [sys.executable, "-c", HELD_SERVER, str(release), "--server.headless", "true", "--server.port", str(port),
            "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
            "--", "--db", str(tmp_path / "store.db")]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # until the server listens
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the server never listened"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        health = f"http://127.0.0.1:{port}/_stcore/health"
        for _ in range(3):  # listening, but held: health does not say ok
            with pytest.raises(httpx.TimeoutException):
                httpx.get(health, timeout=0.5)
        release.touch()
        answer = httpx.get(health, timeout=60)
        assert (answer.status_code, answer.text) == (200, "ok")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
