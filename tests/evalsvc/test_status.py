"""Status lines for long steps: the first line, the beats, the remembered durations."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from evalsvc.run.status import (
    DEFAULT_INTERVAL_S,
    INTERVAL_ENV,
    LongStep,
    StepTimes,
    announcement,
    format_duration,
    heartbeat,
    long_step,
    status_interval,
)
from tests.conftest import StatusLines


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (42.4, "42s"), (59.6, "1m00s"), (245, "4m05s"),
                                              (3599, "59m59s"), (3720, "1h02m")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_announcement_says_what_how_long_and_where(tmp_path: Path) -> None:
    step = LongStep("build", "building the thing", "usually 4 to 30 minutes", tmp_path / "build.log", why="once")
    times = StepTimes(tmp_path / "times.json")
    assert announcement(step, times) == f"building the thing (once): usually 4 to 30 minutes; log: {tmp_path / 'build.log'}"
    times.record("build", 312.0)
    assert announcement(step, times) == f"building the thing (once): took 5m12s here last time; log: {tmp_path / 'build.log'}"
    assert announcement(LongStep("x", "waiting", "a while"), None) == "waiting: a while"


def test_heartbeat_shows_elapsed_and_the_log_s_last_line(tmp_path: Path) -> None:
    log_path = tmp_path / "build.log"
    step = LongStep("build", "building", "a while", log_path)
    assert heartbeat(step, 75) == "still building: 1m15s elapsed"  # no log yet
    log_path.write_text("[1/9] cc a.c\r[2/9] cc b.c\n\n")
    assert heartbeat(step, 75) == "still building: 1m15s elapsed; log's last line: [2/9] cc b.c"


def test_a_compiler_line_is_shown_as_its_step_and_file(tmp_path: Path) -> None:
    log_path = tmp_path / "build.log"
    flags = " ".join(f"-DGGML_FLAG_{i}" for i in range(40))
    log_path.write_text(f"[6/193] /usr/bin/g++ {flags} -o ggml-opt.cpp.o -c /tmp/pip-wheel-x/vendor/ggml/src/ggml-opt.cpp\n")
    assert heartbeat(LongStep("b", "building", "a while", log_path), 61) == \
        "still building: 1m01s elapsed; log's last line: [6/193] ggml-opt.cpp"
    log_path.write_text("x" * 500 + "\n")
    assert heartbeat(LongStep("b", "building", "a while", log_path), 1).endswith("last line: " + "x" * 160)


def test_heartbeat_prefers_the_step_s_own_progress(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    log_path.write_text("POST /v1/chat/completions 200 OK\n")
    counted = LongStep("eval", "evaluating", "a while", log_path, progress=lambda: "4 of 10 items stored")
    assert heartbeat(counted, 30) == "still evaluating: 30s elapsed; 4 of 10 items stored"

    def broken() -> str:
        raise OSError("store is locked")

    falls_back = LongStep("eval", "evaluating", "a while", log_path, progress=broken)
    assert heartbeat(falls_back, 30) == "still evaluating: 30s elapsed; log's last line: POST /v1/chat/completions 200 OK"


def test_step_times_survive_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "times.json"
    path.write_text("{not json")
    times = StepTimes(path)
    assert times.last("build") is None
    times.record("build", 12.34)
    times.record("quantize", 3)
    assert json.loads(path.read_text()) == {"build": 12.3, "quantize": 3}
    assert times.last("build") == pytest.approx(12.3)
    path.write_text('["a list"]')
    assert StepTimes(path).last("build") is None


@pytest.mark.parametrize(("value", "expected"), [("0.25", 0.25), ("", DEFAULT_INTERVAL_S), ("soon", DEFAULT_INTERVAL_S),
                                                 ("-1", DEFAULT_INTERVAL_S)])
def test_status_interval_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: float) -> None:
    monkeypatch.setenv(INTERVAL_ENV, value)
    assert status_interval() == expected


def test_long_step_beats_until_it_ends_and_remembers_its_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status_lines: StatusLines
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0.02")
    times = StepTimes(tmp_path / "times.json")
    with long_step(LongStep("work", "working", "a while"), times):
        # the step ends only once three beats were heard
        assert status_lines.wait_until(lambda seen: sum(s.startswith("still ") for s in seen) >= 3), status_lines.lines
    lines = status_lines.lines
    count = len(lines)
    assert lines[0] == "working: a while"
    assert all(line.startswith("still working: ") for line in lines[1:-1])
    assert lines[-1].startswith("done working in ")
    assert times.last("work") is not None
    threading.Event().wait(0.1)
    assert len(lines) == count  # no beat after the end


def test_failed_step_is_not_remembered_and_does_not_say_done(tmp_path: Path, status_lines: StatusLines) -> None:
    times = StepTimes(tmp_path / "times.json")
    with pytest.raises(RuntimeError), long_step(LongStep("work", "working", "a while"), times, beat=False):
        raise RuntimeError("build failed")
    assert status_lines.lines == ["working: a while"]
    assert times.last("work") is None


def test_a_step_marked_failed_is_not_remembered(tmp_path: Path, status_lines: StatusLines) -> None:
    times = StepTimes(tmp_path / "times.json")
    with long_step(LongStep("demo", "running the demo", "a while"), times, beat=False) as outcome:
        outcome.failed = "step q4_0 did not start"
    assert status_lines.lines[-1].startswith("stopped running the demo after ")
    assert status_lines.lines[-1].endswith(": step q4_0 did not start")
    assert times.last("demo") is None
