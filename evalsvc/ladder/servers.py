"""Servers evalsvc launched: a watchdog per launch, a record of each, and
stopping what an earlier run left behind. Long setup commands run for a user
(the engine build) are guarded the same way (`run_guarded`).

Every launch is guarded three ways, so that no server outlives its run:

1. the launcher stops the server's process group when the step ends, also on
   Ctrl-C, SIGTERM and SIGHUP (see `evalsvc.run.interrupts`);
2. a watchdog process (`evalsvc/ladder/watchdog.py`) stops it when the launcher dies
   without a word (SIGKILL, out of memory);
3. each launch is recorded in `$EVALSVC_HOME/launched/<launch id>.json`
   (process group, leader start time, command, ports, who launched it), and
   the next launch stops any recorded server whose launcher is gone
   (`stop_left_servers`), should both of the above have been killed too.

A process is taken for a launched server only with proof: it is the recorded
group leader with its recorded start time (so a reused pid does not count),
or its environment carries the launch id. Anything else, whatever port it
holds, is never touched. The proof comes from /proc: without it (not Linux)
the watchdog takes the group id its launcher gave it on trust, and the
registry proves nothing alive, so it stops nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evalsvc.home import evalsvc_home
from evalsvc.ladder import watchdog
from evalsvc.ladder.watchdog import LAUNCH_ENV

log = logging.getLogger(__name__)

REGISTRY_DIR = "launched"
# SIGTERM, then SIGKILL this much later: a server that hangs on SIGTERM is still gone within 10 s of a
# signal to the runner (issue 19), and SGLang shuts down well within it.
STOP_GRACE_S = 5.0
WATCHDOG_MARGIN_S = 10.0  # beyond its two grace periods; a watchdog still busy then is left to finish


@dataclass(frozen=True)
class LaunchRecord:
    """What the registry keeps about one launch."""

    launch_id: str
    step: str
    command: tuple[str, ...]
    ports: tuple[int, ...]
    pgid: int
    leader_starttime: int | None
    boot_id: str
    launcher_pid: int
    launcher_starttime: int | None
    started_at: float
    log_path: str

    @property
    def launcher_alive(self) -> bool:
        """True while the evalsvc process that launched the server still runs."""
        return watchdog.process_alive(self.launcher_pid, self.launcher_starttime)

    def alive(self) -> bool:
        """True while anything of the launched server is alive (checked against pid reuse)."""
        return self.boot_id == boot_id() and watchdog.server_left(self.pgid, self.leader_starttime, self.launch_id)

    def describe(self) -> str:
        ports = ", ".join(map(str, self.ports)) or "none recorded"
        return (f"step '{self.step}' (process group {self.pgid}, port {ports}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started_at))}, log {self.log_path})")


def registry_dir() -> Path:
    """`$EVALSVC_HOME/launched`: one JSON file per launched server that has not been stopped yet."""
    return evalsvc_home() / REGISTRY_DIR


def boot_id() -> str:
    """This boot's id: pids and start times from another boot mean nothing."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _starttime(pid: int) -> int | None:
    stat = watchdog.proc_stat(pid)
    return stat.starttime if stat is not None else None


# ---------------------------------------------------------------- guarding one launch


class ServerGuard:
    """The watchdog and the record of one launch.

    Use as a context manager around starting and stopping the server: enter
    before starting it (the watchdog must already run if the launcher dies a
    moment later), pass `env` to the server, call `attach` once it runs, and
    leave after stopping it.
    """

    def __init__(self, step: str, log_path: Path, grace_s: float) -> None:
        self.launch_id = uuid.uuid4().hex
        self.step = step
        self.log_path = log_path
        self.grace_s = grace_s
        self.record: LaunchRecord | None = None
        self._pipe: int | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        """What the server's environment must carry so that its processes can be recognised."""
        return {LAUNCH_ENV: self.launch_id}

    def __enter__(self) -> "ServerGuard":
        read_end, self._pipe = os.pipe()
        try:
            with open(self.log_path, "ab") as log_file:
                self._watchdog = subprocess.Popen(
                    [sys.executable, "-I", "-S", watchdog.__file__, str(read_end), self.launch_id, str(self.grace_s)],
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, pass_fds=(read_end,),
                    start_new_session=True, env={},  # it needs no variable, so it holds none of the runner's secrets
                )
        except BaseException:
            os.close(self._pipe)
            raise
        finally:
            os.close(read_end)
        return self

    def attach(self, pid: int, command: Sequence[str], ports: Sequence[int]) -> LaunchRecord:
        """Tell the watchdog the server's group (`pid` leads it) and record the launch."""
        assert self._pipe is not None
        try:
            os.write(self._pipe, f"{pid}\n".encode())
        except OSError as exc:  # the watchdog is gone already: the launcher's own stop and the record remain
            log.warning("the watchdog of step '%s' is not running (%s; see %s)", self.step, exc, self.log_path)
        self.record = LaunchRecord(
            launch_id=self.launch_id, step=self.step, command=tuple(command), ports=tuple(ports), pgid=pid,
            leader_starttime=_starttime(pid), boot_id=boot_id(), launcher_pid=os.getpid(),
            launcher_starttime=_starttime(os.getpid()), started_at=time.time(), log_path=str(self.log_path),
        )
        try:
            write_record(self.record)
        except OSError as exc:  # the watchdog still guards the server; only a later clean-up loses track of it
            log.warning("cannot record the launch of step '%s' in %s (%s); should this run and its watchdog "
                        "both be killed, stop the server by hand", self.step, registry_dir(), exc.strerror or exc)
        return self.record

    def __exit__(self, *exc: object) -> None:
        if self._pipe is not None:
            os.close(self._pipe)  # the watchdog sees end of file and stops whatever is still running
            self._pipe = None
        if self._watchdog is not None:
            try:
                self._watchdog.wait(timeout=2 * self.grace_s + WATCHDOG_MARGIN_S)
            except subprocess.TimeoutExpired:
                log.warning("the watchdog of step '%s' is still stopping its server (pid %d)",
                            self.step, self._watchdog.pid)
        if self.record is not None and not self.record.alive():
            forget_record(self.launch_id)


