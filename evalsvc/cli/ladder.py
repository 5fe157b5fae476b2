"""`evalsvc ladder run` and `evalsvc demo`."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import click

from db.engine import Store
from evalsvc.cli.runs import (
    API_KEY_OPTION, DB_OPTION, ISOLATION_OPTION, JSON_OPTION, MAX_TOKENS_HELP, task_list, write_store,
)
from evalsvc.ladder.file import Ladder, load_ladder
from evalsvc.ladder.run import LadderPlan, StepOutcome, check_tasks, prepare_ladder, run_ladder
from evalsvc.machine.bubblewrap import ensure_bubblewrap
from evalsvc.run.runner import RunFailed, RunSpec, check_limits
from evalsvc.run.status import LongStep, StepTimes, long_step
from harness.tasks import TASK_NAMES, workload_of
from harness.types import DecodingSettings


DEMO_LIMITS = {"gsm8k": 10, "humaneval": 10}
DEMO_MAX_TOKENS = 384
DEMO_SPEED_N = 3
DEMO_SPEED_MAX_TOKENS = 128


def workloads_for(tasks: tuple[str, ...]) -> tuple[str, ...]:
    """The speed workloads a decision on these tasks needs: each task's own, plus chat."""
    return tuple(workload_of(t) for t in tasks) + ("chat",)


def embedded_ladder_path() -> Path:
    return Path(str(resources.files("evalsvc.ladder") / "builtin" / "embedded-cpu.yaml"))


def log_dir() -> Path:
    from evalsvc.engine.embedded import evalsvc_home

    return evalsvc_home() / "logs"


def times_here() -> StepTimes:
    """How long long steps took on this machine (the file the engine setup writes too)."""
    from evalsvc.engine.embedded import evalsvc_home, step_times

    return step_times(evalsvc_home())


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
    check_tasks(task_list(task), isolation)
    ladder = prepare_ladder(load_ladder(ladder_file))
    base = RunSpec(endpoint="", base_url="", model="", task="gsm8k", concurrency=concurrency,
                   settings=DecodingSettings(max_tokens=max_tokens), api_key=api_key, isolation=isolation)
    tasks = tuple(task_list(task))
    plan = LadderPlan(tasks=tasks, limits={t: limit for t in tasks}, data=data, base=base,
                      speed_workloads=workloads_for(tasks) if speed_n else (), speed_n=max(speed_n, 2))
    check_limits([step_spec_for(plan, task) for task in plan.tasks])
    outcomes = run_ladder(store, ladder, plan, log_dir(), progress=not (no_progress or as_json), times=times_here())
    print_outcomes(store, ladder, outcomes, as_json)


def step_spec_for(plan: LadderPlan, task: str) -> RunSpec:
    """A task's run settings as every step gets them (before the step's name and URL), to check up front."""
    from dataclasses import replace

    return replace(plan.base, task=task, limit=plan.limits.get(task), data=plan.data if task == "gsm8k" else None)


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
    if any(o.error for o in outcomes):
        raise SystemExit(1)


def print_text(store: Store, report: Any, outcomes: list[StepOutcome]) -> None:
    for o in outcomes:
        state = f"failed to start: {o.error}" if o.error else (
            f"runs {', '.join(map(str, o.run_ids))}" + (f" (stored, reused: {', '.join(o.reused)})" if o.reused else ""))
        click.echo(f"step {o.step}: {state}")
    click.echo("")
    click.echo(report.render_text() if report is not None else "fewer than two steps have results: nothing to compare")
    click.echo(f"\nevery item is stored in {store.display_url}")


@click.command("demo")
@click.option("--full", is_flag=True, help="All 400 GSM8K questions and 164 HumanEval problems (hours on a CPU).")
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
    raw = load_ladder(embedded_ladder_path())
    times = times_here()
    max_tokens = DecodingSettings().max_tokens if full else DEMO_MAX_TOKENS
    with long_step(demo_step(raw, full), times, beat=False) as demo:  # each long part beats on its own
        store = write_store(db)
        ensure_bubblewrap(isolation)
        check_tasks(TASK_NAMES, isolation)  # before the engine build: a missing sandbox stops the demo in seconds
        ladder = prepare_ladder(raw)
        base = RunSpec(endpoint="", base_url="", model="", task="gsm8k", concurrency=1, isolation=isolation,
                       settings=DecodingSettings(max_tokens=max_tokens))
        limits = {task: None if full else DEMO_LIMITS[task] for task in TASK_NAMES}
        plan = LadderPlan(tasks=TASK_NAMES, limits=limits, data=data, base=base,
                          speed_workloads=workloads_for(TASK_NAMES), speed_n=DEMO_SPEED_N,
                          speed_max_tokens=DEMO_SPEED_MAX_TOKENS)
        outcomes = run_ladder(store, ladder, plan, log_dir(), progress=not (no_progress or as_json), times=times)
        demo.failed = ", ".join(f"step {o.step} did not start" for o in outcomes if o.error)
    if not as_json:
        click.echo(f"embedded ladder: {' -> '.join(s.name for s in ladder.steps)} ({demo_sizes(full)}, "
                   f"max_tokens {max_tokens})")
    print_outcomes(store, ladder, outcomes, as_json)


def demo_sizes(full: bool) -> str:
    return "full sets" if full else ", ".join(f"{n} {t}" for t, n in DEMO_LIMITS.items())


def demo_step(ladder: Ladder, full: bool) -> LongStep:
    """The demo as a whole, announced first: the line a new user sees within a second."""
    return LongStep(
        "demo --full" if full else "demo", "running the demo",
        "no timing on this machine yet; the first run builds the engine (4 to 30 minutes on 2 cores), "
        "then evaluating takes 5 to 25 minutes",
        why=f"the embedded CPU ladder {' -> '.join(s.name for s in ladder.steps)}, {demo_sizes(full)} items per "
        "step, then the comparison; results already stored are reused",
    )

