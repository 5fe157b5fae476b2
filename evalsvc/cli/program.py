"""The `evalsvc` program: its command group, and the one place where an error or a signal becomes one line
on stderr and a documented exit code.

Commands raise `harness.errors.UserError` (or a subclass next to the code that knows what went wrong); the
group's `invoke` turns it into `<label>: <message>` and the exception's `exit_code`. Nothing else in the
command line prints an error or picks an exit code.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, NoReturn

import click

from evalsvc.cli import dashboard, doctor, export, ladder, reports, runs
from evalsvc.cli.startup import interrupted_while_loading
from evalsvc.run.interrupts import STOP_SIGNALS, exit_code, stop_signals_as_interrupt
from evalsvc.run.runner import RunInterrupted
from evalsvc.run.status import show_status_on_stderr
from harness.errors import ERROR_LABEL, EXIT_CODES, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RESUME_HINT, UserError
from evalsvc.report.masking import mask_from_now_on
from harness.redact import mask_text

COMMANDS: list[click.Command] = [
    runs.run_command, runs.runs_command, runs.show_command,
    reports.compare_command, reports.report_command, reports.speed_command, reports.decide_command,
    ladder.ladder_group, ladder.demo_command,
    dashboard.dashboard_command, doctor.doctor_command, export.export_command,
]


def exit_codes_text() -> str:
    """The exit-code table, as `evalsvc --help` and the README show it."""
    return "\n".join(f"{code:>5}  {meaning}" for code, meaning in EXIT_CODES.items())


def _say(message: str, label: str) -> None:
    """One line on stderr, secrets masked; several lines of a message are joined with '; '."""
    line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # stderr gone: the exit code still tells
        click.echo(mask_text(f"{label}: {line}"), err=True)


def _fail(message: str, code: int, label: str = ERROR_LABEL) -> NoReturn:
    """The one way a command ends on an error: its line, then the exit code."""
    _say(message, label)
    sys.exit(code)


def _exit_interrupted(message: str, sig: signal.Signals) -> NoReturn:
    """Say why the command stopped (if anyone can still read it) and exit with 128 + the signal number."""
    _fail(message, exit_code(sig), label=f"interrupted by {sig.name}")


class EvalsvcGroup(click.Group):
    """Turns every way a command can end badly into one line on stderr and a documented exit code."""

    def __call__(self, *args: Any, **extra: Any) -> NoReturn:
        """The program itself (console script, `python -m evalsvc.cli`); tests and jobs call `main` instead."""
        try:
            self.main(*args, **extra)
            code: Any = EXIT_OK
        except SystemExit as done:
            code = done.code
        except KeyboardInterrupt:  # in the instant between the command's end and here
            _say(f"stopped; {RESUME_HINT}", "interrupted by SIGINT")
            code = EXIT_INTERRUPTED
        if isinstance(code, str):  # sys.exit("message"), as Python itself would show it
            _say(code, "error")
        _leave(code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_USAGE))

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        if interrupted_while_loading():
            _fail(f"stopped; {RESUME_HINT}", EXIT_INTERRUPTED, label="interrupted by SIGINT")
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:  # click's own usage errors: bad option values, missing arguments
            where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
            _fail(exc.format_message() + where, EXIT_USAGE)
        except (click.Abort, KeyboardInterrupt):
            _fail(f"stopped; {RESUME_HINT}", EXIT_INTERRUPTED, label="interrupted by SIGINT")
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def invoke(self, ctx: click.Context) -> Any:
        with stop_signals_as_interrupt() as stop_signal:
            try:
                return super().invoke(ctx)
            except RunInterrupted as exc:
                _exit_interrupted(str(exc), stop_signal())
            except KeyboardInterrupt:
                _exit_interrupted(f"stopped; {RESUME_HINT}", stop_signal())
            except UserError as exc:
                _fail(str(exc), exc.exit_code, exc.label)


def _leave(code: int) -> NoReturn:
    """End the process once the command is done, without Python's own teardown.

    That teardown takes a tenth of a second or more (pandas, scipy, SQLAlchemy) and runs after Python has
    reset the signal handlers, so a Ctrl-C then killed the program without a word. Here a stop signal that
    comes after the command is noted, the exit functions run (the sandbox's workers are stopped), the output
    is flushed, and a noted signal still ends in the usual line and 128 + its number.
    """
    noted: list[signal.Signals] = []

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signal.Signals(signum))
        if len(noted) > 1:  # a second one: the clean-up itself hangs; leave now
            _stop_now(noted[0], code)

    if threading.current_thread() is threading.main_thread():  # only there can Python set handlers
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, note)
    atexit._run_exitfuncs()
    _stop_now(noted[0] if noted else None, code)


def _stop_now(sig: signal.Signals | None, code: int) -> NoReturn:
    """Flush what the command wrote, say why it stopped if a signal came, and end the process."""
    with contextlib.suppress(Exception):  # a closed pipe or terminal: nothing left to tell
        sys.stdout.flush()
    if sig is not None:
        _say(f"stopped; {RESUME_HINT}", f"interrupted by {sig.name}")
        code = exit_code(sig)
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


EPILOG = "Exit codes:\n\n\b\n" + exit_codes_text()


@click.group(cls=EvalsvcGroup, epilog=EPILOG, commands=COMMANDS)
@click.version_option(package_name="evalsvc", message="evalsvc %(version)s")
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def main(verbose: int) -> None:
    """Accuracy and output-length evaluation for LLM inference optimization ladders.

    \b
    Example:
      evalsvc run --endpoint step3 --url http://127.0.0.1:30000/v1 --model Qwen/Qwen3-27B
      evalsvc compare step2 step3
    """
    mask_from_now_on()  # every log line and traceback of a command is masked; see harness.redact
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # One line per HTTP request drowns the run's own messages; only -vv shows them.
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
    show_status_on_stderr()
