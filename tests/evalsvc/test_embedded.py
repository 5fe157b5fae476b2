"""The embedded engine: setup helpers, and (slow) the real SmolLM2 server.

The slow tests build or reuse the engine under $EVALSVC_HOME (the first build
compiles llama-cpp-python, about 6 minutes on 2 cores), launch each step of
the embedded ladder and talk to it over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from evalsvc import embedded
from evalsvc.embedded import (
    DEEP_QUANT,
    MODEL_ALIAS,
    SERVER_MODULE_SOURCE,
    EngineInfo,
    EngineSetupError,
    ensure_engine,
    evalsvc_home,
)
from evalsvc.ladder import launch_step, load_ladder, resolve_ladder

LADDER = Path(__file__).resolve().parents[2] / "evalsvc" / "ladders" / "embedded-cpu.yaml"
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


# ---------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def engine() -> EngineInfo:
    return ensure_engine()


def chat(base_url: str, question: str, max_tokens: int = 64) -> dict:
    body = {
        "model": MODEL_ALIAS,
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
    ladder = resolve_ladder(load_ladder(LADDER), engine.placeholders())
    step = ladder.step(step_name)
    with launch_step(step, tmp_path / "logs") as launched:
        first = chat(launched.base_url, "What is 12 plus 30? Reply with just the number.")
        other = chat(launched.base_url, "Name three colours of the rainbow.")
        second = chat(launched.base_url, "What is 12 plus 30? Reply with just the number.")
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
