"""The sandbox against hostile solutions: real bwrap sandboxes, real processes,
a real socket listener. Nothing here is stubbed."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from harness import sandbox
from harness.sandbox import ExecResult, Limits, Program, run_many, run_program
from tests.conftest import needs_bwrap


TEST = textwrap.dedent(
    """
    def check(candidate):
        assert candidate(1) == 2
        assert candidate(41) == 42
    """
)
CORRECT = "def inc(x):\n    return x + 1\n"
FAST = Limits(timeout_s=1.0, memory_mb=256)
# 'process' starts an interpreter per program: slow on two cores (as in test_humaneval.py).
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), pytest.param("process", marks=pytest.mark.slow)]


def program(solution: str) -> Program:
    return Program(textwrap.dedent(solution), TEST, "inc")


# A well-formed verdict and "done" frame, as the driver would write them, with a guessed nonce.
FORGED = sandbox._frame_pack(
    {"outcome": "passed", "error_type": None, "message": "", "cpu_s": 0.0, "nonce": "0" * 32, "output": ""}
) + sandbox._frame_pack({"done": True, "clean": True, "hardened": True, "status": 0})

# Each entry tries to be counted as a pass without computing x + 1, or to
# reach outside its sandbox. None may pass, under either isolation.
CHEATS = {
    "exit(0) at import": "exit(0)\n",
    "sys.exit in the call": "import sys\ndef inc(x):\n    sys.exit(0)\n",
    "os._exit(0)": "import os\ndef inc(x):\n    os._exit(0)\n",
    "raise SystemExit": "def inc(x):\n    raise SystemExit(0)\n",
    "always-equal object": """
        class Anything:
            def __eq__(self, other):
                return True
            def __ne__(self, other):
                return False
        def inc(x):
            return Anything()
        """,
    "always-equal int subclass": """
        class Anything(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def inc(x):
            return Anything(0)
        """,
    "always-equal str subclass": """
        class Anything(str):
            def __eq__(self, other):
                return True
            __hash__ = str.__hash__
        def inc(x):
            return Anything('')
        """,
    "redefines check": """
        def check(candidate):
            pass
        def inc(x):
            return 0
        """,
    "patches builtins and sys.exit": """
        import builtins, sys
        builtins.AssertionError = type('Quiet', (Exception,), {})
        builtins.isinstance = lambda *a: True
        sys.exit = lambda *a: None
        def inc(x):
            return 0
        """,
    "forges a verdict on every fd": """
        import os
        def inc(x):
            fake = %r
            for fd in range(0, 64):
                try:
                    os.write(fd, fake)
                except OSError:
                    pass
            os._exit(0)
        """
    % FORGED,
    "steals the test from stdin": """
        import sys
        def inc(x):
            data = sys.stdin.buffer.read()
            return x + 1 if b'check' in data else -1
        """,
    "reads the driver through /proc": """
        import os
        def inc(x):
            drivers = [os.getppid()]
            grandparent = int(open('/proc/%d/stat' % drivers[0]).read().rsplit(')', 1)[1].split()[1])
            drivers += [1] if grandparent == 1 else []  # bwrap: PID 1 is the pre-forked worker
            for path in ['/proc/%d/%s' % (pid, leaf) for pid in drivers for leaf in ('mem', 'environ', 'fd/0', 'fd/1')]:
                try:
                    with open(path, 'rb') as handle:
                        handle.read(16)
                    return x + 1
                except OSError:
                    pass
            return -1
        """,
    "kills its parent": "import os, signal\ndef inc(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "kills pid 1": "import os, signal\ndef inc(x):\n    os.kill(1, signal.SIGKILL)\n    os.kill(1, signal.SIGINT)\n",
    "memory bomb": "def inc(x):\n    hog = [bytearray(1 << 20) for _ in range(100000)]\n    return x + 1\n",
    "spin loop": "def inc(x):\n    while True:\n        pass\n",
    "sleeps forever": "import time\ndef inc(x):\n    time.sleep(3600)\n",
    "wrong answer": "def inc(x):\n    return x\n",
}


@pytest.mark.slow  # sandbox-heavy: every program in its own sandboxed run
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_cheats_never_pass(isolation: str) -> None:
    names = list(CHEATS)
    if isolation == "process":  # without a PID namespace a dead parent is expected; not worth the extra runs
        names = [n for n in names if n not in ("kills pid 1",)]
    results = run_many([program(CHEATS[n]) for n in names], limits=FAST, isolation=isolation)
    passed = [n for n, r in zip(names, results) if r.passed]
    assert passed == [], {n: r for n, r in zip(names, results) if r.passed}
    outcomes = dict(zip(names, (r.outcome for r in results)))
    assert outcomes["always-equal object"] == "bad_return"
    assert outcomes["spin loop"] == "timeout"
    assert outcomes["sleeps forever"] == "timeout"
    assert outcomes["memory bomb"] == "killed_memory"
    assert outcomes["os._exit(0)"] == "exited"
    assert outcomes["wrong answer"] == "failed"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_correct_solution_passes_and_output_is_kept(isolation: str) -> None:
    result = run_program(program(CORRECT.replace("return", "print('seen', x)\n    return")), FAST, isolation)
    assert result.passed, result
    assert result.output == "seen 1\nseen 41\n"
    assert result.isolation == isolation


def test_correct_solution_survives_hostile_neighbours() -> None:
    """A pass stays a pass while hostile programs run in the same pool."""
    programs = [program(CORRECT)] * 4 + [program(CHEATS["kills pid 1"]), program(CHEATS["kills its parent"])] * 2
    results = run_many(programs, limits=FAST)
    assert [r.passed for r in results] == [True] * 4 + [False] * 4


@needs_bwrap
def test_writes_outside_the_sandbox_leave_no_file(tmp_path: Path) -> None:
    name = f"evalsvc-sandbox-probe-{uuid.uuid4().hex}"
    targets = [Path("/work") / name, Path("/root") / name, Path("/tmp") / name, Path.cwd() / name, tmp_path / name]
    solution = f"""
        def inc(x):
            written = 0
            for path in {[str(t) for t in targets]!r}:
                try:
                    with open(path, 'w') as handle:
                        handle.write('pwned')
                    written += 1
                except OSError:
                    pass
            return x + 1 if written == {len(targets)} else -written
        """
    result = run_program(program(solution), FAST, "bwrap")
    assert not result.passed
    assert (result.outcome, result.message) == ("failed", "assert candidate(1) == 2")
    assert [t for t in targets if t.exists()] == []


@needs_bwrap
def test_sockets_cannot_reach_the_host() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(listener.accept())
        except OSError:
            pass

    solution = f"""
        import socket
        def inc(x):
            socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hello')
            return x + 1
        """
    waiter = threading.Thread(target=accept)
    waiter.start()
    result = run_program(program(solution), FAST, "bwrap")
    waiter.join()
    listener.close()
    assert not result.passed
    assert result.error_type in ("ConnectionRefusedError", "OSError"), result
    assert accepted == []


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@needs_bwrap
def test_daemonised_children_do_not_outlive_the_program() -> None:
    marker = f"{uuid.uuid4().int % 10**6}.{uuid.uuid4().int % 10**6}"
    solution = f"""
        import os, subprocess, sys
        def inc(x):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'], start_new_session=True)
                    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])
                os._exit(0)
            os.wait()
            subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'], start_new_session=True)
            return x + 1
        """
    result = run_program(program(solution), FAST, "bwrap")
    assert result.passed, result  # the spawning itself is allowed; outliving the run is not
    assert _processes_with(marker) == []


@needs_bwrap
def test_programs_in_one_worker_do_not_see_each_other() -> None:
    """Files left by one program are gone for the next one in the same worker."""
    leave = """
        def inc(x):
            open('left-behind', 'w').write('x')
            open('/tmp/left', 'w').write('x')
            for path in ('/dev/shm/left', '/dev/left', '/left'):
                try:
                    open(path, 'w').write('x')
                    return -1
                except OSError:
                    pass
            return x + 1
        """
    look = """
        import os
        def inc(x):
            seen = [p for p in ('left-behind', '/tmp/left', '/dev/shm/left', '/dev/left', '/left') if os.path.exists(p)]
            return x + (2 if seen else 1)
        """
    results = [run_program(program(code), FAST, "bwrap") for code in (leave, look, leave, look)]
    assert [r.passed for r in results] == [True, True, True, True]


def test_syntax_error_and_exception_are_reported() -> None:
    results = run_many(
        [program("def inc(x)\n    return x\n"), program("def inc(x):\n    return [][x]\n"), program("x = 1\n")],
        limits=FAST,
    )
    assert [(r.outcome, r.error_type) for r in results] == [
        ("syntax_error", "SyntaxError"),
        ("error", "IndexError"),
        ("error", "NameError"),
    ]
    assert results[1].message == "list index out of range"


def test_failed_assertion_names_the_test_line() -> None:
    result = run_program(program("def inc(x):\n    return 2\n"), FAST)
    assert (result.outcome, result.message) == ("failed", "assert candidate(41) == 42")


def test_test_that_never_calls_the_solution_is_not_a_pass() -> None:
    result = run_program(Program(CORRECT, "def check(candidate):\n    pass\n", "inc"), FAST)
    assert result.outcome == "failed"
    assert "never called" in result.message


def test_plain_values_cross_the_pipe_with_their_types() -> None:
    values = [None, True, 0, -(2**100), 1.5, 1e300, "é\ud800", [1, (2, 3)], {1: "a", (2,): {3}}, frozenset({4}), ()]
    test = "def check(candidate):\n" + "".join(
        f"    v = candidate({i})\n    assert v == {v!r} and type(v).__name__ == {type(v).__name__!r}, v\n"
        for i, v in enumerate(values)
    )
    solution = f"VALUES = {values!r}\ndef pick(i):\n    return VALUES[i]\n"
    result = run_program(Program(solution, test, "pick"), FAST)
    assert result.passed, result


@pytest.mark.parametrize(
    "data",
    [b"", b"q", b"i\x00\x00\x00\x09\x01", b"d\x00\x00\x00\x01l\x00\x00\x00\x00N", b"NN", b"l\xff\xff\xff\xff"],
    ids=["empty", "unknown-tag", "truncated", "unhashable-key", "trailing", "huge-count"],
)
def test_decoder_rejects_malformed_data(data: bytes) -> None:
    with pytest.raises(sandbox._BadReturn):
        sandbox._codec_loads(data)


def test_starved_timeouts_are_retried_and_sleepers_are_not() -> None:
    limits = Limits(timeout_s=2.0)
    starved = ExecResult("timeout", wall_s=7.0, cpu_s=0.8)
    asleep = ExecResult("timeout", wall_s=7.0, cpu_s=0.01)
    spinning = ExecResult("timeout", wall_s=2.5, cpu_s=2.0)
    assert [sandbox._starved(r, limits) for r in (starved, asleep, spinning)] == [True, False, False]


def test_no_silent_fallback_when_bwrap_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bubblewrap, scoring refuses and says what to install; 'process' runs only when asked for."""
    monkeypatch.setattr(sandbox, "_bwrap_problem", lambda: sandbox._NOT_INSTALLED)
    with pytest.raises(sandbox.SandboxError, match=r"apt-get install bubblewrap.*--isolation process"):
        run_program(program(CORRECT), FAST)
    with pytest.raises(sandbox.SandboxError, match="apt-get install bubblewrap"):
        sandbox.check_sandbox()
    assert run_program(program(CORRECT), FAST, "process").passed


def test_the_driver_is_plain_standard_library_code() -> None:
    """The driver runs in a bare `python -I -S`; it must not import our packages."""
    completed = subprocess.run(
        [sys.executable, "-I", "-S", "-c", "import sys; compile(sys.stdin.read(), 'driver', 'exec')"],
        input=sandbox.driver_source(),
        text=True,
        capture_output=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "harness" not in sandbox.driver_source().split("\n", 3)[1]
