"""Ctrl-C while the command line is still loading (imports take seconds on a busy machine).

Python's default would end the program with an import traceback. While the
command modules load, a SIGINT is only noted instead; once they are loaded
the usual handler is back, and the command ends at once, cleanly, with the
documented line and exit code 130 (see `EvalsvcGroup.main`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

_noted: list[int] = []


def hold_interrupts() -> Callable[[], None]:
    """Note SIGINT instead of raising until the returned function is called (main thread, default handler only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return lambda: None  # someone (a test runner, an embedding program) handles Ctrl-C itself

    def note(signum: int, frame: FrameType | None) -> None:
        _noted.append(signum)

    signal.signal(signal.SIGINT, note)
    return lambda: signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted_while_loading() -> bool:
    """Whether Ctrl-C came while the command line loaded (then the command must not start)."""
    return bool(_noted)
