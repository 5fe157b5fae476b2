"""Launching a ladder step: start its server, wait until it is healthy, stop its whole process group after.

Every launch is guarded by `evalsvc.ladder.servers` (a watchdog and a record),
so that no server outlives the run that started it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from evalsvc.ladder.file import SECRET_ENV, LadderStep, LaunchSpec
from evalsvc.ladder.servers import STOP_GRACE_S, ServerGuard, launched_on, stop_left_servers
from evalsvc.ladder.watchdog import group_members
from evalsvc.run.status import read_log_tail
from harness.redact import MaskedError, scrub_env

log = logging.getLogger(__name__)

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}
FIRST_POLL_S = 0.05  # the first pause between health checks of a launched server


class StepLaunchError(MaskedError, RuntimeError):
    """A step's server could not be started; carries the step name and its log tail."""

    def __init__(self, step: str, message: str, log_path: Path | None = None, log_tail: str = "") -> None:
        text = f"step '{step}': {message}"
        if log_path is not None:
            text += f"\nlog: {log_path}"
        if log_tail:
            text += f"\nlast log lines:\n{log_tail}"
        super().__init__(text)
        self.step = step
        self.log_path = log_path
        self.log_tail = log_tail


class PortInUseError(StepLaunchError):
    """Something already listens on the port a step's server needs."""


class StepExitedError(StepLaunchError):
    """The launch command ended before its health URL answered."""


class StepHealthTimeout(StepLaunchError):
    """The health URL did not answer within `startup_timeout_s`."""


@dataclass(frozen=True)
class LaunchedStep:
    """A step whose endpoint is ready; `pid` is None when it was not launched by us."""

    step: LadderStep
    base_url: str
    pid: int | None = None
    log_path: Path | None = None


@contextlib.contextmanager
def launch_step(
    step: LadderStep, log_dir: Path, poll_interval_s: float = 0.5, stop_grace_s: float = STOP_GRACE_S
) -> Iterator[LaunchedStep]:
    """Start the step's server, wait until healthy, yield it, then stop its process group.

    Steps without a `launch` section are yielded as they are. The command runs
    in a new session (its own process group) with stdout and stderr in
    `log_dir/<step>.log`; on exit the whole group gets SIGTERM, then SIGKILL
    after `stop_grace_s`. Raises a StepLaunchError subclass naming the step.
    """
    if step.launch is None:
        yield LaunchedStep(step=step, base_url=step.base_url)
        return
    launch = step.launch
    stop_left_servers(stop_grace_s)
    _check_ports_free(step)
    log_path = step_log_path(log_dir, step.name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_bytes(b"")
    with ServerGuard(step.name, log_path, stop_grace_s) as guard:
        proc = _start(step, launch, log_path, guard.env)
        guard.attach(proc.pid, launch.command, _local_ports(step))
        try:
            _wait_healthy(step, proc, log_path, poll_interval_s)
            log.info("step '%s' is healthy (pid %d, log %s)", step.name, proc.pid, log_path)
            yield LaunchedStep(step=step, base_url=step.base_url, pid=proc.pid, log_path=log_path)
        finally:
            stop_process_group(proc, grace_s=stop_grace_s)


def _start(step: LadderStep, launch: LaunchSpec, log_path: Path, guard_env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    log.info("starting step '%s': %s", step.name, shlex.join(launch.command))
    env = {**scrub_env(dict(os.environ), SECRET_ENV), **launch.env, **guard_env}
    with open(log_path, "ab") as log_file:
        try:
            return subprocess.Popen(
                launch.command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )
        except OSError as exc:
            raise StepLaunchError(
                step.name, f"cannot run {launch.command[0]!r}: {exc.strerror or exc}", log_path
            ) from exc


def _wait_healthy(step: LadderStep, proc: subprocess.Popen[bytes], log_path: Path, poll_interval_s: float) -> None:
    assert step.launch is not None
    deadline = time.monotonic() + step.launch.startup_timeout_s
    pause = min(FIRST_POLL_S, poll_interval_s)  # doubles up to poll_interval_s: a quick server is seen quickly
    with httpx.Client(timeout=httpx.Timeout(5.0), trust_env=False) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise StepExitedError(
                    step.name, f"the launch command exited with code {code} before {step.launch.health_url} "
                    "answered", log_path, read_log_tail(log_path),
                )
            if _is_healthy(client, step.launch.health_url):
                return
            if time.monotonic() >= deadline:
                raise StepHealthTimeout(
                    step.name, f"{step.launch.health_url} did not answer 200 within "
                    f"{step.launch.startup_timeout_s:g}s; raise launch.startup_timeout_s or check the log",
                    log_path, read_log_tail(log_path),
                )
            time.sleep(pause)
            pause = min(pause * 2, poll_interval_s)


def _is_healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def _local_endpoints(step: LadderStep) -> list[tuple[str, int]]:
    assert step.launch is not None
    return sorted({_local_endpoint(step.base_url), _local_endpoint(step.launch.health_url)} - {None})  # type: ignore[type-var]


def _local_ports(step: LadderStep) -> list[int]:
    return sorted({port for _, port in _local_endpoints(step)})


def _check_ports_free(step: LadderStep) -> None:
    for host, port in _local_endpoints(step):
        if port_is_free(host, port):
            continue
        holders = [r for r in launched_on([port]) if r.launcher_alive]
        if holders:
            raise PortInUseError(
                step.name, f"port {port} on {host} is in use by the server of {holders[0].describe()}, which "
                f"a running evalsvc (pid {holders[0].launcher_pid}) launched; let that run finish or stop it",
            )
        raise PortInUseError(
            step.name, f"port {port} on {host} is already in use; stop whatever listens there "
            f"(e.g. `ss -ltnp 'sport = :{port}'`) or give this step another port",
        )


def _local_endpoint(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in _LOCAL_HOSTS or parts.port is None:
        return None
    return ("127.0.0.1" if host in ("localhost", "0.0.0.0") else host.strip("[]"), parts.port)


def port_is_free(host: str, port: int) -> bool:
    """True when a server could bind `host:port` now (TIME_WAIT leftovers do not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL what is left after `grace_s`."""
    pgid = proc.pid  # start_new_session=True makes the child its group leader
    _signal_group(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log.warning("process group %d ignored SIGTERM for %gs; sending SIGKILL", pgid, grace_s)
    if group_alive(pgid):
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_alive(pgid):
        log.warning("process group %d still has live members after SIGKILL", pgid)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while a non-zombie process belongs to process group `pgid`."""
    return bool(group_members(pgid))


def step_log_path(log_dir: Path, step_name: str) -> Path:
    """Where `launch_step` writes a step's server output."""
    return Path(log_dir) / f"{_slug(step_name)}.log"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "step"
