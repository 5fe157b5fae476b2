"""The runner: evaluates one endpoint on one task and stores every item as it finishes.

Bounded concurrency, a progress bar that can be turned off, resume by
identity (the same endpoint + task + config + items continues the stored run
instead of redoing finished items), and Ctrl-C keeps what finished.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from db import queries
from db.engine import Store
from harness.client import EndpointClient
from harness.tasks import PromptTemplate, Task, get_task, pick_template
from harness.types import Completion, DecodingSettings, ItemResult, Sample, stable_hash

log = logging.getLogger(__name__)


class RunInterrupted(Exception):
    """Ctrl-C stopped the run; what finished is stored and `run_id` can be resumed."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} interrupted; finished items are stored, run the same command to resume")
        self.run_id = run_id


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one evaluation."""

    endpoint: str
    base_url: str
    model: str
    task: str
    template: str | None = None
    data: str | None = None
    limit: int | None = None
    settings: DecodingSettings = DecodingSettings()
    concurrency: int = 8
    api_key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    new_repeat: bool = False
    max_error_rate: float = 0.1
    timeout_s: float = 600.0


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    resumed: bool
    skipped: int
    summary: queries.RunSummary


def config_hash(task: str, template: PromptTemplate, settings: DecodingSettings) -> str:
    """Identity of what was asked: two runs pair only when this matches."""
    return stable_hash(task, template.key, template.mode, json.dumps(settings.as_dict(), sort_keys=True))


def dataset_hash(samples: list[Sample]) -> str:
    return stable_hash(*(s.item_hash for s in samples))


def run_evaluation(store: Store, spec: RunSpec, progress: bool = True) -> RunOutcome:
    """Run `spec` to completion (or until Ctrl-C, raising RunInterrupted)."""
    return asyncio.run(execute_run(store, spec, progress))


async def execute_run(store: Store, spec: RunSpec, progress: bool = True) -> RunOutcome:
    task = get_task(spec.task)
    template = pick_template(task, spec.template)
    samples = task.load_samples(spec.data, spec.limit)
    async with EndpointClient(
        spec.base_url, spec.model, api_key=spec.api_key, timeout_s=spec.timeout_s,
        max_connections=max(spec.concurrency, 1),
    ) as client:
        fingerprint = await client.fingerprint()
        with store.session() as session:
            run, resumed, done = _open_run(session, spec, template, samples, fingerprint, client.base_url)
            pending = [s for s in samples if s.item_id not in done]
            log.info("run %d: %d items, %d already done", run.id, len(samples), len(samples) - len(pending))
            try:
                await _evaluate(session, run.id, task, template, client, spec, pending, len(samples), progress)
            except asyncio.CancelledError:
                queries.finish_run(session, run.id, "interrupted")
                raise RunInterrupted(run.id) from None
            summary = queries.summarize_runs(session, [run.id])[0]
            status, error = _final_status(summary, spec.max_error_rate)
            queries.finish_run(session, run.id, status, error)
            summary = queries.summarize_runs(session, [run.id])[0]
    return RunOutcome(run_id=run.id, resumed=resumed, skipped=len(samples) - len(pending), summary=summary)


def _open_run(session, spec, template, samples, fingerprint, base_url):  # type: ignore[no-untyped-def]
    endpoint = queries.upsert_endpoint(session, spec.endpoint, base_url, spec.model, fingerprint, spec.metadata)
    fields = {
        "task": spec.task,
        "template": template.key,
        "mode": template.mode,
        "decoding": spec.settings.as_dict(),
        "config_hash": config_hash(spec.task, template, spec.settings),
        "dataset_hash": dataset_hash(samples),
        "n_items": len(samples),
    }
    run, resumed = queries.open_run(session, endpoint, fields, spec.new_repeat)
    session.commit()
    return run, resumed, queries.done_item_ids(session, run.id)


async def _evaluate(
    session, run_id: int, task: Task, template: PromptTemplate, client: EndpointClient,  # type: ignore[no-untyped-def]
    spec: RunSpec, pending: list[Sample], total: int, progress: bool,
) -> None:
    bar = tqdm(total=total, initial=total - len(pending), disable=not progress, desc=f"{spec.endpoint}/{spec.task}")
    limiter = asyncio.Semaphore(max(spec.concurrency, 1))

    async def one(sample: Sample) -> None:
        async with limiter:
            request = template.build(sample)
            completion = await client.complete(request, spec.settings)
            result, completion = await _score(task, sample, completion)
        # Written from the event loop thread only, one transaction per item.
        queries.save_item(session, run_id, sample, request, completion, result)
        bar.update(1)

    try:
        await asyncio.gather(*(one(s) for s in pending))
    finally:
        bar.close()


async def _score(task: Task, sample: Sample, completion: Completion) -> tuple[ItemResult | None, Completion]:
    if completion.error is not None:
        return None, completion
    try:
        return await asyncio.to_thread(task.score, sample, completion), completion
    except Exception as exc:  # a scoring failure is an error row, never a wrong answer
        log.exception("scoring %s failed", sample.item_id)
        failed = Completion(**{**completion.__dict__, "error": f"scoring failed: {type(exc).__name__}: {exc}"})
        return None, failed


def _final_status(summary: queries.RunSummary, max_error_rate: float) -> tuple[str, str | None]:
    if summary.n and summary.errors / summary.n > max_error_rate:
        return "failed", f"{summary.errors} of {summary.n} items failed (more than {max_error_rate:.0%})"
    return "complete", None
