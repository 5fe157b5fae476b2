"""The watchdog of a launched server: when the evalsvc process that launched a
server goes, however it goes (SIGKILL and the out-of-memory killer included),
the server and everything it started go too.

`evalsvc.ladder.servers` runs this file as a script, standard library only and
without importing the package, so it starts in tens of milliseconds whatever
PYTHONPATH says:

    python -I -S watchdog.py FD LAUNCH_ID GRACE_S

The launcher starts the watchdog first, in its own session, keeping the write
end of a pipe whose read end is FD; it then starts the server with
`EVALSVC_LAUNCH_ID=LAUNCH_ID` in its environment and writes the server's
process group id to the pipe. The kernel closes the write end when the
launcher exits for any reason, so end of file on FD means "the launcher is
gone, or the step is over". The watchdog then sends SIGTERM to the server's
process group and to every process whose environment carries the launch id
(a server process that started its own session), and SIGKILL to whatever is
left after GRACE_S. It exits by itself once nothing of the server is left.

Why not a parent-death signal (prctl PR_SET_PDEATHSIG) alone: it fires when
the launching *thread* exits rather than the process, and it reaches only the
direct child, while SGLang runs several processes. The watchdog is in a
session of its own, so a Ctrl-C or hang-up meant for the launcher's terminal
does not reach it.

The functions below that read /proc are also how `evalsvc.ladder.servers` tells a
process evalsvc launched from one that merely reuses its pid.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import NamedTuple

LAUNCH_ENV = "EVALSVC_LAUNCH_ID"
POLL_S = 1.0  # how often an idle watchdog checks whether the server is still there
_PROC = Path("/proc")


class ProcStat(NamedTuple):
    """The fields of /proc/<pid>/stat that identify a process."""

    state: str
    pgrp: int
    starttime: int  # clock ticks after boot: with the pid, unique until reboot


def proc_stat(pid: int) -> ProcStat | None:
    """The process's state, group and start time, or None when there is no such process."""
    try:
        fields = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the command name: state (field 3), ppid, pgrp (5), ... starttime (22)
    return ProcStat(fields[0], int(fields[2]), int(fields[19]))


def process_alive(pid: int, starttime: int | None) -> bool:
    """True when `pid` runs, is no zombie and (if given) started at `starttime`: not a reused pid."""
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z" and (starttime is None or stat.starttime == starttime)


def _pids() -> list[int]:
    return [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group `pgid`."""
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for pid in _pids():
        stat = proc_stat(pid)
        if stat is not None and stat.pgrp == pgid and stat.state != "Z":
            members.append(pid)
    return members


def carries_launch(pid: int, launch_id: str) -> bool:
    """True when the process's environment holds `EVALSVC_LAUNCH_ID=launch_id` (unreadable counts as no)."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{LAUNCH_ENV}={launch_id}".encode() in environ.split(b"\0")


def launched_processes(launch_id: str) -> list[int]:
    """Live processes whose environment carries the launch id, wherever their group is."""
    if not _PROC.is_dir():
        return []
    return [pid for pid in _pids() if pid != os.getpid() and carries_launch(pid, launch_id)
            and process_alive(pid, None)]


def group_is_launch(pgid: int, leader_starttime: int | None, launch_id: str) -> bool:
    """True when group `pgid` is the one the launch started, not a later group that reuses the number.

    While any member lives the number cannot be reused, so one member that
    carries the launch id, or the leader with its recorded start time, proves it.
    """
    members = group_members(pgid)
    if pgid in members and leader_starttime is not None and process_alive(pgid, leader_starttime):
        return True
    return any(carries_launch(pid, launch_id) for pid in members)


def _group_is_launch(pgid: int | None, leader_starttime: int | None, launch_id: str, trust_group: bool) -> bool:
    if pgid is None:
        return False
    if trust_group and not _PROC.is_dir():  # nothing to prove it with: the launcher's word must do
        return bool(group_members(pgid))
    return group_is_launch(pgid, leader_starttime, launch_id)


def server_left(pgid: int | None, leader_starttime: int | None, launch_id: str, trust_group: bool = False) -> bool:
    """True while anything of the launched server is alive.

    `trust_group`: without /proc (not Linux) take group `pgid` for the
    launch's while it exists; only the watchdog, told the id by its launcher
    a moment ago, may.
    """
    if _group_is_launch(pgid, leader_starttime, launch_id, trust_group):
        return True
    return bool(launched_processes(launch_id))


def stop_server(pgid: int | None, leader_starttime: int | None, launch_id: str, grace_s: float,
                trust_group: bool = False) -> bool:
    """SIGTERM the launch's group and marked processes, SIGKILL what is left after `grace_s`.

    Returns True when nothing of the server is left at the end.
    """
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        _signal_launch(pgid, leader_starttime, launch_id, sig, trust_group)
        deadline = time.monotonic() + wait_s
        while server_left(pgid, leader_starttime, launch_id, trust_group):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return True
    return not server_left(pgid, leader_starttime, launch_id, trust_group)


def _signal_launch(pgid: int | None, leader_starttime: int | None, launch_id: str, sig: signal.Signals,
                   trust_group: bool) -> None:
    if pgid is not None and _group_is_launch(pgid, leader_starttime, launch_id, trust_group):
        _quiet(os.killpg, pgid, sig)
    for pid in launched_processes(launch_id):
        _quiet(os.kill, pid, sig)


def _quiet(kill, target: int, sig: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    try:
        kill(target, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(fd: int, launch_id: str, grace_s: float) -> None:
    """Wait for end of file on `fd` (learning the group id on the way), then stop the server."""
    pgid: int | None = None
    starttime: int | None = None
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], POLL_S)
        if ready:
            data = os.read(fd, 64)
            if not data:
                break
            pending += data
            if b"\n" in pending and pgid is None:
                pgid = int(pending.split(b"\n", 1)[0])
                stat = proc_stat(pgid)
                starttime = stat.starttime if stat is not None else None
        elif pgid is not None and not server_left(pgid, starttime, launch_id, trust_group=True):
            return  # the server ended by itself; nothing left to guard
    if server_left(pgid, starttime, launch_id, trust_group=True):
        print(f"evalsvc watchdog: the launcher of {launch_id} is gone; stopping its server", file=sys.stderr)
        stop_server(pgid, starttime, launch_id, grace_s, trust_group=True)


def main(argv: list[str]) -> int:
    fd, launch_id, grace_s = int(argv[0]), argv[1], float(argv[2])
    for sig in (signal.SIGINT, signal.SIGHUP):  # only end of file on the pipe means "stop"
        signal.signal(sig, signal.SIG_IGN)
    watch(fd, launch_id, grace_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
