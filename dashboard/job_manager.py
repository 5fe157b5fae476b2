"""Runs started from the dashboard, in the background, through the `evalsvc run` command.

A job is a detached process (its own session, so it outlives a browser reload
and a dashboard restart) that calls the CLI in-process with the same
arguments a person would type, so the dashboard never has a second code path
to an endpoint. Each job leaves a small JSON file and a log next to the store;
the dashboard lists jobs from those files and reads progress from the store.

Run as `python -m dashboard.job_manager JOB_FILE` (that is how `start_job`
launches it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from db.engine import DB_ENV, data_dir, to_url
from evalsvc.report.masking import has_credentials, mask_url
from evalsvc.run.command import key_environment
from evalsvc.run.interrupts import INTERRUPTED_EXIT_CODES, hear_ctrl_c

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 4000
START_GRACE_S = 120.0  # a job without a pid yet is still importing, not lost


class JobError(ValueError):
    """A run cannot be started from the form as filled in."""


@dataclass(frozen=True)
class EvalRequest:
    """What the Evaluate form asks for; mirrors `evalsvc run` options."""

    endpoint: str
    base_url: str
    model: str
    tasks: tuple[str, ...]
    limit: int | None = None
    data: str | None = None
    max_tokens: int | None = None
    concurrency: int = 8
    repeat: bool = False
    template: str | None = None


@dataclass(frozen=True)
class SpeedRequest:
    """What the speed form asks for; mirrors `evalsvc speed` options (a vendor figure when `tokens_per_second`)."""

    endpoint: str
    workload: str
    limit: int = 20
    tokens_per_second: float | None = None
    source: str = ""


@dataclass(frozen=True)
class Job:
    """One background run as recorded on disk."""

    job_id: str
    endpoint: str
    tasks: tuple[str, ...]
    argv: tuple[str, ...]
    started_at: float
    log_path: str
    pid: int | None = None
    returncode: int | None = None
    finished_at: float | None = None
    workload: str | None = None  # the workload a speed job measures; None for an evaluation (of `tasks`)

    @property
    def state(self) -> str:
        """starting, running, finished, failed (non-zero exit), interrupted (SIGINT, SIGTERM or SIGHUP: exit
        130, 143 or 129) or lost (died unrecorded, e.g. SIGKILL)."""
        if self.returncode is not None:
            if self.returncode in INTERRUPTED_EXIT_CODES:
                return "interrupted"
            return "finished" if self.returncode == 0 else "failed"
        if self.pid is None:
            return "starting" if time.time() - self.started_at < START_GRACE_S else "lost"
        return "running" if pid_alive(self.pid) else "lost"


# --- where jobs live ---------------------------------------------------------------


def jobs_dir(db_url: str) -> Path:
    """Folder of job files: next to an SQLite store, else under the user's data folder."""
    url = to_url(db_url)
    if url.startswith("sqlite:///") and ":memory:" not in url:
        path = Path(url.split("///", 1)[1])
        return path.parent / f"{path.name}.dashboard-jobs"
    digest = hashlib.sha256(mask_url(url).encode()).hexdigest()[:12]  # the password changes nothing here
    return data_dir() / "dashboard-jobs" / digest


def run_argv(request: EvalRequest) -> list[str]:
    """The `evalsvc` arguments for the request, as typed on a command line; the store comes from $EVALSVC_DB."""
    check_request(request)
    task = request.tasks[0] if len(request.tasks) == 1 else "all"
    argv = ["run", "--endpoint", request.endpoint, "--url", request.base_url, "--model", request.model,
            "--task", task, "--no-progress"]
    if request.limit:
        argv += ["--limit", str(request.limit)]
    if request.data:
        argv += ["--data", request.data]
    if request.max_tokens:
        argv += ["--max-tokens", str(request.max_tokens)]
    argv += ["--concurrency", str(request.concurrency)]
    if request.repeat:
        argv.append("--repeat")
    if request.template:
        argv += ["--template", request.template]
    return argv


def speed_argv(request: SpeedRequest) -> list[str]:
    """The `evalsvc speed` arguments for the request: measure, or store a vendor figure with its source."""
    argv = ["speed", "--endpoint", request.endpoint, "--workload", request.workload]
    if request.tokens_per_second is None:
        if request.source.strip():  # as `evalsvc speed` refuses --source without --tokens-per-second
            raise JobError(f"A source ({request.source.strip()!r}) was entered without its tokens per second: enter "
                           "the figure, or clear the source to measure the server.")
        return argv + ["--limit", str(request.limit)]
    if request.tokens_per_second <= 0:
        raise JobError(f"A decode speed entered by hand must be above 0 tok/s, got {request.tokens_per_second:g}.")
    if not request.source.strip():
        raise JobError(f"Fill in where the figure of {request.tokens_per_second:g} tok/s comes from "
                       "(e.g. vendor table, 2026-11).")
    return argv + ["--tokens-per-second", f"{request.tokens_per_second:g}", "--source", request.source.strip()]


