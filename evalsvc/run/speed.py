"""Measuring an endpoint's batch-1 speed per workload and storing it.

Workloads: math (GSM8K questions), code (HumanEval problems), chat (a
ShareGPT-style set, or the built-in prompts written for this project).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from tqdm import tqdm

from db import queries
from db.engine import Store
from db.models import SpeedRun
from evalsvc.run.interrupts import run_until_stopped
from harness.chat_prompts import load_chat_prompts
from harness.client import EndpointClient
from harness.errors import UserError
from harness.speed import probe_speed
from harness.tasks import WORKLOADS, get_task, pick_template, task_of
from harness.types import DecodingSettings, Request, SpeedSample

log = logging.getLogger(__name__)



class SpeedError(UserError):
    """A speed measurement cannot be made or stored."""


@dataclass(frozen=True)
class SpeedPlan:
    endpoint: str
    workload: str
    n: int = 20
    max_tokens: int = DecodingSettings().max_tokens
    data: str | None = None
    chat_source: str | None = None
    url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    new_url: bool = False  # the endpoint moved: accept another URL for its stored name


def workload_prompts(workload: str, n: int, data: str | None, chat_source: str | None) -> list[tuple[str, Request]]:
    """(prompt id, request) pairs for a workload, built with each task's default template."""
    if workload == "chat":
        return [(p.prompt_id, Request(mode="chat", messages=p.messages))
                for p in load_chat_prompts(chat_source, limit=n, strict=chat_source is not None)]
    task_name = task_of(workload)
    if task_name is None:
        raise SpeedError(f"unknown workload {workload!r}; choose one of: {', '.join(WORKLOADS)}")
    task = get_task(task_name)
    template = pick_template(task, None)
    samples = task.load_samples(data if workload == "math" else None, n)
    return [(s.item_id, template.build(s)) for s in samples]


def measure_speed(store: Store, plan: SpeedPlan, progress: bool = False) -> SpeedRun:
    """Probe the endpoint one request at a time and store every sample."""
    prompts = workload_prompts(plan.workload, plan.n, plan.data, plan.chat_source)  # bad prompts: nothing stored
    with store.session() as session:
        endpoint = _endpoint(session, plan)
        base_url, model = endpoint.base_url, endpoint.model
    samples, spec = run_until_stopped(_probe(base_url, model, [r for _, r in prompts], plan, progress))
    failed = sum(not s.ok for s in samples)
    if failed == len(samples):
        raise SpeedError(f"every speed request to {base_url} failed; first error: {samples[0].error}")
    with store.session() as session:
        endpoint = queries.get_endpoint(session, plan.endpoint)
        spec_dict = None if spec is None else spec.as_record()
        pairs = [(pid, s) for (pid, _), s in zip(prompts, samples)]
        return queries.add_speed_run(session, endpoint, plan.workload, pairs, "speed probe (batch 1, streaming)",
                             plan.max_tokens, spec_dict)


async def _probe(base_url: str, model: str, requests: list[Request], plan: SpeedPlan, progress: bool):  # type: ignore[no-untyped-def]
    # A progress bar on stderr (off with --json), not a log line per request: results stay on stdout.
    bar = tqdm(total=len(requests), disable=not progress, desc=f"{plan.endpoint}/{plan.workload} speed", unit="req")

    def report(sample: SpeedSample) -> None:
        bar.set_postfix_str(f"{sample.decode_tps:.1f} tok/s" if sample.decode_tps else "failed", refresh=False)
        bar.update(1)

    try:
        return await probe_speed(base_url, model, requests, mode=requests[0].mode,
                                 decoding=DecodingSettings(max_tokens=plan.max_tokens), api_key=plan.api_key,
                                 on_sample=report)
    finally:
        bar.close()


def _endpoint(session, plan: SpeedPlan):  # type: ignore[no-untyped-def]
    """The stored endpoint, registered first when --url and --model are given."""
    if plan.url and plan.model:
        fingerprint = run_until_stopped(_fingerprint(plan))
        endpoint = queries.upsert_endpoint(session, plan.endpoint, plan.url, plan.model, fingerprint, {},
                                           new_url=plan.new_url)
        session.commit()
        return endpoint
    return queries.get_endpoint(session, plan.endpoint)


async def _fingerprint(plan: SpeedPlan) -> dict:
    async with EndpointClient(plan.url or "", plan.model or "", api_key=plan.api_key) as client:
        return await client.fingerprint()


def record_speed_by_hand(store: Store, endpoint: str, workload: str, tps: float, ttft_s: float, source: str) -> SpeedRun:
    """Store a speed figure that was not measured here, with where it came from."""
    if not (math.isfinite(tps) and tps > 0 and math.isfinite(ttft_s) and ttft_s >= 0):
        raise SpeedError(f"--tokens-per-second must be positive and --ttft non-negative, got {tps} and {ttft_s}")
    if not source.strip():
        raise SpeedError("a hand-entered speed needs --source saying where the figure comes from")
    with store.session() as session:
        return queries.add_speed_by_hand(session, queries.get_endpoint(session, endpoint), workload, tps, ttft_s, source)
