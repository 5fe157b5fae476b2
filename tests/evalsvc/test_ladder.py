"""Ladder files: parsing, validation, placeholders, and launching real processes."""

from __future__ import annotations

import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from evalsvc.ladder.file import (
    LadderError,
    LadderStep,
    LaunchSpec,
    load_ladder,
    parse_ladder,
    resolve_ladder,
)
from evalsvc.ladder.launch import (
    PortInUseError,
    StepExitedError,
    StepHealthTimeout,
    StepLaunchError,
    launch_step,
    port_is_free,
)
from tests.conftest import free_port

LADDERS = Path(__file__).resolve().parents[2] / "evalsvc" / "ladder" / "builtin"

GOOD = """\
name: demo
description: two steps
steps:
  - name: base
    base_url: http://127.0.0.1:9001/v1
    model: m
    metadata: {quantization: bf16, kernel: default}
  - name: fast
    base_url: http://127.0.0.1:9002/v1
    model: m-fast
    mode: completions
    launch:
      command: python -m server --port 9002 --name 'two words'
      startup_timeout_s: 30
      env: {THREADS: 2, MODE: fast}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ladder.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_file_parses_in_order_with_defaults(tmp_path: Path) -> None:
    ladder = load_ladder(write(tmp_path, GOOD))
    assert ladder.name == "demo"
    assert ladder.description == "two steps"
    assert [s.name for s in ladder.steps] == ["base", "fast"]
    base, fast = ladder.steps
    assert base.launch is None
    assert base.mode == "chat"
    assert base.metadata == {"quantization": "bf16", "kernel": "default"}
    assert fast.mode == "completions"
    assert fast.launch == LaunchSpec(
        command=("python", "-m", "server", "--port", "9002", "--name", "two words"),
        health_url="http://127.0.0.1:9002/v1/models",
        startup_timeout_s=30.0,
        env={"THREADS": "2", "MODE": "fast"},
    )
    assert ladder.step("fast") is fast


def test_unknown_step_name_lists_the_steps(tmp_path: Path) -> None:
    ladder = load_ladder(write(tmp_path, GOOD))
    with pytest.raises(LadderError, match="no step named 'nope'; steps are: base, fast"):
        ladder.step("nope")


STEP = "  - name: s1\n    base_url: http://127.0.0.1:9001/v1\n    model: m\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\nsteps:\n" + STEP + "colour: red\n", "unknown key 'colour' in the ladder; allowed keys: description, name, setup, steps"),
        ("steps:\n" + STEP, "missing required key 'name' in the ladder"),
        ("name: x\nsteps: []\n", "'steps' must be a non-empty list"),
        ("name: x\nsteps:\n" + STEP + "    modle: y\n", "step 's1': unknown key 'modle' in a step"),
        ("name: x\nsteps:\n  - name: s1\n    base_url: http://h:1/v1\n", "step 's1': missing required key 'model'"),
        ("name: x\nsteps:\n" + STEP + STEP, "step 's1': duplicate step name"),
        ("name: x\nsteps:\n" + STEP + "    mode: stream\n", "step 's1': 'mode' is 'stream'; use 'chat' or 'completions'"),
        ("name: x\nsteps:\n  - name: s1\n    base_url: ftp://h/v1\n    model: m\n", "step 's1': 'base_url' must be an http(s) URL"),
        ("name: x\nsteps:\n  - name: s1\n    base_url: http://h:1\n    model: 7\n", "step 's1': 'model' must be a non-empty string, not 7"),
        ("name: x\nsteps:\n" + STEP + "    metadata: [a]\n", "step 's1': 'metadata' must be a mapping"),
        ("name: x\nsteps:\n" + STEP + "    launch: {commmand: [a]}\n", "step 's1': unknown key 'launch.commmand' in 'launch'"),
        ("name: x\nsteps:\n" + STEP + "    launch: {health_url: http://h/}\n", "step 's1': missing required key 'launch.command'"),
        ("name: x\nsteps:\n" + STEP + "    launch: {command: {a: b}}\n", "step 's1': 'launch.command' must be a list"),
        ("name: x\nsteps:\n" + STEP + "    launch: {command: []}\n", "step 's1': 'launch.command' is empty"),
        ("name: x\nsteps:\n" + STEP + "    launch: {command: [a], startup_timeout_s: soon}\n",
         "step 's1': 'launch.startup_timeout_s' must be a positive number of seconds, not 'soon'"),
        ("name: x\nsteps:\n" + STEP + "    launch: {command: [a], startup_timeout_s: 0}\n", "'launch.startup_timeout_s' must be a positive"),
        ("name: x\nsteps:\n" + STEP + "    launch: {command: [a], env: {A: [1]}}\n", "step 's1': 'launch.env' must map"),
        ("name: x\nsteps:\n  - name: s1\n    base_url: http://h:1/${1BAD}\n    model: m\n", "step 's1': 'base_url' has a malformed placeholder '${1BAD}'"),
        ("name: x\nsetup: docker\nsteps:\n" + STEP, "'setup' is 'docker'; allowed: embedded"),
        ("name: x\nsteps:\n  - just-a-string\n", "step #1 must be a mapping"),
        ("- a\n- b\n", "the top level must be a mapping"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(LadderError) as info:
        load_ladder(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert expected in message


def test_error_carries_step_and_key(tmp_path: Path) -> None:
    with pytest.raises(LadderError) as info:
        load_ladder(write(tmp_path, "name: x\nsteps:\n" + STEP + "    launch: {command: [a], startup_timeout_s: -1}\n"))
    assert (info.value.step, info.value.key) == ("s1", "launch.startup_timeout_s")


def test_missing_file_is_a_ladder_error(tmp_path: Path) -> None:
    with pytest.raises(LadderError, match="cannot read the ladder file"):
        load_ladder(tmp_path / "absent.yaml")


PLACEHOLDERS = """\
name: p
steps:
  - name: s1
    base_url: http://127.0.0.1:${PORT}/v1
    model: ${MODEL}
    launch:
      command: ["${PY}", -m, srv, "--model=${MODEL}"]
      env: {HOME_DIR: "${HOME_DIR}"}
