"""Evaluating a whole ladder: for each step, launch it if needed, wait for health,
evaluate every task, stop it, go on. A step that fails to start is reported and
the rest continue; a step already evaluated with the same config is not
launched again."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from db import queries
from db.engine import Store
from evalsvc.home import evalsvc_home
from evalsvc.ladder.file import Ladder, LadderError, LadderStep, load_ladder, resolve_ladder
from evalsvc.ladder.launch import StepLaunchError, launch_step, step_log_path
from evalsvc.run.runner import RunSpec, check_limits, config_hash, dataset_hash, run_evaluation
from evalsvc.run.speed import SpeedError, SpeedPlan, measure_speed
from evalsvc.run.status import LongStep, StepTimes, long_step, step_times
from harness.tasks import get_task, pick_template, workload_of
from harness.types import DecodingSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepOutcome:
    step: str
    run_ids: tuple[int, ...] = ()
    reused: tuple[str, ...] = ()  # tasks whose complete run was already stored
    error: str | None = None


@dataclass(frozen=True)
class LadderPlan:
    """What to do on every step: the tasks (with item limits), and optionally a
    batch-1 speed probe of `speed_n` prompts per workload while the step is up."""

    tasks: tuple[str, ...]
    limits: dict[str, int | None] = field(default_factory=dict)  # per task; missing means the task's default
    data: str | None = None
    base: RunSpec = field(default_factory=lambda: RunSpec(endpoint="", base_url="", model="", task="gsm8k"))
    speed_workloads: tuple[str, ...] = ()
    speed_n: int = 5
    speed_max_tokens: int = DecodingSettings().max_tokens
    speed_caps: Mapping[str, int] = field(default_factory=dict)  # per workload; missing means `speed_max_tokens`

    def speed_cap(self, workload: str) -> int:
        """The probe's output cap for this workload."""
        return self.speed_caps.get(workload, self.speed_max_tokens)


def check_tasks(tasks: Sequence[str], isolation: str) -> None:
    """Raise the task's domain error unless every task can be scored here
    (HumanEval: the sandbox's self-check), before any engine is built or step launched."""
    for task in tasks:
        get_task(task, isolation).prepare()


def prepare_ladder(ladder: Ladder, setups: Mapping[str, Callable[[], Mapping[str, str]]] | None = None) -> Ladder:
    """Fill placeholders from the environment and, when the ladder names a setup (`setup: embedded`), from what
    that setup returns; `setups` maps each setup name to it (`evalsvc.engine.embedded.LADDER_SETUPS`)."""
    variables = dict(os.environ)
    if ladder.setup is not None:
        setup = (setups or {}).get(ladder.setup)
        if setup is None:
            raise LadderError(ladder.source, f"setup '{ladder.setup}' is not available to this command", key="setup")
        variables.update(setup())
    return resolve_ladder(ladder, variables)


def speed_workloads(tasks: Sequence[str]) -> tuple[str, ...]:
    """The speed workloads a decision on these tasks needs: each task's own, plus chat."""
    return tuple(workload_of(t) for t in tasks) + ("chat",)


def logs_here() -> Path:
    """Where launched steps' server logs go on this machine: `$EVALSVC_HOME/logs`."""
    return evalsvc_home() / "logs"


def times_here() -> StepTimes:
    """How long long steps took on this machine (the file the engine setup writes too)."""
    return step_times(evalsvc_home())


def task_spec(plan: LadderPlan, task: str) -> RunSpec:
    """A task's run as every step gets it, before the step's name and URL (to check limits up front)."""
    return replace(plan.base, task=task, limit=plan.limits.get(task), data=plan.data if task == "gsm8k" else None)


def step_spec(step: LadderStep, task: str, plan: LadderPlan) -> RunSpec:
    """The run for one task on one step; a completions-only step gets the task's completion template."""
    template = None
    if step.mode == "completions":
        task_obj = get_task(task)
        template = next(t.name for t in task_obj.templates.values() if t.mode == "completions")
    return replace(
        task_spec(plan, task), endpoint=step.name, base_url=step.base_url, model=step.model, template=template,
        metadata=dict(step.metadata),
        new_url=True,  # the ladder file says where each step answers (a launched step may get another port)
    )


def stored_complete_run(store: Store, spec: RunSpec) -> int | None:
    """The id of a complete run with exactly this spec's identity, if one is stored."""
    task = get_task(spec.task, spec.isolation)
    template = pick_template(task, spec.template)
    samples = task.load_samples(spec.data, spec.limit)
    identity = config_hash(spec.task, template, spec.settings, task.isolation)
    with store.session() as session:
        return queries.find_complete_run(
            session, spec.endpoint, spec.task, identity, dataset_hash(samples), task.isolation
        )


def _measure(store: Store, step: LadderStep, workload: str, plan: LadderPlan) -> None:
    try:
        measure_speed(store, SpeedPlan(endpoint=step.name, workload=workload, n=plan.speed_n,
                                       max_tokens=plan.speed_cap(workload), data=plan.data,
                                       url=step.base_url, model=step.model, api_key=plan.base.api_key,
                                       new_url=True))  # the ladder file says where each step answers
    except SpeedError as exc:  # the accuracy runs stand; the decision will say the speed is missing
        log.error("step %s: %s speed not measured: %s", step.name, workload, exc)


