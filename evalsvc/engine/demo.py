"""The demo: the embedded CPU ladder built, served, evaluated on a few items of each task, timed and compared,
so that a new user sees every part of evalsvc work on their own machine.

`evalsvc demo` only reads its options and prints what `run_demo` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from db.engine import Store
from evalsvc.engine.bubblewrap import ensure_bubblewrap
from evalsvc.engine.embedded import LADDER_SETUPS
from evalsvc.ladder.file import Ladder, load_ladder
from evalsvc.ladder.run import (
    LadderPlan, StepOutcome, check_tasks, logs_here, prepare_ladder, run_ladder, speed_workloads, times_here,
)
from evalsvc.run.runner import RunSpec
from evalsvc.run.status import LongStep, long_step
from harness.tasks import TASK_NAMES
from harness.types import DecodingSettings

DEMO_LIMITS = {"gsm8k": 10, "humaneval": 10}  # items per task and step: minutes on 2 cores, not hours
DEMO_MAX_TOKENS = 384  # enough for SmolLM2's answers to these items; the full demo keeps the usual cap
DEMO_SPEED_N = 3
DEMO_SPEED_MAX_TOKENS = 128


@dataclass(frozen=True)
class DemoResult:
    """What the demo did: the store it wrote to, the ladder as run, each step's outcome, the output cap."""

    store: Store
    ladder: Ladder
    outcomes: list[StepOutcome]
    max_tokens: int


def embedded_ladder_path() -> Path:
    """The ladder file the demo runs (shipped with evalsvc)."""
    return Path(str(resources.files("evalsvc.ladder") / "builtin" / "embedded-cpu.yaml"))


def run_demo(open_store: Callable[[], Store], full: bool, data: str | None, isolation: str,
             progress: bool) -> DemoResult:
    """Check the sandbox, build the engine if needed, then evaluate and time every step of the embedded ladder.

    The whole demo is announced first (the line a new user sees within a second), so the store is opened
    by `open_store` inside it.
    """
    raw = load_ladder(embedded_ladder_path())
    times = times_here()
    max_tokens = DecodingSettings().max_tokens if full else DEMO_MAX_TOKENS
    with long_step(demo_step(raw, full), times, beat=False) as demo:  # each long part beats on its own
        store = open_store()
        ensure_bubblewrap(isolation)
        check_tasks(TASK_NAMES, isolation)  # before the engine build: a missing sandbox stops the demo in seconds
        ladder = prepare_ladder(raw, LADDER_SETUPS)
        outcomes = run_ladder(store, ladder, demo_plan(full, data, isolation, max_tokens), logs_here(),
                              progress=progress, times=times)
        demo.failed = ", ".join(f"step {o.step} did not start" for o in outcomes if o.error)
    return DemoResult(store, ladder, outcomes, max_tokens)


def demo_plan(full: bool, data: str | None, isolation: str, max_tokens: int) -> LadderPlan:
    """Every task on every step (a few items each unless `full`), one request at a time, and the speeds."""
    base = RunSpec(endpoint="", base_url="", model="", task="gsm8k", concurrency=1, isolation=isolation,
                   settings=DecodingSettings(max_tokens=max_tokens))
    limits = {task: None if full else DEMO_LIMITS[task] for task in TASK_NAMES}
    return LadderPlan(tasks=TASK_NAMES, limits=limits, data=data, base=base,
                      speed_workloads=speed_workloads(TASK_NAMES), speed_n=DEMO_SPEED_N,
                      speed_max_tokens=DEMO_SPEED_MAX_TOKENS)


def demo_sizes(full: bool) -> str:
    """How many items of each task the demo evaluates, in words."""
    return "full sets" if full else ", ".join(f"{n} {t}" for t, n in DEMO_LIMITS.items())


def demo_step(ladder: Ladder, full: bool) -> LongStep:
    """The demo as a whole, announced first."""
    return LongStep(
        "demo --full" if full else "demo", "running the demo",
        "no timing on this machine yet; the first run builds the engine (4 to 30 minutes on 2 cores), "
        "then evaluating takes 5 to 25 minutes",
        why=f"the embedded CPU ladder {' -> '.join(s.name for s in ladder.steps)}, {demo_sizes(full)} items per "
        "step, then the comparison; results already stored are reused",
    )