def check_request(request: EvalRequest) -> None:
    """Refuse a form that `evalsvc run` would refuse, before anything is started."""
    from evalsvc.run.command import TASK_NAMES

    labels = {"endpoint": "a name for this step", "base_url": "the server address", "model": "the model name"}
    missing = [label for name, label in labels.items() if not getattr(request, name).strip()]
    if missing:
        raise JobError(f"Fill in {' and '.join(missing)}.")
    check_url(request.base_url)
    if has_credentials(request.base_url):
        raise JobError(f"the URL {mask_url(request.base_url)} carries a password or key, which would be stored and "
                       "shown; remove it and give the key in the API key field")
    unknown = [t for t in request.tasks if t not in TASK_NAMES]
    if not request.tasks or unknown:
        raise JobError(f"pick tasks among {', '.join(TASK_NAMES)}" + (f"; unknown: {unknown}" if unknown else ""))
    if len(request.tasks) not in (1, len(TASK_NAMES)):
        raise JobError("pick one task or all of them")


def check_url(url: str) -> None:
    """Refuse what is not an http(s) address with a host: spaces, no host, a bad port."""
    from urllib.parse import urlsplit

    example = "e.g. http://127.0.0.1:30000/v1"
    if not url.startswith(("http://", "https://")):
        raise JobError(f"The server address must start with http:// or https://, got {url!r} ({example}).")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise JobError(f"The server address {url!r} has a port that is not a number ({example}).") from None
    if not parts.hostname or any(ch.isspace() for ch in url):
        raise JobError(f"The server address {url!r} is not a valid address ({example}).")


# --- starting and listing ---------------------------------------------------------------


def start_job(request: EvalRequest | SpeedRequest, db_url: str, api_key: str | None = None) -> Job:
    """Start `evalsvc run` (or `evalsvc speed`) for the request in a detached process; returns the recorded job.

    The store URL and the API key go to the child through its environment only, never to its command line
    or to disk.
    """
    folder = jobs_dir(db_url)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    job_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 100000}"
    speed = isinstance(request, SpeedRequest)
    argv = speed_argv(request) if speed else run_argv(request)
    tasks, workload = ((), request.workload) if speed else (request.tasks, None)
    job = Job(job_id=job_id, endpoint=request.endpoint, tasks=tasks, workload=workload, argv=tuple(argv),
              started_at=time.time(), log_path=str(folder / f"{job_id}.log"))
    job_file = folder / f"{job_id}.json"
    _write(job_file, job)
    env = {**os.environ, DB_ENV: to_url(db_url), **key_environment(api_key)}
    with open(job.log_path, "ab") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dashboard.job_manager", str(job_file)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    # Reap the child when it ends so it does not linger as a zombie of the dashboard server.
    threading.Thread(target=proc.wait, daemon=True).start()
    log.info("started job %s (pid %d): evalsvc %s", job_id, proc.pid, " ".join(job.argv))
    return job


def list_jobs(db_url: str) -> list[Job]:
    """Jobs started from the dashboard on this store, newest first."""
    folder = jobs_dir(db_url)
    if not folder.is_dir():
        return []
    jobs = [job for path in folder.glob("*.json") if (job := _read(path)) is not None]
    return sorted(jobs, key=lambda job: job.started_at, reverse=True)


def stop_job(job: Job) -> bool:
    """Ask a running job to stop as Ctrl-C would: finished items stay stored. False if it was not running."""
    if job.pid is None or job.state != "running":
        return False
    try:
        os.killpg(job.pid, signal.SIGINT)
    except ProcessLookupError:
        return False
    return True


def log_tail(job: Job, limit: int = LOG_TAIL_BYTES) -> str:
    """The end of the job's log."""
    try:
        with open(job.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


# --- job files ------------------------------------------------------------------------------


def _write(path: Path, job: Job) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(job)))
    tmp.replace(path)  # atomic, so a reader never sees half a file


def _read(path: Path) -> Job | None:
    try:
        raw = json.loads(path.read_text())
        return Job(**{**raw, "tasks": tuple(raw["tasks"]), "argv": tuple(raw["argv"])})
    except (OSError, ValueError, TypeError, KeyError):
        log.warning("skipping unreadable job file %s", path)
        return None


def _with(job: Job, **changes: object) -> Job:
    return Job(**{**asdict(job), "tasks": job.tasks, "argv": job.argv, **changes})


# --- the detached process -------------------------------------------------------------------


def run_job(job_file: Path) -> int:
    """Run the job's `evalsvc` command in this process and record its pid and exit code.

    Only this process writes the job file after it is created, so the two
    writes never race.
    """
    job = _read(job_file)
    if job is None:
        return 2
    job = _with(job, pid=os.getpid())
    _write(job_file, job)
    from evalsvc.cli import main as cli

    try:
        cli.main(args=list(job.argv), prog_name="evalsvc", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    _write(job_file, _with(job, returncode=code, finished_at=time.time()))
    return code


if __name__ == "__main__":
    # The Stop button sends SIGINT, which a dashboard started as `evalsvc dashboard &` from a script passes on ignored.
    hear_ctrl_c()
    sys.exit(run_job(Path(sys.argv[1])))
