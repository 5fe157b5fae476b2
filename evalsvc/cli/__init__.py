"""The `evalsvc` command line: a thin layer over the runner, store and reports.

Only here are domain exceptions turned into a one-line message and an exit code.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import signal
import sys
from typing import Any

import click

from evalsvc.interrupts import exit_code, stop_signals_as_interrupt
from harness.redact import install_redaction, mask_text

EXIT_USER_ERROR = 2

# Modules holding domain exceptions that mean "the user must change something".
_ERROR_SOURCES = {
    "harness.client": ("EndpointError",),
    "harness.tasks.base": ("TaskError",),
    "db.engine": ("StoreError",),
    "db.queries": ("NotFound", "EndpointConflict", "InvalidName"),
    "harness.sandbox": ("SandboxError",),
}
# Command modules: each defines click commands registered on the group below.
_COMMAND_MODULES = ("evalsvc.cli.runs", "evalsvc.cli.reports", "evalsvc.cli.ladder", "evalsvc.cli.dashboard",
                    "evalsvc.cli.doctor")


def user_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module, names in _ERROR_SOURCES.items():
        mod = importlib.import_module(module)
        found.extend(getattr(mod, name) for name in names)
    return tuple(found)


def register_errors(module: str, *names: str) -> None:
    """Let a command module add its own user-facing exception types."""
    _ERROR_SOURCES.setdefault(module, ())
    _ERROR_SOURCES[module] = tuple(dict.fromkeys(_ERROR_SOURCES[module] + names))


class EvalsvcGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        from evalsvc.runner import RunInterrupted

        with stop_signals_as_interrupt() as stop_signal:
            try:
                return super().invoke(ctx)
            except RunInterrupted as exc:
                _exit_interrupted(str(exc), stop_signal())
            except KeyboardInterrupt:
                _exit_interrupted("stopped; what finished is stored, run the same command to resume", stop_signal())
            except user_errors() as exc:
                click.echo(mask_text(f"error: {exc}"), err=True)
                sys.exit(EXIT_USER_ERROR)


def _exit_interrupted(message: str, sig: signal.Signals) -> None:
    """Say why the command stopped (if anyone can still read it) and exit with 128 + the signal number."""
    with contextlib.suppress(OSError):
        click.echo(mask_text(f"interrupted by {sig.name}: {message}"), err=True)
    sys.exit(exit_code(sig))


@click.group(cls=EvalsvcGroup)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def main(verbose: int) -> None:
    """Accuracy and output-length evaluation for LLM inference optimization ladders."""
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
