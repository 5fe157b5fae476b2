"""SIGTERM and SIGHUP stop a command the way Ctrl-C (SIGINT) does.

SIGTERM is what `kill`, `timeout`, systemd, Docker and a CI cancel send;
SIGHUP comes when the terminal or SSH session closes. Either one cancels the
run in progress exactly as Ctrl-C does: finished items stay stored, the run
is marked interrupted, a launched step's server (its whole process group) is
stopped, and the same command resumes.

Exit codes follow the shell convention, 128 + the signal number: 130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP.

A signal that was ignored when the command started (`nohup` ignores SIGHUP)
stays ignored. After a hang-up, output that went to the terminal goes to
/dev/null instead, so that writing to a closed terminal cannot break the
clean-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
INTERRUPTED_EXIT_CODES = {128 + sig: sig.name for sig in STOP_SIGNALS}


def exit_code(sig: signal.Signals) -> int:
    """The exit code of a command stopped by `sig`."""
    return 128 + sig


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
        interrupt = signal.getsignal(signal.SIGINT)  # asyncio's while a run is in progress: it cancels the run
        if callable(interrupt):
            interrupt(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

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
