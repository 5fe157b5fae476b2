"""The `evalsvc` command line: a thin layer over the runner, store and reports.

`evalsvc.cli.program` holds the command group and the one place where domain exceptions become a one-line
message and an exit code; each command lives in the module named after what it does (`runs`, `reports`,
`ladder`, `dashboard`, `doctor`, `export`).
"""

from __future__ import annotations

from evalsvc.cli.startup import hold_interrupts

_release_interrupts = hold_interrupts()  # first of all: a Ctrl-C while the rest loads ends the command cleanly

from evalsvc.cli.program import main  # noqa: E402  (loads every command module)

_release_interrupts()

__all__ = ["main"]