"""


@pytest.mark.parametrize(("base_url", "variables"), [
    ("http://127.0.0.1:9005", {}), ("http://127.0.0.1:9005/v1/", {}), ("http://127.0.0.1:${PORT}", {"PORT": "9005"}),
    ("${URL}", {"URL": "http://127.0.0.1:9005/v1"}), ("${URL}", {"URL": "http://127.0.0.1:9005"}),
])
def test_the_default_health_url_is_the_servers_model_list_however_the_url_is_spelt(
    tmp_path: Path, base_url: str, variables: dict[str, str]
) -> None:
    text = f"name: h\nsteps:\n  - name: s1\n    base_url: '{base_url}'\n    model: m\n    launch: {{command: [srv]}}\n"
    step = resolve_ladder(load_ladder(write(tmp_path, text)), variables).steps[0]
    assert step.launch is not None and step.launch.health_url == "http://127.0.0.1:9005/v1/models"


def test_resolve_fills_every_placeholder(tmp_path: Path) -> None:
    ladder = load_ladder(write(tmp_path, PLACEHOLDERS))
    assert ladder.placeholders() == {"PORT", "MODEL", "PY", "HOME_DIR"}
    resolved = resolve_ladder(ladder, {"PORT": "9005", "MODEL": "/m.gguf", "PY": "/bin/py", "HOME_DIR": "/h"})
    step = resolved.steps[0]
    assert step.base_url == "http://127.0.0.1:9005/v1"
    assert step.model == "/m.gguf"
    assert step.launch is not None
    assert step.launch.command == ("/bin/py", "-m", "srv", "--model=/m.gguf")
    assert step.launch.health_url == "http://127.0.0.1:9005/v1/models"
    assert step.launch.env == {"HOME_DIR": "/h"}
    assert resolved.placeholders() == set()


def test_resolve_names_the_undefined_placeholder(tmp_path: Path) -> None:
    ladder = load_ladder(write(tmp_path, PLACEHOLDERS))
    with pytest.raises(LadderError) as info:
        resolve_ladder(ladder, {"PORT": "9005", "MODEL": "m", "HOME_DIR": "/h"})
    assert "step 's1': 'launch.command' uses ${PY}, which is not defined" in str(info.value)


def test_resolved_url_is_checked() -> None:
    ladder = parse_ladder({"name": "p", "steps": [{"name": "s1", "base_url": "${U}", "model": "m"}]})
    with pytest.raises(LadderError, match="step 's1': 'base_url' must be an http"):
        resolve_ladder(ladder, {"U": "ftp://x"})


# ---------------------------------------------------------------- example ladder files


def test_embedded_example_resolves_with_engine_names() -> None:
    from evalsvc.engine.embedded import EngineInfo

    ladder = load_ladder(LADDERS / "embedded-cpu.yaml")
    assert ladder.setup == "embedded"
    assert len(ladder.steps) >= 3
    info = EngineInfo(
        home=Path("/h"), python=Path("/h/py"), llama_cpp_version="0", gguf=Path("/h/a.gguf"),
        gguf_quant="Q4_1", deep_gguf=Path("/h/b.gguf"), deep_quant="Q4_0-pure",
    )
    resolved = resolve_ladder(ladder, info.placeholders())
    ports = {s.base_url for s in resolved.steps}
    assert len(ports) == len(resolved.steps)
    for step in resolved.steps:
        assert step.base_url.startswith("http://127.0.0.1:")
        assert step.launch is not None and step.launch.command[0] == "/h/py"
    models = [s.launch.command[s.launch.command.index("--model") + 1] for s in resolved.steps if s.launch]
    assert models[0] == "/h/a.gguf" and models[-1] == "/h/b.gguf"


def test_a_ladder_setup_runs_before_its_placeholders_are_filled() -> None:
    from evalsvc.engine.embedded import LADDER_SETUPS, engine_placeholders
    from evalsvc.ladder.file import ENGINE_PLACEHOLDERS
    from evalsvc.ladder.run import prepare_ladder

    assert LADDER_SETUPS == {"embedded": engine_placeholders}
    ladder = load_ladder(LADDERS / "embedded-cpu.yaml")
    with pytest.raises(LadderError, match="setup 'embedded' is not available to this command"):
        prepare_ladder(ladder)
    calls: list[str] = []

    def setup() -> dict[str, str]:
        calls.append("built")
        return {name: f"/h/{name}" for name in ENGINE_PLACEHOLDERS}

    prepared = prepare_ladder(ladder, {"embedded": setup})
    assert calls == ["built"]
    assert all(s.launch is not None and s.launch.command[0] == "/h/ENGINE_PYTHON" for s in prepared.steps)


# ---------------------------------------------------------------- launching real processes

SERVER_SCRIPT = textwrap.dedent(
    """\
    import http.server, os, signal, subprocess, sys, time
    port, behaviour, marker = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    # a grandchild in the same process group, to check the whole group is stopped
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(marker + ".child", "w") as f:
        f.write(str(child.pid))
    for i in range(1, 31):
        print(f"boot line {i}", flush=True)
    if behaviour == "exit":
        sys.exit(3)
    if behaviour == "hang":
        time.sleep(600)
    if behaviour == "stubborn":
        def ignore(signum, frame):  # a hung server: notes the SIGTERM and keeps going
            with open(marker + ".sigterm", "a") as f:
                f.write("ignored\\n")
        signal.signal(signal.SIGTERM, ignore)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"data": [{"id": "m"}]}'
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


