"""The embedded engine: setup helpers, and (slow) the real SmolLM2 server.

The slow tests build or reuse the engine under $EVALSVC_HOME (the first build
compiles llama-cpp-python, about 6 minutes on 2 cores), launch each step of
the embedded ladder and talk to it over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import fcntl
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from evalsvc.engine import embedded
from evalsvc.engine.embedded import (
    DEEP_QUANT,
    SERVER_MODULE_SOURCE,
    EngineInfo,
    EngineSetupError,
    ensure_engine,
)
from evalsvc.home import evalsvc_home
from evalsvc.ladder.file import load_ladder, resolve_ladder
from evalsvc.ladder.launch import launch_step
from evalsvc.run.status import INTERVAL_ENV, step_times
from tests.conftest import ENGINE_GROUP, ROOT, StatusLines
from tests.evalsvc.test_embedded_ladder_run import on_free_ports

pytestmark = ENGINE_GROUP

LADDER = Path(__file__).resolve().parents[2] / "evalsvc" / "ladder" / "builtin" / "embedded-cpu.yaml"
GGUF_MAGIC = b"GGUF"


def test_home_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "h"))
    assert evalsvc_home() == tmp_path / "h"
    monkeypatch.delenv("EVALSVC_HOME")
    assert evalsvc_home() == Path.home() / ".cache" / "evalsvc"


def test_placeholders_cover_the_embedded_ladder() -> None:
    info = EngineInfo(
        home=Path("/h"), python=Path("/h/py"), llama_cpp_version="0", gguf=Path("/h/a.gguf"),
        gguf_quant="Q4_1", deep_gguf=Path("/h/b.gguf"), deep_quant="Q4_0-pure",
    )
    assert load_ladder(LADDER).placeholders() <= set(info.placeholders())


def test_server_module_is_valid_python() -> None:
    compile(SERVER_MODULE_SOURCE, "evalsvc_llama_server.py", "exec")


def test_failed_setup_step_shows_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "setup.log"
    with pytest.raises(EngineSetupError) as info:
        embedded._run("probe", [sys.executable, "-c", "import sys; sys.stderr.write('no wheel here\\n'); sys.exit(4)"], log_path)
    message = str(info.value)
    assert message.startswith("embedded engine setup, probe: ")
    assert "exited with code 4" in message
    assert "no wheel here" in message


# ---------------------------------------------------------------- the build path, with a stand-in build

STANDIN = Path(__file__).resolve().parent / "engine_standin.py"
WAIT_S = 60.0  # generous: the stand-in beats every 0.05 s, this only bounds a broken run


def install_standin(home: Path) -> Path:
    """An engine venv whose python is the stand-in (see engine_standin.py)."""
    python = home / "engine-venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    python.chmod(0o755)
    return python


def two_build_beats(lines: list[str]) -> bool:
    return sum("still building llama-cpp-python" in m and "Building C object" in m for m in lines) >= 2


def test_build_announces_itself_and_beats_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status_lines: StatusLines
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0.05")
    monkeypatch.setenv("STANDIN_RELEASE", str(tmp_path / "release"))
    python = install_standin(tmp_path)
    built: list[Path] = []
    builder = threading.Thread(target=lambda: built.append(embedded._ensure_wheel(tmp_path / "wheels", python, tmp_path)))
    builder.start()
    # The stand-in build runs until released: every line counted here arrived while it was still building.
    assert status_lines.wait_until(two_build_beats, WAIT_S), status_lines.lines
    (tmp_path / "release").touch()
    builder.join(WAIT_S)
    log_path = tmp_path / "logs" / "llama-cpp-build.log"
    first, *middle, last = status_lines.lines
    assert first.startswith(f"building llama-cpp-python {embedded.LLAMA_CPP_VERSION} from source")
    assert "usually 4 to 30 minutes on 2 cores" in first and first.endswith(f"log: {log_path}")
    assert middle and all(m.startswith("still building llama-cpp-python") and " elapsed" in m for m in middle)
    assert last.startswith("done building llama-cpp-python")
    assert built and built[0].name.startswith(f"llama_cpp_python-{embedded.LLAMA_CPP_VERSION}-")
    assert "Successfully built" in log_path.read_text()
    assert step_times(tmp_path).last("engine build") is not None
    # built once: the next call reuses the wheel and says nothing
    status_lines.lines.clear()
    assert embedded._ensure_wheel(tmp_path / "wheels", python, tmp_path) == built[0]
    assert status_lines.lines == []


def test_waiting_for_another_setup_says_so(tmp_path: Path, status_lines: StatusLines) -> None:
    lock = tmp_path / "engine.lock"
    entered = threading.Event()

    def second_caller() -> None:
        with embedded._file_lock(lock, tmp_path):
            entered.set()

    with open(lock, "a") as held:  # another process's setup, as far as flock is concerned
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=second_caller)
        waiter.start()
        assert status_lines.wait_until(lambda seen: len(seen) >= 1, WAIT_S)
        assert not entered.is_set()
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(WAIT_S)
    assert entered.is_set()
    assert status_lines.lines[0] == (f"waiting for another evalsvc process to set up the engine (it holds {lock}): "
                                     f"as long as its setup takes; log: {tmp_path / 'logs' / 'llama-cpp-build.log'}")
    assert status_lines.lines[-1].startswith("done waiting for another evalsvc process")


def read_lines(stream: object, into: "queue.Queue[str | None]") -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))
    into.put(None)


def next_line(lines: "queue.Queue[str | None]", seen: list[str]) -> str:
    line = lines.get(timeout=WAIT_S)
    assert line is not None, f"stderr closed early; lines so far: {seen}"
    seen.append(line)
    return line


@pytest.mark.slow
def test_demo_on_a_machine_without_engine_speaks_first_and_keeps_speaking(tmp_path: Path) -> None:
    home = tmp_path / "home"
    install_standin(home)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVALSVC_HOME": str(home), INTERVAL_ENV: "0.1",
           "STANDIN_RELEASE": str(tmp_path / "release")}
    proc = subprocess.Popen([sys.executable, "-m", "evalsvc.cli", "demo", "--db", str(tmp_path / "demo.db")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    lines: "queue.Queue[str | None]" = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        assert next_line(lines, seen).startswith("evalsvc: running the demo (the embedded CPU ladder ")
        assert next_line(lines, seen).startswith("evalsvc: building llama-cpp-python")
        beats = [next_line(lines, seen) for _ in range(3)]
        assert all(b.startswith("evalsvc: still building llama-cpp-python ") and " elapsed" in b for b in beats), seen
    finally:
        (tmp_path / "release").touch()
        proc.wait(timeout=WAIT_S)  # stderr belongs to the reader thread; stdout stays small on this path
    out = proc.stdout.read() if proc.stdout else ""
    while (line := lines.get(timeout=WAIT_S)) is not None:
        seen.append(line)
    # the stand-in cannot install the server: the demo stops with one clear line naming the step and its log
    assert proc.returncode == 2, (out, seen)
    assert any(s.startswith("evalsvc: done building llama-cpp-python") for s in seen)
    assert any(s.startswith("evalsvc: installing llama-cpp-python[server]") for s in seen)
    assert any(s.startswith("error: embedded engine setup, install llama-cpp-python[server]") for s in seen)


# ---------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def engine() -> EngineInfo:
    return ensure_engine()


def chat(base_url: str, model: str, question: str, max_tokens: int = 64) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "seed": 1234,
    }
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=120.0, trust_env=False)
    reply.raise_for_status()
    return reply.json()


@pytest.mark.slow
def test_ensure_engine_is_cached(engine: EngineInfo) -> None:
    stamps = {p: p.stat().st_mtime_ns for p in (engine.python, engine.gguf, engine.deep_gguf)}
    again = ensure_engine()
    assert again == engine
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert engine.gguf_quant == "Q4_1"
    assert engine.deep_quant == DEEP_QUANT.label
    assert engine.gguf.read_bytes()[:4] == GGUF_MAGIC
    with open(engine.deep_gguf, "rb") as f:
        assert f.read(4) == GGUF_MAGIC
    # a lower-bit file is a smaller file
    assert engine.deep_gguf.stat().st_size < engine.gguf.stat().st_size


@pytest.mark.slow
@pytest.mark.parametrize("step_name", [s.name for s in load_ladder(LADDER).steps])
def test_embedded_step_answers_and_is_repeatable(engine: EngineInfo, step_name: str, tmp_path: Path) -> None:
    # On free ports: a demo running on this machine holds the shipped ones (8391-8393).
    ladder = resolve_ladder(load_ladder(on_free_ports(tmp_path)), engine.placeholders())
    step = ladder.step(step_name)
    with launch_step(step, tmp_path / "logs") as launched:
        first = chat(launched.base_url, step.model, "What is 12 plus 30? Reply with just the number.")
        other = chat(launched.base_url, step.model, "Name three colours of the rainbow.")
        second = chat(launched.base_url, step.model, "What is 12 plus 30? Reply with just the number.")
        pid = launched.pid
    text = first["choices"][0]["message"]["content"]
    assert text.strip(), "the model gave an empty reply"
    if step_name == ladder.steps[0].name:
        assert "42" in text
    usage = first["usage"]
    assert usage["prompt_tokens"] > 5 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert first["choices"][0]["finish_reason"] in ("stop", "length")
    assert other["choices"][0]["message"]["content"] != text
    # A, B, A: greedy output must not depend on the request in between
    assert second["choices"][0]["message"]["content"] == text
    assert second["usage"] == usage
    assert pid is not None and not Path(f"/proc/{pid}").exists()
