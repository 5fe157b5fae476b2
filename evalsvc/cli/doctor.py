"""`evalsvc doctor`."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import ClassVar

import click

from evalsvc.cli.runs import DB_OPTION, JSON_OPTION
from harness.errors import EXIT_FAILED, UserError


class MissingForRuns(UserError):
    """Doctor found something a run needs missing here (the table says how to fix each)."""

    exit_code: ClassVar[int] = EXIT_FAILED


@click.command("doctor")
@DB_OPTION
@JSON_OPTION
def doctor_command(db: str | None, as_json: bool) -> None:
    """Check what a run needs (sandbox, bubblewrap, engine, offline data, store, browser), list the servers
    evalsvc launched that still run, and say how to fix what is missing; exits 1 when a run could not go on.

    Example: evalsvc doctor --json
    """
    from evalsvc.doctor import render_table, run_checks

    checks = run_checks(db)
    blocked = [c.name for c in checks if c.blocks_runs]
    if as_json:
        click.echo(json.dumps({"ok": not blocked, "checks": [{**asdict(c), "blocks_runs": c.blocks_runs}
                                                             for c in checks]}, indent=2))
    else:
        click.echo(render_table(checks))
        if not blocked:
            click.echo("\neverything a run needs is here")
    if blocked:
        raise MissingForRuns(f"missing for runs: {', '.join(blocked)}; each row's fix above says how")