def make_step(tmp_path: Path, behaviour: str, timeout_s: float = 20.0, port: int | None = None) -> LadderStep:
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    port = port or free_port()
    return LadderStep(
        name=f"local-{behaviour}",
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        launch=LaunchSpec(
            command=(sys.executable, str(script), str(port), behaviour, str(tmp_path / "pid")),
            health_url=f"http://127.0.0.1:{port}/v1/models",
            startup_timeout_s=timeout_s,
        ),
    )


def pid_running(pid: int) -> bool:
    """Independent of the launcher's own check: /proc says the process exists and is no zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def launched_pids(tmp_path: Path) -> tuple[int, int]:
    return int((tmp_path / "pid").read_text()), int((tmp_path / "pid.child").read_text())


def wait_for_file(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_launch_waits_for_health_and_stops_the_whole_group(tmp_path: Path) -> None:
    step = make_step(tmp_path, "serve")
    with launch_step(step, tmp_path / "logs", poll_interval_s=0.1) as launched:
        assert launched.base_url == step.base_url
        leader, child = launched_pids(tmp_path)
        assert launched.pid == leader
        assert pid_running(leader) and pid_running(child)
        assert os.getpgid(child) == leader
        reply = httpx.get(f"{step.base_url}/models", trust_env=False)
        assert reply.json() == {"data": [{"id": "m"}]}
        assert launched.log_path is not None and "boot line 30" in launched.log_path.read_text()
    assert not pid_running(leader)
    assert not pid_running(child)
    assert port_is_free("127.0.0.1", int(step.base_url.rsplit(":", 1)[1].split("/")[0]))


def test_group_is_stopped_when_the_body_raises(tmp_path: Path) -> None:
    step = make_step(tmp_path, "serve")
    with pytest.raises(KeyError):
        with launch_step(step, tmp_path / "logs", poll_interval_s=0.1):
            raise KeyError("evaluation failed")
    leader, child = launched_pids(tmp_path)
    assert not pid_running(leader) and not pid_running(child)


def test_sigterm_ignored_gets_sigkill(tmp_path: Path) -> None:
    step = make_step(tmp_path, "stubborn")
    with launch_step(step, tmp_path / "logs", poll_interval_s=0.1, stop_grace_s=1.0):
        leader, child = launched_pids(tmp_path)
    # The leader got SIGTERM and outlived it (it wrote that down); it is gone all the same, so SIGKILL followed.
    assert (tmp_path / "pid.sigterm").read_text() == "ignored\n"
    assert not pid_running(leader) and not pid_running(child)


def test_early_exit_shows_the_last_log_lines(tmp_path: Path) -> None:
    step = make_step(tmp_path, "exit")
    with pytest.raises(StepExitedError) as info:
        with launch_step(step, tmp_path / "logs", poll_interval_s=0.1):
            pytest.fail("the body must not run when the server never became healthy")
    message = str(info.value)
    assert message.startswith("step 'local-exit': the launch command exited with code 3")
    assert "boot line 30" in message and "boot line 11" in message
    assert "boot line 10\n" not in message
    _, child = launched_pids(tmp_path)
    assert not pid_running(child)


def test_never_healthy_is_a_bounded_wait(tmp_path: Path) -> None:
    step = make_step(tmp_path, "hang", timeout_s=1.5)
    # The wait ends on its own (pytest would hang otherwise) with the bound it kept in the message.
    with pytest.raises(StepHealthTimeout) as info:
        with launch_step(step, tmp_path / "logs", poll_interval_s=0.1, stop_grace_s=2.0):
            pytest.fail("the body must not run")
    assert "did not answer 200 within 1.5s" in str(info.value)
    assert "step 'local-hang'" in str(info.value)
    leader, child = launched_pids(tmp_path)
    assert not pid_running(leader) and not pid_running(child)


def test_port_in_use_is_refused_before_starting(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        step = make_step(tmp_path, "serve", port=port)
        with pytest.raises(PortInUseError) as info:
            with launch_step(step, tmp_path / "logs"):
                pytest.fail("the body must not run")
    assert f"step 'local-serve': port {port} on 127.0.0.1 is already in use" in str(info.value)
    time.sleep(0.3)
    assert not (tmp_path / "pid").exists()


def test_missing_program_is_a_launch_error(tmp_path: Path) -> None:
    step = LadderStep(
        name="ghost", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m",
        launch=LaunchSpec(command=(str(tmp_path / "no-such-server"),), health_url="http://127.0.0.1:1/"),
    )
    with pytest.raises(StepLaunchError, match="step 'ghost': cannot run"):
        with launch_step(step, tmp_path / "logs"):
            pytest.fail("the body must not run")


def test_step_without_launch_is_used_as_is(tmp_path: Path) -> None:
    step = LadderStep(name="remote", base_url="http://127.0.0.1:1/v1", model="m")
    with launch_step(step, tmp_path / "logs") as launched:
        assert (launched.base_url, launched.pid, launched.log_path) == ("http://127.0.0.1:1/v1", None, None)
    assert not (tmp_path / "logs").exists()


# --- secrets stay out of launched servers' command lines ---------------------------------------


@pytest.mark.parametrize("placeholder", ["EVALSVC_API_KEY", "HF_TOKEN", "DB_PASSWORD", "EVALSVC_DB"])
def test_a_secret_placeholder_in_the_launch_command_is_refused(tmp_path: Path, placeholder: str) -> None:
    text = "name: x\nsteps:\n" + STEP + f"    launch: {{command: [srv, --api-key, '${{{placeholder}}}']}}\n"
    ladder = load_ladder(write(tmp_path, text))
    with pytest.raises(LadderError, match=f"uses \\${{{placeholder}}}, a secret.*'launch.env' instead"):
        resolve_ladder(ladder, {placeholder: "value-0123456789"})


def test_the_api_key_in_the_launch_command_is_refused_even_under_another_name(tmp_path: Path) -> None:
    text = "name: x\nsteps:\n" + STEP + "    launch: {command: [srv, '--key=${SERVER_OPTS}'], env: {K: '${EVALSVC_API_KEY}'}}\n"
    ladder = load_ladder(write(tmp_path, text))
    variables = {"EVALSVC_API_KEY": "sk-ladder-0123456789", "SERVER_OPTS": "sk-ladder-0123456789"}
    with pytest.raises(LadderError, match="holds the store password or the API key") as caught:
        resolve_ladder(ladder, variables)
    assert "sk-ladder-0123456789" not in str(caught.value)
    variables["SERVER_OPTS"] = "plain"
    resolved = resolve_ladder(ladder, variables)
    assert resolved.steps[0].launch is not None and resolved.steps[0].launch.env == {"K": "sk-ladder-0123456789"}
