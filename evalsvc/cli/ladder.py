"""`evalsvc ladder run` and `evalsvc demo`: their options and what they print (the work is in
`evalsvc.ladder.run` and `evalsvc.engine.demo`)."""

from __future__ import annotations

import json
from typing import Any

import click

from db.engine import Store
from evalsvc.cli.runs import (
    API_KEY_OPTION, DB_OPTION, ISOLATION_OPTION, JSON_OPTION, MAX_TOKENS_HELP, write_store,
)
from evalsvc.engine.demo import chat_cut_line, demo_sizes, demo_timing, run_demo
from evalsvc.engine.embedded import LADDER_SETUPS
from evalsvc.ladder.file import Ladder
from evalsvc.ladder.run import LadderPlan, StepOutcome, run_ladder_file, speed_workloads
from evalsvc.run.command import task_list
from evalsvc.run.runner import RunFailed, RunSpec
from harness.tasks import TASK_NAMES, default_items_text
from harness.types import DecodingSettings


@click.group("ladder")
def ladder_group() -> None:
    """Evaluate every step of a ladder file.

    Example: evalsvc ladder run evalsvc/ladder/builtin/sglang-gpu.yaml --task all
    """


@ladder_group.command("run")
@click.argument("ladder_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--task", default="all", show_default=True, type=click.Choice([*TASK_NAMES, "all"]))
@click.option("--limit", type=click.IntRange(min=1), help="First N items of each task.")
@click.option("--data", type=click.Path(), help="GSM8K file or folder, or 'hub' (default: the copy shipped with evalsvc).")
@click.option("--max-tokens", default=DecodingSettings().max_tokens, show_default=True, type=click.IntRange(min=1),
              help=MAX_TOKENS_HELP)
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--speed", "speed_n", default=0, show_default=True, type=click.IntRange(min=0),
              help="Also time N prompts per workload (batch 1, streaming) on each step; 0 skips it.")
@click.option("--no-progress", is_flag=True)
@API_KEY_OPTION
@ISOLATION_OPTION
@DB_OPTION
@JSON_OPTION
def ladder_run_command(ladder_file: str, task: str, limit: int | None, data: str | None, max_tokens: int,
                       concurrency: int, speed_n: int, no_progress: bool, api_key: str | None, isolation: str,
                       db: str | None, as_json: bool) -> None:
    """Launch (when the file says how), evaluate and stop each step in turn.

    Example: evalsvc ladder run my-ladder.yaml --task gsm8k --limit 100 --speed 20
    """
    store = write_store(db)
    base = RunSpec(endpoint="", base_url="", model="", task="gsm8k", concurrency=concurrency,
                   settings=DecodingSettings(max_tokens=max_tokens), api_key=api_key, isolation=isolation)
    tasks = tuple(task_list(task))
    plan = LadderPlan(tasks=tasks, limits={t: limit for t in tasks}, data=data, base=base,
                      speed_workloads=speed_workloads(tasks) if speed_n else (), speed_n=max(speed_n, 2))
    ladder, outcomes = run_ladder_file(store, ladder_file, plan, progress=not (no_progress or as_json),
                                       setups=LADDER_SETUPS)
    print_outcomes(store, ladder, outcomes, as_json)


def print_outcomes(store: Store, ladder: Ladder, outcomes: list[StepOutcome], as_json: bool) -> None:
    from evalsvc.report.decision_report import known_endpoints, ladder_report_for

    if outcomes and all(o.error for o in outcomes):
        causes = "; ".join(f"{o.step}: {str(o.error).splitlines()[0] if o.error else ''}" for o in outcomes)
        raise RunFailed(f"no step of the ladder started, nothing was evaluated ({causes})")
    with_results = known_endpoints(store, [s.name for s in ladder.steps])
    # A comparison needs two steps with results: a one-step ladder, or one whose other steps failed, has none.
    report = ladder_report_for(store, with_results) if len(with_results) >= 2 else None
    if as_json:
        steps = [{"step": o.step, "run_ids": list(o.run_ids), "reused": list(o.reused), "error": o.error}
                 for o in outcomes]
        click.echo(json.dumps({"db": store.display_url, "steps": steps,
                               "report": report.to_dict() if report is not None else None}, indent=2))
    else:
        print_text(store, report, outcomes)
    failed = [o.step for o in outcomes if o.error]
    if failed:
        raise RunFailed(f"{len(failed)} of {len(outcomes)} steps did not start ({', '.join(failed)}); what the "
                        "others evaluated is stored, and the same command again runs only what is missing")


def print_text(store: Store, report: Any, outcomes: list[StepOutcome]) -> None:
    for o in outcomes:
        state = f"failed to start: {o.error}" if o.error else (
            f"runs {', '.join(map(str, o.run_ids))}" + (f" (stored, reused: {', '.join(o.reused)})" if o.reused else ""))
        click.echo(f"step {o.step}: {state}")
    click.echo("")
    click.echo(report.render_text() if report is not None else "fewer than two steps have results: nothing to compare")
    click.echo(f"\nevery item is stored in {store.display_url}")


@click.command("demo")
@click.option("--full", is_flag=True, help=f"Every default item: {default_items_text()} (hours on a CPU).")
@click.option("--data", type=click.Path(), help="GSM8K file or folder, or 'hub' (default: the copy shipped with evalsvc).")
@click.option("--no-progress", is_flag=True)
@ISOLATION_OPTION
@DB_OPTION
@JSON_OPTION
def demo_command(full: bool, data: str | None, no_progress: bool, isolation: str, db: str | None,
                 as_json: bool) -> None:
    """Build and serve the embedded CPU ladder, evaluate it and print the comparison.

    Example: evalsvc demo --db /tmp/demo.db
    """
    done = run_demo(lambda: write_store(db), full, data, isolation, progress=not (no_progress or as_json))
    if not as_json:
        click.echo(f"embedded ladder: {' -> '.join(s.name for s in done.ladder.steps)} ({demo_sizes(full)}, "
                   f"max_tokens {done.max_tokens}; {demo_timing()})")
    print_outcomes(done.store, done.ladder, done.outcomes, as_json)
    line = None if as_json else chat_cut_line(done.store, [s.name for s in done.ladder.steps])
    if line:
        click.echo(f"\n{line}")
