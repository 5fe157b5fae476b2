"""The demo: the embedded CPU ladder built, served, evaluated on a few items of each task, timed and compared,
so that a new user sees every part of evalsvc work on their own machine.

`evalsvc demo` only reads its options and prints what `run_demo` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from db import queries
from db.engine import Store
from evalsvc.decision.build import chat_tokens
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
DEMO_SPEED_MAX_TOKENS = 128  # math and code probes give decode speeds only: their lengths come from the runs
# The chat probe's answers are the chat decision's lengths, so they must end by themselves: on the two Q4_1 steps
# SmolLM2 ends all three in 182 to 380 tokens, when 128 cut them all; the pure Q4_0 step runs past any cap a demo
# can afford (one answer loops to 2048), so its chat decision stays "can't tell yet" and `chat_cut_line` says why.
DEMO_CHAT_MAX_TOKENS = 512


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
                      speed_max_tokens=DEMO_SPEED_MAX_TOKENS, speed_caps={"chat": DEMO_CHAT_MAX_TOKENS})


def demo_sizes(full: bool) -> str:
    """How many items of each task the demo evaluates, in words."""
    return "full sets" if full else ", ".join(f"{n} {t}" for t, n in DEMO_LIMITS.items())


def demo_timing() -> str:
    """How the demo times each step, in words."""
    return f"timed on {DEMO_SPEED_N} prompts per workload, chat answers up to {DEMO_CHAT_MAX_TOKENS} tokens"


def chat_cut_line(store: Store, steps: Sequence[str]) -> str | None:
    """One plain line on why a step's chat decision can't be told when its chat probe answers ran to the cap
    without ending (counted where the decision counts them); None when every answer ended."""
    cut: dict[str, tuple[int, int]] = {}
    with store.session() as session:
        for a, b in zip(steps, steps[1:]):
            try:
                found = chat_tokens(session, queries.get_endpoint(session, a), queries.get_endpoint(session, b))
            except queries.NotFound:  # a step that did not start has no endpoint stored
                continue
            if isinstance(found, str):
                continue
            tokens, truncated, _ = found
            for name, n in zip((a, b), truncated):
                if n:
                    cut[name] = (n, len(tokens[0]))
    if not cut:
        return None
    which = ", ".join(f"{n} of {total} answers of {name}" for name, (n, total) in cut.items())
    name = next(iter(cut))
    return (f"chat: can't tell yet next to {' and '.join(cut)}: {which} ran to the chat probe's "
            f"{DEMO_CHAT_MAX_TOKENS}-token cap without ending (SmolLM2-135M can repeat itself until cut), and a "
            "length cut by the cap is no length; what would settle it: answers that end, which a larger cap gives "
            f"only if the model stops (`evalsvc speed --endpoint {name} --workload chat --limit {DEMO_SPEED_N} "
            "--max-tokens 2048`, same --db)")


def demo_step(ladder: Ladder, full: bool) -> LongStep:
    """The demo as a whole, announced first."""
    return LongStep(
        "demo --full" if full else "demo", "running the demo",
        "no timing on this machine yet; the first run builds the engine (4 to 30 minutes on 2 cores), "
        "then evaluating takes 5 to 25 minutes",
        why=f"the embedded CPU ladder {' -> '.join(s.name for s in ladder.steps)}, {demo_sizes(full)} items per "
        "step, then the comparison; results already stored are reused",
    )
