"""A launched step's server never outlives its `ladder run`: whatever signal stops
the runner (SIGINT, SIGTERM, SIGHUP, SIGKILL), no process of the server is left
10 seconds later, and the same command then resumes and completes. A server
left by a run whose watchdog died too is stopped by the next run; a process
evalsvc did not launch is never touched.

The server is the scripted fake OpenAI server over real HTTP, launched by the
ladder file, with a forked child that keeps the listening socket (as SGLang's
worker processes do). Processes are found independently of evalsvc's own
bookkeeping: by a tag the test puts in the launch environment.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from evalsvc.doctor import check_launched_servers
from evalsvc.ladder import servers
from evalsvc.ladder import watchdog
from evalsvc.ladder.file import LadderStep, LaunchSpec
from evalsvc.ladder.launch import PortInUseError, launch_step, port_is_free
from evalsvc.ladder.watchdog import proc_stat, process_alive
from tests.conftest import ENGINE_GROUP, GSM8K_TEST, ROOT, STOP_BOUND_S, free_port, tagged_processes, wait_until_gone
from tests.evalsvc.test_crash_resume import stored_count
from tests.evalsvc.test_embedded import install_standin

pytestmark = ENGINE_GROUP

N_ITEMS = 40
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGKILL: -signal.SIGKILL}


def processes_naming(text: str) -> list[int]:
    """Live processes whose command line contains `text` (to find a launch's watchdog by its launch id)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


class LadderSetup:
    """A one-step ladder whose step launches the fake server, and the command that evaluates it."""

    def __init__(self, tmp_path: Path, latency_s: float = 0.2, n_items: int = N_ITEMS, speed_n: int = 0,
                 ignore_term: bool = False) -> None:
        self.tag = uuid.uuid4().hex
        self.home = tmp_path / "home"
        self.db = str(tmp_path / "evalsvc.db")
        self.port = free_port()
        self.pid_file = tmp_path / "server.pids"
        command = [sys.executable, "-m", "tests.fake_openai", "--port", str(self.port), "--latency", str(latency_s),
                   "--fork-child", "--pid-file", str(self.pid_file)] + (["--ignore-term"] if ignore_term else [])
        self.ladder = tmp_path / "ladder.yaml"
        self.ladder.write_text(f"""
name: signals
steps:
  - name: served
    base_url: http://127.0.0.1:{self.port}/v1
    model: fake-model
    launch:
      command: {json.dumps(command)}
      startup_timeout_s: 120
      env: {{PYTHONPATH: "{ROOT}", EVALSVC_TEST_TAG: "{self.tag}"}}
""")
        self.args = [sys.executable, "-m", "evalsvc.cli", "ladder", "run", str(self.ladder), "--task", "gsm8k",
                     "--limit", str(n_items), "--data", GSM8K_TEST, "--db", self.db, "--no-progress",
                     "--concurrency", "2", "--speed", str(speed_n)]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSVC_HOME": str(self.home)}

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen(self.args, env=self.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def run(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.args, "--json"], env=self.env, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)

    def start_mid_step(self, stored_at_least: int = 4) -> subprocess.Popen[str]:
        """Start the runner and return once it has stored some items of the launched step."""
        proc = self.start()
        self.wait_mid_step(proc, stored_at_least)
        return proc

    def wait_mid_step(self, proc: subprocess.Popen[str], stored_at_least: int = 4,
                      terminal: int | None = None) -> None:
        deadline = time.monotonic() + 240
        while stored_count(self.db) < stored_at_least:
            if proc.poll() is not None:
                pytest.fail(f"the runner exited early ({proc.returncode}): "
                            f"{proc.stderr.read()[-2000:] if proc.stderr else ''}")
            assert time.monotonic() < deadline, "the runner stored nothing in 240 s"
            if terminal is not None:  # read what the runner writes, so it never blocks on a full terminal
                while select.select([terminal], [], [], 0)[0]:
                    os.read(terminal, 65536)
            time.sleep(0.05)

    def records(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in (self.home / "launched").glob("*.json")]

    def server_pids(self) -> list[int]:
        return [int(line) for line in self.pid_file.read_text().split()]

    def runs_and_items(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            runs = conn.execute("select id, status from runs").fetchall()
            items = conn.execute("select id, item_id from items order by id").fetchall()
        return runs, items


def check_resume_completes(setup: LadderSetup, run_id: int, kept: list[tuple[int, str]]) -> None:
    """The same command finishes the same run, keeping the rows stored before the stop, and leaves nothing."""
    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    (step,) = json.loads(result.stdout)["steps"]
    assert step["error"] is None and step["run_ids"] == [run_id]
    runs, items = setup.runs_and_items()
    assert runs == [(run_id, "complete")]
    assert len(items) == N_ITEMS == len({item_id for _, item_id in items})
    assert items[: len(kept)] == kept  # the rows finished before the stop were kept, not redone
    assert tagged_processes(setup.tag) == []
    assert setup.records() == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_signal_mid_step_stops_the_server_and_the_same_command_resumes(tmp_path: Path, sig: signal.Signals) -> None:
    setup = LadderSetup(tmp_path)
    proc = setup.start_mid_step()
    (record,) = setup.records()
    leader, child = setup.server_pids()
    assert sorted(tagged_processes(setup.tag)) == sorted([leader, child])
    assert os.getpgid(child) == leader == record["pgid"]

    proc.send_signal(sig)
    left, waited = wait_until_gone(lambda: tagged_processes(setup.tag) + processes_naming(record["launch_id"]))
    assert left == [], f"{sig.name}: processes {left} still alive {waited:.1f} s after the signal"
    proc.wait(timeout=60)
    stderr = proc.stderr.read()
    assert proc.returncode == EXIT_CODES[sig], stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]

    runs, kept = setup.runs_and_items()
    (run_id, status), = runs
    assert status == ("running" if sig == signal.SIGKILL else "interrupted")
    assert 4 <= len(kept) < N_ITEMS
    if sig != signal.SIGKILL:
        assert f"interrupted by {sig.name}: run {run_id} interrupted" in stderr
        assert setup.records() == []
    check_resume_completes(setup, run_id, kept)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_server_that_ignores_sigterm_is_still_gone_within_the_bound(tmp_path: Path, sig: signal.Signals) -> None:
    setup = LadderSetup(tmp_path, ignore_term=True)
    proc = setup.start_mid_step()
    (record,) = setup.records()
    proc.send_signal(sig)
    left, waited = wait_until_gone(lambda: tagged_processes(setup.tag) + processes_naming(record["launch_id"]))
    assert left == [], f"{sig.name}: processes {left} still alive {waited:.1f} s after the signal"
    assert proc.wait(timeout=60) == EXIT_CODES[sig]
    runs, kept = setup.runs_and_items()
    (run_id, _), = runs
    check_resume_completes(setup, run_id, kept)


@pytest.mark.slow
def test_a_server_left_by_a_killed_run_and_watchdog_is_stopped_by_the_next_run(tmp_path: Path) -> None:
    setup = LadderSetup(tmp_path)
    proc = setup.start_mid_step()
    (record,) = setup.records()
    (watchdog,) = processes_naming(record["launch_id"])
    leader, child = setup.server_pids()
    # Kill the runner and its watchdog at once: only the registry can find the server now.
    os.kill(watchdog, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(1.0)  # time for anything that might still clean up to do so (nothing should)
    assert child in tagged_processes(setup.tag)
    assert not port_is_free("127.0.0.1", setup.port)
    runs, kept = setup.runs_and_items()
    (run_id, _), = runs

    result = setup.run()
    assert "an earlier evalsvc run" in result.stderr and f"process group {leader}" in result.stderr
    assert f"port {setup.port}" in result.stderr
    check_resume_completes(setup, run_id, kept)


# ---------------------------------------------------------------- in-process: the registry's proof of identity


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def fake_step(tmp_path: Path, port: int, tag: str) -> LadderStep:
    command = (sys.executable, "-m", "tests.fake_openai", "--port", str(port), "--fork-child")
    return LadderStep(name="served", base_url=f"http://127.0.0.1:{port}/v1", model="fake-model",
                      launch=LaunchSpec(command=command, health_url=f"http://127.0.0.1:{port}/v1/models",
                                        startup_timeout_s=120,
                                        env={"PYTHONPATH": str(ROOT), "EVALSVC_TEST_TAG": tag}))


def test_live_servers_lists_a_running_launch_and_forgets_it_once_stopped(tmp_path: Path, home: Path) -> None:
    tag = uuid.uuid4().hex
    port = free_port()
    with launch_step(fake_step(tmp_path, port, tag), tmp_path / "logs", poll_interval_s=0.1) as launched:
        (live,) = servers.live_servers()
        assert (live.step, live.pgid, live.ports, live.launcher_pid) == ("served", launched.pid, (port,), os.getpid())
        assert live.launcher_alive and live.command[1:3] == ("-m", "tests.fake_openai")
        assert servers.stop_left_servers() == []  # its launcher (this process) is alive: not touched
        assert len(tagged_processes(tag)) == 2
    assert servers.live_servers() == [] and tagged_processes(tag) == []
    assert list((home / "launched").iterdir()) == []


def test_a_record_whose_pid_was_reused_by_another_process_is_never_acted_on(tmp_path: Path, home: Path) -> None:
    """A stale record names a pid that now belongs to a process evalsvc did not launch: it stays untouched,
    and a launch on the port that process holds is refused as before."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], pass_fds=(busy.fileno(),),
                                   start_new_session=True)
        try:
            stat = proc_stat(foreign.pid)
            assert stat is not None
            servers.write_record(servers.LaunchRecord(
                launch_id=uuid.uuid4().hex, step="old", command=("sglang",), ports=(port,), pgid=foreign.pid,
                leader_starttime=stat.starttime - 1, boot_id=servers.boot_id(), launcher_pid=foreign.pid,
                launcher_starttime=stat.starttime - 1, started_at=time.time() - 3600, log_path="/dev/null",
            ))
            assert servers.live_servers() == []
            with pytest.raises(PortInUseError) as info:
                with launch_step(fake_step(tmp_path, port, "x"), tmp_path / "logs"):
                    pytest.fail("the body must not run")
            assert f"port {port} on 127.0.0.1 is already in use" in str(info.value)
            assert foreign.poll() is None and process_alive(foreign.pid, stat.starttime)
        finally:
            foreign.kill()
            foreign.wait()


def run_statuses(db: str) -> list[str]:
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return [status for (status,) in conn.execute("select status from runs")]
    except sqlite3.OperationalError:  # no store or no tables yet
        return []


def speed_workloads(db: str) -> list[str]:
    with sqlite3.connect(db, timeout=30) as conn:
        return sorted(w for (w,) in conn.execute("select workload from speed_runs"))


@pytest.mark.slow
def test_sigterm_during_the_speed_probe_stops_the_server_and_the_probe_resumes(tmp_path: Path) -> None:
    setup = LadderSetup(tmp_path, n_items=6, speed_n=5)
    proc = setup.start()
    deadline = time.monotonic() + 240
    while run_statuses(setup.db) != ["complete"]:  # the evaluation is done: timing has begun
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "the evaluation did not finish in 240 s"
        time.sleep(0.05)
    (record,) = setup.records()
    proc.send_signal(signal.SIGTERM)
    left, waited = wait_until_gone(lambda: tagged_processes(setup.tag) + processes_naming(record["launch_id"]))
    assert left == [], f"processes {left} still alive {waited:.1f} s after SIGTERM"
    proc.wait(timeout=60)
    stderr = proc.stderr.read()
    assert proc.returncode == 143 and "interrupted by SIGTERM" in stderr and "Traceback" not in stderr, stderr
    assert speed_workloads(setup.db) == []  # a probe cut short stores nothing
    (run_id, _), = setup.runs_and_items()[0]

    result = setup.run()
    assert result.returncode == 0, result.stderr[-3000:]
    (step,) = json.loads(result.stdout)["steps"]
    assert (step["run_ids"], step["reused"], step["error"]) == ([run_id], ["gsm8k"], None)
    assert speed_workloads(setup.db) == ["chat", "math"]
    assert tagged_processes(setup.tag) == [] and setup.records() == []


def test_records_of_ended_servers_are_only_looked_at_by_live_servers_and_dropped_by_the_next_launch(
    home: Path
) -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait()
    servers.write_record(servers.LaunchRecord(
        launch_id=uuid.uuid4().hex, step="old", command=("srv",), ports=(1,), pgid=ended.pid, leader_starttime=1,
        boot_id=servers.boot_id(), launcher_pid=ended.pid, launcher_starttime=1, started_at=time.time(),
        log_path="/dev/null",
    ))
    assert servers.live_servers() == [] and len(servers.read_records()) == 1
    assert servers.stop_left_servers() == [] and servers.read_records() == []


@pytest.mark.parametrize("change", [{"pgid": 0}, {"pgid": 1}, {"pgid": -5}, {"launch_id": "../../escape"},
                                    {"pgid": "12"}])
def test_a_malformed_record_is_skipped_never_acted_on(home: Path, change: dict) -> None:
    raw = {"launch_id": uuid.uuid4().hex, "step": "x", "command": ["srv"], "ports": [1], "pgid": os.getpgid(0),
           "leader_starttime": None, "boot_id": servers.boot_id(), "launcher_pid": 999999999,
           "launcher_starttime": None, "started_at": time.time(), "log_path": "/dev/null"}
    name = raw["launch_id"]
    (home / "launched").mkdir(parents=True)
    (home / "launched" / f"{name}.json").write_text(json.dumps({**raw, **change}))
    assert servers.read_records() == []
    assert servers.stop_left_servers() == [] and (home / "launched" / f"{name}.json").exists()


def test_an_unwritable_registry_is_a_warning_and_the_launch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "home"
    not_a_folder.write_text("")
    monkeypatch.setenv("EVALSVC_HOME", str(not_a_folder))
    tag = uuid.uuid4().hex
    with caplog.at_level(logging.WARNING, logger="evalsvc.ladder.servers"):
        with launch_step(fake_step(tmp_path, free_port(), tag), tmp_path / "logs", poll_interval_s=0.1) as launched:
            assert httpx.get(f"{launched.base_url}/models", trust_env=False).status_code == 200
            assert len(tagged_processes(tag)) == 2
    assert "cannot record the launch of step 'served'" in caplog.text
    assert tagged_processes(tag) == []


def test_doctor_lists_a_server_in_use_then_one_left_behind_which_the_next_launch_stops(
    tmp_path: Path, home: Path
) -> None:
    assert check_launched_servers().status == "none"
    tag = uuid.uuid4().hex
    with launch_step(fake_step(tmp_path, free_port(), tag), tmp_path / "logs", poll_interval_s=0.1) as launched:
        in_use = check_launched_servers()
        assert (in_use.ok, in_use.status) == (True, "1 in use")
        assert f"process group {launched.pid}" in in_use.detail and f"in use by evalsvc pid {os.getpid()}" in in_use.detail

    # A server whose launcher is gone: its process carries the launch id, its launcher's pid is a dead process.
    launch_id, dead = uuid.uuid4().hex, subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                            env={**os.environ, "EVALSVC_LAUNCH_ID": launch_id, "EVALSVC_TEST_TAG": tag})
    try:
        servers.write_record(servers.LaunchRecord(
            launch_id=launch_id, step="orphan", command=("srv",), ports=(1234,), pgid=left.pid,
            leader_starttime=proc_stat(left.pid).starttime, boot_id=servers.boot_id(), launcher_pid=dead.pid,
            launcher_starttime=None, started_at=time.time(), log_path="/dev/null",
        ))
        row = check_launched_servers()
        assert (row.ok, row.status, row.required) == (False, "1 left running", False)
        assert "step 'orphan'" in row.detail and f"LEFT BEHIND by evalsvc pid {dead.pid}" in row.detail
        assert row.fix.endswith(f"kill -TERM -- -{left.pid}")
        (stopped,) = servers.stop_left_servers()
        assert stopped.launch_id == launch_id and left.wait(timeout=30) == -signal.SIGTERM
        assert check_launched_servers().status == "none" and servers.read_records() == []
    finally:
        left.kill()
        left.wait()


def test_a_port_held_by_a_server_that_a_running_evalsvc_launched_is_named_not_stopped(
    tmp_path: Path, home: Path
) -> None:
    tag, port = uuid.uuid4().hex, free_port()
    step = fake_step(tmp_path, port, tag)
    with launch_step(step, tmp_path / "logs", poll_interval_s=0.1) as launched:
        with pytest.raises(PortInUseError) as info:
            with launch_step(step, tmp_path / "other-logs"):
                pytest.fail("the body must not run")
        assert (f"port {port} on 127.0.0.1 is in use by the server of step 'served' (process group {launched.pid}"
                in str(info.value))
        assert f"which a running evalsvc (pid {os.getpid()}) launched" in str(info.value)
        assert len(tagged_processes(tag)) == 2
        (watchdog,) = processes_naming(servers.read_records()[0].launch_id)
        assert Path(f"/proc/{watchdog}/environ").read_bytes() == b""  # none of the runner's variables
    assert tagged_processes(tag) == []


def test_without_proc_the_watchdog_trusts_its_group_and_the_registry_stops_nothing(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch_id = uuid.uuid4().hex
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                              env={**os.environ, "EVALSVC_LAUNCH_ID": launch_id})
    try:
        servers.write_record(servers.LaunchRecord(
            launch_id=launch_id, step="s", command=("srv",), ports=(1,), pgid=server.pid, leader_starttime=None,
            boot_id=servers.boot_id(), launcher_pid=999999999, launcher_starttime=None, started_at=time.time(),
            log_path="/dev/null"))
        monkeypatch.setattr(watchdog, "_PROC", tmp_path / "no-proc")  # as on macOS
        assert servers.stop_left_servers() == [] and server.poll() is None
        read_end, write_end = os.pipe()
        os.write(write_end, f"{server.pid}\n".encode())
        os.close(write_end)  # the launcher is gone
        threading.Thread(target=server.wait, daemon=True).start()  # reaped as init reaps an orphan
        watchdog.watch(read_end, launch_id, grace_s=5.0)
        os.close(read_end)
        assert server.wait(timeout=30) == -signal.SIGTERM  # stopped through its group id alone
    finally:
        server.kill()
        server.wait()


def take_terminal() -> None:
    """In the child: the new session's controlling terminal is its stdin (a pty slave)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.slow
def test_closing_the_terminal_stops_the_server_and_the_same_command_resumes(tmp_path: Path) -> None:
    """The SSH session closes: the kernel hangs up the runner's terminal (SIGHUP) while its progress bar
    writes to it."""
    setup = LadderSetup(tmp_path)
    terminal, runner_side = os.openpty()
    with_progress = [arg for arg in setup.args if arg != "--no-progress"]
    proc = subprocess.Popen(with_progress, env=setup.env, cwd=ROOT, stdin=runner_side, stdout=runner_side,
                            stderr=runner_side, start_new_session=True, preexec_fn=take_terminal)
    os.close(runner_side)
    try:
        setup.wait_mid_step(proc, terminal=terminal)
    finally:
        os.close(terminal)  # the terminal goes away: the kernel sends SIGHUP to its session
    (record,) = setup.records()
    left, waited = wait_until_gone(lambda: tagged_processes(setup.tag) + processes_naming(record["launch_id"]))
    assert left == [], f"processes {left} still alive {waited:.1f} s after the hang-up"
    assert proc.wait(timeout=60) == 129
    runs, kept = setup.runs_and_items()
    (run_id, status), = runs
    assert status == "interrupted" and 4 <= len(kept) < N_ITEMS
    check_resume_completes(setup, run_id, kept)


# ---------------------------------------------------------------- setup commands run for a user: the engine build


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_to_the_demo_mid_build_stops_the_build(tmp_path: Path, sig: signal.Signals) -> None:
    home, tag = tmp_path / "home", uuid.uuid4().hex
    install_standin(home)  # builds until released (never, here)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSVC_HOME": str(home), "EVALSVC_TEST_TAG": tag,
           "STANDIN_RELEASE": str(tmp_path / "never")}
    proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", "demo", "--db", str(tmp_path / "demo.db")],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    build_log = home / "logs" / "llama-cpp-build.log"
    deadline = time.monotonic() + 120
    while not (build_log.exists() and "Building C object" in build_log.read_text()):
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "the stand-in build never started"
        time.sleep(0.05)
    builders = [pid for pid in tagged_processes(tag) if pid != proc.pid]
    assert builders, "no build process to stop"
    proc.send_signal(sig)
    left, waited = wait_until_gone(lambda: tagged_processes(tag))
    assert left == [], f"{sig.name}: {left} still alive {waited:.1f} s after the signal (builders {builders})"
    assert proc.wait(timeout=60) == EXIT_CODES[sig]
    # stopped by its own runner, the build leaves no record; after SIGKILL the watchdog stopped it and the
    # record stays until the next launch drops it
    assert len(list((home / "launched").glob("*.json"))) == (1 if sig == signal.SIGKILL else 0)


def test_run_guarded_returns_the_exit_code_and_output_and_a_killed_caller_takes_the_group_along(
    tmp_path: Path, home: Path
) -> None:
    log_path = tmp_path / "cmd.log"
    code, out = servers.run_guarded("echo", [sys.executable, "-c", "print('hi'); raise SystemExit(3)"], log_path,
                                    dict(os.environ), capture=True)
    assert (code, out) == (3, b"hi\n") and servers.read_records() == []

    tag = uuid.uuid4().hex
    forking = ("import os, time\nif os.fork() == 0:\n    time.sleep(120)\nelse:\n    time.sleep(120)\n")
    caller = ("import os, sys; from pathlib import Path; from evalsvc.ladder.servers import run_guarded; "
              f"run_guarded('fork', [sys.executable, '-c', {forking!r}], Path({str(log_path)!r}), "
              f"{{**os.environ, 'EVALSVC_TEST_TAG': {tag!r}}})")
    proc = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while len(tagged_processes(tag)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the command never forked"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    left, waited = wait_until_gone(lambda: tagged_processes(tag))
    assert left == [], f"{left} still alive {waited:.1f} s after the caller was killed"


def test_a_watchdog_that_died_at_once_is_a_warning_and_the_server_still_stops(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "logs").mkdir()
    guard = servers.ServerGuard("served", tmp_path / "logs" / "served.log", grace_s=5.0)
    with caplog.at_level(logging.WARNING, logger="evalsvc.ladder.servers"), guard:
        assert guard._watchdog is not None
        guard._watchdog.kill()
        guard._watchdog.wait()
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                                  env={**os.environ, **guard.env})
        try:
            guard.attach(server.pid, ("sleep",), ())
            assert [r.launch_id for r in servers.live_servers()] == [guard.launch_id]
        finally:
            server.terminate()
            server.wait()
    assert "the watchdog of step 'served' is not running" in caplog.text
    assert servers.read_records() == []