def run_guarded(label: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str],
                capture: bool = False) -> tuple[int, bytes]:
    """Run a command to its end in a process group of its own, guarded as a launched server is.

    For long commands evalsvc runs for a user (the engine build: pip, cmake and
    the compilers under them): if this process is interrupted (Ctrl-C,
    SIGTERM, SIGHUP) or dies (SIGKILL), the command and everything it started
    stop too. Output goes to `log_path` (stdout to the caller when `capture`).
    Returns (exit code, captured stdout).
    """
    with open(log_path, "ab") as log_file, ServerGuard(label, log_path, STOP_GRACE_S) as guard:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if capture else log_file, stderr=log_file,
                                env={**env, **guard.env}, start_new_session=True)
        try:
            guard.attach(proc.pid, argv, ())
            out, _ = proc.communicate()
            return proc.returncode, out or b""
        finally:
            if proc.poll() is None:  # interrupted: stop the group now rather than wait for the watchdog
                watchdog.stop_server(proc.pid, _starttime(proc.pid), guard.launch_id, STOP_GRACE_S)
                proc.wait()


# ---------------------------------------------------------------- the registry


def _record_path(launch_id: str) -> Path:
    return registry_dir() / f"{launch_id}.json"


def write_record(record: LaunchRecord) -> None:
    """Write the record atomically, readable by its owner only (a command line may hold a secret)."""
    folder = registry_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{record.launch_id}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(record), handle)
    tmp.replace(_record_path(record.launch_id))


def forget_record(launch_id: str) -> None:
    try:
        _record_path(launch_id).unlink(missing_ok=True)
    except OSError as exc:  # a record that stays is dropped by a later launch once its server has ended
        log.debug("cannot remove launch record %s: %s", launch_id, exc)


def read_records() -> list[LaunchRecord]:
    """Every record in the registry; unreadable files are skipped with a warning."""
    folder = registry_dir()
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            raw = json.loads(path.read_text())
            record = LaunchRecord(**{**raw, "command": tuple(raw["command"]), "ports": tuple(raw["ports"])})
            _check_record(record, path)
        except (OSError, ValueError, TypeError, KeyError):
            log.warning("skipping unreadable launch record %s", path)
            continue
        records.append(record)
    return records


def _check_record(record: LaunchRecord, path: Path) -> None:
    """ValueError unless the record could have come from `ServerGuard.attach` for this file."""
    if path.name != f"{record.launch_id}.json" or not re.fullmatch(r"[0-9a-f]{32}", record.launch_id):
        raise ValueError("launch id does not match the file name")
    if not isinstance(record.pgid, int) or record.pgid <= 1 or not isinstance(record.launcher_pid, int):
        raise ValueError("not a process group evalsvc could have started")


def live_servers() -> list[LaunchRecord]:
    """Servers evalsvc launched that are still alive, oldest first. Only looks: changes nothing.

    `record.launcher_alive` tells a server in use by a running evalsvc from
    one left behind.
    """
    return sorted((r for r in read_records() if r.alive()), key=lambda r: r.started_at)


def stop_left_servers(grace_s: float = STOP_GRACE_S) -> list[LaunchRecord]:
    """Stop every live launched server whose launcher is gone, and forget the records of ended ones;
    returns the servers it stopped."""
    stopped = []
    for record in read_records():
        if not record.alive():
            forget_record(record.launch_id)
            continue
        if record.launcher_alive:
            continue
        log.warning("stopping the server of %s: an earlier evalsvc run (pid %d) launched it and left it running",
                    record.describe(), record.launcher_pid)
        if watchdog.stop_server(record.pgid, record.leader_starttime, record.launch_id, grace_s):
            forget_record(record.launch_id)
        else:
            log.warning("process group %d of step '%s' survived SIGKILL", record.pgid, record.step)
        stopped.append(record)
    return stopped


def launched_on(ports: Sequence[int]) -> list[LaunchRecord]:
    """Live launched servers recorded on any of these ports."""
    wanted = set(ports)
    return [r for r in live_servers() if wanted & set(r.ports)]