def has_speed(store: Store, endpoint: str, workload: str, max_tokens: int) -> bool:
    """Whether the speed the decisions read for this step and workload (the latest) can stand: entered by hand,
    or measured with at least this output cap (a probe with a lower cap may have cut the answers whose
    lengths the chat decision pairs, so it is measured again)."""
    with store.session() as session:
        try:
            endpoint_id = queries.get_endpoint(session, endpoint).id
        except queries.NotFound:
            return False
        run = queries.latest_speed_run(session, endpoint_id, workload)
        return run is not None and (not run.measured or (run.max_tokens or 0) >= max_tokens)


def run_ladder_file(store: Store, path: str | Path, plan: LadderPlan, progress: bool = True,
                    setups: Mapping[str, Callable[[], Mapping[str, str]]] | None = None,
                    ) -> tuple[Ladder, list[StepOutcome]]:
    """The ladder in the file at `path`, and each step's outcome: the tasks and item limits are checked first,
    then the ladder is prepared (its setup run, see `prepare_ladder`) and every step evaluated."""
    check_tasks(plan.tasks, plan.base.isolation)
    check_limits([task_spec(plan, task) for task in plan.tasks])
    ladder = prepare_ladder(load_ladder(path), setups)
    return ladder, run_ladder(store, ladder, plan, logs_here(), progress=progress, times=times_here())


def run_ladder(store: Store, ladder: Ladder, plan: LadderPlan, log_dir: Path, progress: bool = True,
               times: StepTimes | None = None) -> list[StepOutcome]:
    """Evaluate every step of a resolved ladder in order, announcing each long part (see `evalsvc.run.status`);
    first check that every task can be scored here (a broken sandbox stops it before any step is launched)."""
    check_tasks(plan.tasks, plan.base.isolation)
    outcomes = []
    for step in ladder.steps:
        specs = [step_spec(step, task, plan) for task in plan.tasks]
        stored = {spec.task: stored_complete_run(store, spec) for spec in specs}
        todo = [spec for spec in specs if stored[spec.task] is None]
        reused = tuple(task for task, run_id in stored.items() if run_id is not None)
        run_ids = [run_id for run_id in stored.values() if run_id is not None]
        speeds = [w for w in plan.speed_workloads if not has_speed(store, step.name, w, plan.speed_cap(w))]
        if not todo and not speeds:
            log.info("step %s: every task already evaluated with this config", step.name)
            outcomes.append(StepOutcome(step.name, tuple(run_ids), reused))
            continue
        try:
            with contextlib.ExitStack() as up:
                _launch(up, step, log_dir, times)
                for spec in todo:
                    with long_step(evaluation_step(store, step, spec, log_dir), times):
                        run_ids.append(run_evaluation(store, spec, progress=progress).run_id)
                if speeds:
                    with long_step(_timing(step, speeds, plan, log_dir), times):
                        for workload in speeds:
                            _measure(store, step, workload, plan)
        except StepLaunchError as exc:
            log.error("step %s did not start: %s", step.name, exc)
            outcomes.append(StepOutcome(step.name, tuple(run_ids), reused, error=str(exc)))
            continue
        outcomes.append(StepOutcome(step.name, tuple(run_ids), reused))
    return outcomes


def _launch(up: contextlib.ExitStack, step: LadderStep, log_dir: Path, times: StepTimes | None) -> None:
    """Start the step's server inside `up`, announced when there is one to start."""
    if step.launch is None:
        up.enter_context(launch_step(step, log_dir=log_dir))
        return
    starting = LongStep(f"launch {step.name}", f"starting step '{step.name}'",
                        f"at most {step.launch.startup_timeout_s:g}s, its start timeout", step_log_path(log_dir, step.name),
                        why=f"its server, until {step.launch.health_url} answers")
    with long_step(starting, times):
        up.enter_context(launch_step(step, log_dir=log_dir))


def _server_log(step: LadderStep, log_dir: Path) -> Path | None:
    return step_log_path(log_dir, step.name) if step.launch is not None else None


def evaluation_step(store: Store, step: LadderStep, spec: RunSpec, log_dir: Path) -> LongStep:
    """Evaluating one task on one step, as announced; its status lines count the items stored so far."""
    items = f"the first {spec.limit}" if spec.limit else "the default"

    def progress() -> str:
        with store.session() as session:
            done = queries.items_in_latest_run(session, step.name, spec.task)
        return f"{done}{f' of {spec.limit}' if spec.limit else ''} items stored"

    return LongStep(f"evaluate {step.name} {spec.task} n={spec.limit or 'default'}",
                    f"evaluating step '{step.name}' on {spec.task}", "no timing on this machine yet",
                    _server_log(step, log_dir), why=f"{items} items", progress=progress)


def _timing(step: LadderStep, workloads: list[str], plan: LadderPlan, log_dir: Path) -> LongStep:
    return LongStep(f"speed {step.name} {','.join(workloads)} n={plan.speed_n}",
                    f"timing step '{step.name}' at batch 1", "no timing on this machine yet",
                    _server_log(step, log_dir), why=f"{plan.speed_n} prompts each for {', '.join(workloads)}")
