"""SIGTERM and SIGHUP stop a command the way Ctrl-C (SIGINT) does.

SIGTERM is what `kill`, `timeout`, systemd, Docker and a CI cancel send;
SIGHUP comes when the terminal or SSH session closes. Either one cancels the
run in progress exactly as Ctrl-C does: finished items stay stored, the run
is marked interrupted, a launched step's server (its whole process group) is
stopped, and the same command resumes.

Exit codes follow the shell convention, 128 + the signal number: 130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP.

While a run's event loop is running (`run_until_stopped`), a stop signal asks
the loop to cancel the run, and the loop does so between two callbacks.
`asyncio.run`'s own Ctrl-C handler cancels from inside the signal handler,
which runs between any two bytecodes of whatever the loop is doing: one Ctrl-C
in a busy suite's run landed inside `asyncio.Event.set`, between its check that
a waiter was pending and resolving it, and Python printed an InvalidStateError
traceback before the one-line message.

A signal that was ignored when the command started (`nohup` ignores SIGHUP)
stays ignored. After a hang-up, output that went to the terminal goes to
/dev/null instead, so that writing to a closed terminal cannot break the
clean-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED_EXIT_CODES = {128 + sig: sig.name for sig in STOP_SIGNALS}
_loop_stops: list[Callable[[], None]] = []  # the running loop's "cancel the run", innermost last


def exit_code(sig: signal.Signals) -> int:
    """The exit code of a command stopped by `sig`."""
    return 128 + sig


def hear_ctrl_c() -> None:
    """Take Python's Ctrl-C handler back if SIGINT came in ignored, for a process that others stop with SIGINT
    (a dashboard job, whose Stop button sends it; the test session). A script's background job (`cmd &` with
    job control off) starts with SIGINT ignored, and an ignored signal stays ignored across exec; a handled
    one is reset to its default, so the commands such a process starts hear Ctrl-C too."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextlib.contextmanager
def stop_signals_as_interrupt() -> Iterator[Callable[[], signal.Signals]]:
    """Within the block, SIGTERM and SIGHUP act as SIGINT; yields a function naming the first stop signal.

    Outside the main thread (where Python cannot set handlers) nothing changes.
    """
    received: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: signal.SIGINT
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not received:
            received.append(signal.Signals(signum))
        if signum == signal.SIGHUP:
            _leave_terminal()
        _stop()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, on_signal)
    try:
        yield lambda: received[0] if received else signal.SIGINT
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def run_until_stopped(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, except that Ctrl-C (and SIGTERM and SIGHUP, inside `stop_signals_as_interrupt`)
    cancels `coro` from inside the event loop rather than from the signal handler. Raises KeyboardInterrupt
    when a signal came, as `asyncio.run` does, even if `coro` ended before the loop could cancel it: a stop
    signal is never lost. Outside the main thread it is `asyncio.run`."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coro)
    stopped: list[bool] = []
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []

    def stop() -> None:
        stopped.append(True)
        for loop, task in running:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the check below stops the command
                loop.call_soon_threadsafe(task.cancel)

    async def until_stopped() -> T:
        task = asyncio.current_task()
        assert task is not None
        running.append((asyncio.get_running_loop(), task))
        if stopped:  # a signal before the loop ran
            raise asyncio.CancelledError
        return await coro

    # With a handler of ours in place, asyncio.run leaves Ctrl-C to it; an ignored Ctrl-C stays ignored.
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, lambda signum, frame: _stop())
    _loop_stops.append(stop)
    try:
        result = asyncio.run(until_stopped())
    except asyncio.CancelledError:
        if stopped:
            raise KeyboardInterrupt from None
        raise
    finally:
        _loop_stops.remove(stop)
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
    if stopped:
        raise KeyboardInterrupt
    return result


def _stop() -> None:
    """Have the running loop cancel its run; with no loop running, stop where the program is."""
    if not _loop_stops:
        raise KeyboardInterrupt
    _loop_stops[-1]()


def _leave_terminal() -> None:
    """Point whichever of stdin, stdout and stderr is a terminal at /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            with contextlib.suppress(OSError):
                if os.isatty(fd):
                    os.dup2(null, fd)
    finally:
        os.close(null)
