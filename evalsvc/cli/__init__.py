"""The `evalsvc` command line: a thin layer over the runner, store and reports.

Only here are domain exceptions turned into a one-line message and an exit code.
"""

from __future__ import annotations

from evalsvc.cli.startup import hold_interrupts, interrupted_while_loading

_release_interrupts = hold_interrupts()  # first of all: a Ctrl-C while the rest loads ends the command cleanly

import contextlib
import importlib
import logging
import signal
import sys
from typing import Any, NoReturn

import click

from evalsvc.interrupts import exit_code, stop_signals_as_interrupt
from harness.errors import EXIT_CODES, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, RESUME_HINT, UserError
from harness.redact import install_redaction, mask_text

# Modules holding domain exceptions registered before they subclassed harness.errors.UserError; new ones
# subclass UserError instead.
_ERROR_SOURCES: dict[str, tuple[str, ...]] = {}
# Command modules: each defines click commands registered on the group below.
_COMMAND_MODULES = ("evalsvc.cli.runs", "evalsvc.cli.reports", "evalsvc.cli.ladder", "evalsvc.cli.dashboard",
                    "evalsvc.cli.doctor", "evalsvc.cli.export")


def user_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [UserError]
    for module, names in _ERROR_SOURCES.items():
        mod = importlib.import_module(module)
        found.extend(getattr(mod, name) for name in names)
    return tuple(found)


def register_errors(module: str, *names: str) -> None:
    """Let a command module add user-facing exception types that do not subclass UserError (exit code 2)."""
    _ERROR_SOURCES.setdefault(module, ())
    _ERROR_SOURCES[module] = tuple(dict.fromkeys(_ERROR_SOURCES[module] + names))


def exit_codes_text() -> str:
    """The exit-code table, as `evalsvc --help` and the README show it."""
    return "\n".join(f"{code:>5}  {meaning}" for code, meaning in EXIT_CODES.items())


def fail(message: str, code: int, prefix: str = "error") -> NoReturn:
    """The one way a command ends on an error: one line on stderr (secrets masked), then the exit code."""
    line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    with contextlib.suppress(OSError):  # stderr may be gone (a closed terminal); the exit code still tells
        click.echo(mask_text(f"{prefix}: {line}"), err=True)
    sys.exit(code)


class EvalsvcGroup(click.Group):
    """Turns every way a command can end badly into one line on stderr and a documented exit code."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        if interrupted_while_loading():
            fail(f"stopped; {RESUME_HINT}", EXIT_INTERRUPTED, prefix="interrupted by SIGINT")
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:  # click's own usage errors: bad option values, missing arguments
            where = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
            fail(exc.format_message() + where, EXIT_USAGE)
        except (click.Abort, KeyboardInterrupt):
            fail(f"stopped; {RESUME_HINT}", EXIT_INTERRUPTED, prefix="interrupted by SIGINT")
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def invoke(self, ctx: click.Context) -> Any:
        from evalsvc.runner import RunInterrupted

        with stop_signals_as_interrupt() as stop_signal:
            try:
                return super().invoke(ctx)
            except RunInterrupted as exc:
                _exit_interrupted(str(exc), stop_signal())
            except KeyboardInterrupt:
                _exit_interrupted(f"stopped; {RESUME_HINT}", stop_signal())
            except user_errors() as exc:
                fail(str(exc), getattr(exc, "exit_code", EXIT_USAGE))


def _exit_interrupted(message: str, sig: signal.Signals) -> NoReturn:
    """Say why the command stopped (if anyone can still read it) and exit with 128 + the signal number."""
    fail(message, exit_code(sig), prefix=f"interrupted by {sig.name}")


EPILOG = "Exit codes:\n\n\b\n" + exit_codes_text()


@click.group(cls=EvalsvcGroup, epilog=EPILOG)
@click.version_option(package_name="evalsvc", message="evalsvc %(version)s")
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def main(verbose: int) -> None:
    """Accuracy and output-length evaluation for LLM inference optimization ladders.

    \b
    Example:
      evalsvc run --endpoint step3 --url http://127.0.0.1:30000/v1 --model Qwen/Qwen3-27B
      evalsvc compare step2 step3
    """
    install_redaction()  # every log line and traceback of a command is masked; see harness.redact
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # One line per HTTP request drowns the run's own messages; only -vv shows them.
    logging.getLogger("httpx").setLevel(logging.DEBUG if verbose >= 2 else logging.WARNING)
    from evalsvc.status import show_status_on_stderr

    show_status_on_stderr()


for _module in _COMMAND_MODULES:
    _mod = importlib.import_module(_module)
    for _command in getattr(_mod, "COMMANDS"):
        main.add_command(_command)
_release_interrupts()
