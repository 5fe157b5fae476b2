"""Status lines for long steps, so that a first run explains itself.

Before a step that can take minutes (building the engine, quantizing,
starting a step's server, evaluating a step) `long_step` says in one line what
it does, how long it took on this machine last time (or a rough figure when it
never ran here) and where its log is; while it runs, a line every
`status_interval()` seconds gives the elapsed time and the log's last line.

Durations are remembered in a small JSON file (`StepTimes`). The lines go to
the `evalsvc.run.status` logger; the CLI prints that logger's records on stderr.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

STATUS_LOGGER = "evalsvc.run.status"
INTERVAL_ENV = "EVALSVC_STATUS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0  # "at least one status line a minute", with room for a busy machine
LAST_LINE_CHARS = 160
LOG_TAIL_LINES = 20
_BUILD_STEP = re.compile(r"^(\[\d+/\d+\])\s")

log = logging.getLogger(STATUS_LOGGER)


@dataclass(frozen=True)
class LongStep:
    """A step worth announcing: `key` names its remembered duration, `doing` is a
    short gerund phrase ("building llama-cpp-python"), `why` an optional word on
    it for the first line, `usual` is said when this machine has no timing for
    it yet. `progress`, when given, says how far the step is ("4 of 10 items
    stored") in the status lines instead of the log's last line."""

    key: str
    doing: str
    usual: str
    log_path: Path | None = None
    why: str = ""
    progress: Callable[[], str] | None = field(default=None, compare=False)


class StepTimes:
    """Durations of long steps measured on this machine, kept in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def last(self, key: str) -> float | None:
        value = self._read().get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def record(self, key: str, seconds: float) -> None:
        times = {**self._read(), key: round(seconds, 1)}
        partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(times, indent=1, sort_keys=True), encoding="utf-8")
            partial.replace(self.path)
        except OSError as exc:  # a timing is a nicety: never fail a run over it
            logging.getLogger(__name__).debug("could not record %s in %s: %s", key, self.path, exc)

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def step_times(home: Path) -> StepTimes:
    """How long each long step took on this machine, remembered under `home` (`$EVALSVC_HOME`)."""
    return StepTimes(home / "step-times.json")


def status_interval() -> float:
    """Seconds between status lines: $EVALSVC_STATUS_INTERVAL, else 30."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def format_duration(seconds: float) -> str:
    """`42s`, `4m05s`, `1h02m`."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def announcement(step: LongStep, times: StepTimes | None) -> str:
    """The line said before the step starts."""
    last = times.last(step.key) if times is not None else None
    expected = f"took {format_duration(last)} here last time" if last is not None else step.usual
    where = f"; log: {step.log_path}" if step.log_path is not None else ""
    why = f" ({step.why})" if step.why else ""
    return f"{step.doing}{why}: {expected}{where}"


def heartbeat(step: LongStep, elapsed_s: float) -> str:
    """The line said every interval while the step runs."""
    line = f"still {step.doing}: {format_duration(elapsed_s)} elapsed"
    progress = _progress(step)
    if progress:
        return f"{line}; {progress}"
    last_line = _last_log_line(step.log_path)
    return f"{line}; log's last line: {last_line}" if last_line else line


def _progress(step: LongStep) -> str:
    if step.progress is None:
        return ""
    try:
        return step.progress()
    except Exception as exc:  # a status line must never stop the step it describes
        logging.getLogger(__name__).debug("progress of %s unavailable: %s", step.key, exc)
        return ""


@dataclass
class Outcome:
    """What the caller of `long_step` says about the step: `failed` holds why, when it did not finish its work."""

    failed: str = ""


@contextlib.contextmanager
def long_step(step: LongStep, times: StepTimes | None = None, beat: bool = True) -> Iterator[Outcome]:
    """Announce `step`, beat while it runs (when `beat`), and remember how long it took.

    A step that raises, or whose yielded `Outcome` is marked `failed`, is not
    remembered: its time would mislead the next announcement."""
    log.info("%s", announcement(step, times))
    started = time.monotonic()
    stop = threading.Event()
    beater = threading.Thread(target=_beat, args=(step, started, stop), daemon=True) if beat else None
    if beater is not None:
        beater.start()
    outcome = Outcome()
    try:
        yield outcome
    finally:
        stop.set()
        if beater is not None:
            beater.join()
    elapsed = time.monotonic() - started
    if outcome.failed:
        log.info("stopped %s after %s: %s", step.doing, format_duration(elapsed), outcome.failed)
        return
    if times is not None:
        times.record(step.key, elapsed)
    log.info("done %s in %s", step.doing, format_duration(elapsed))


class _StderrStatusHandler(logging.Handler):
    """Writes through tqdm, so a status line never lands inside a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # logging's own contract: a handler never raises
            self.handleError(record)


def show_status_on_stderr() -> None:
    """Print status lines on stderr as `evalsvc: ...` (the CLI calls this once per command)."""
    handler = _StderrStatusHandler()
    handler.setFormatter(logging.Formatter("evalsvc: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def _beat(step: LongStep, started: float, stop: threading.Event) -> None:
    interval = status_interval()
    while not stop.wait(interval):
        log.info("%s", heartbeat(step, time.monotonic() - started))


def read_log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a log file, or '' if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _last_log_line(path: Path | None) -> str:
    if path is None:
        return ""
    lines = [line.strip() for line in read_log_tail(path, 5).splitlines() if line.strip()]
    return _compact(lines[-1]) if lines else ""


def _compact(line: str) -> str:
    """A build tool's `[6/193] /usr/bin/g++ <flags> -c .../ggml-opt.cpp` as `[6/193] ggml-opt.cpp`."""
    match = _BUILD_STEP.match(line)
    if match and len(line) > LAST_LINE_CHARS:
        return f"{match.group(1)} {line.rsplit(None, 1)[-1].rsplit('/', 1)[-1]}"
    return line[:LAST_LINE_CHARS]
