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
from typing import Any, ClassVar

from sqlalchemy import Connection
from sqlalchemy.orm import Session
from tqdm import tqdm

from db import queries
from db.engine import Store
from db.models import Item
from evalsvc import tool_version
from evalsvc.run.interrupts import run_until_stopped
from harness.client import EndpointClient
from harness.errors import EXIT_FAILED, RESUME_HINT, UserError
from harness.tasks import PromptTemplate, Task, TaskError, get_task, pick_template
from harness.types import Completion, DecodingSettings, ItemResult, Request, Sample, stable_hash

log = logging.getLogger(__name__)

ITEM_ID_MAX = Item.item_id.type.length  # type: ignore[attr-defined]


class RunInterrupted(Exception):
    """Ctrl-C stopped the run; what finished is stored and `run_id` can be resumed."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} interrupted; {RESUME_HINT}")
        self.run_id = run_id


class RunFailed(UserError):
    """Runs ended without the results asked for: too many items failed, or no ladder step started."""

    exit_code: ClassVar[int] = EXIT_FAILED


class IsolationMismatch(TaskError):
    """Resuming would mix items scored under two different sandboxes in one run."""


class BadItemId(TaskError):
    """Two dataset rows map to the same item id (one would overwrite the other), or an id is too long to store."""


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
    api_key: str | None = field(default=None, repr=False)  # never in a log line or a traceback
    metadata: dict[str, Any] = field(default_factory=dict)
    new_repeat: bool = False
    max_error_rate: float = 0.1
    new_url: bool = False  # the endpoint moved: accept another URL for its stored name
    timeout_s: float = 600.0
    isolation: str = "bwrap"  # how HumanEval programs are sandboxed; "process" only when asked for by name


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    resumed: bool
    skipped: int
    summary: queries.RunSummary
    error: str | None = None  # why the run failed, and how to retry


def config_hash(task: str, template: PromptTemplate, settings: DecodingSettings, isolation: str | None = None) -> str:
    """Identity of what was asked: two runs pair only when this matches. A
    weaker sandbox than bwrap is part of the identity, so such a run never
    resumes (or is resumed by) a bwrap run."""
    weaker = (isolation,) if isolation not in (None, "bwrap") else ()
    return stable_hash(task, template.key, template.mode, json.dumps(settings.as_dict(), sort_keys=True), *weaker)


def check_item_ids(samples: list[Sample]) -> None:
    """Raise BadItemId for the first id that two samples share or that the store cannot hold."""
    first_row: dict[str, int] = {}
    for row, sample in enumerate(samples, start=1):
        if sample.item_id in first_row:
            raise BadItemId(
                f"{sample.task} data has item id {sample.item_id!r} twice (rows {first_row[sample.item_id]} and "
                f"{row}); item ids must be unique, fix the dataset file"
            )
        if len(sample.item_id) > ITEM_ID_MAX:
            raise BadItemId(f"{sample.task} data row {row} has an item id of {len(sample.item_id)} characters; "
                            f"at most {ITEM_ID_MAX} fit the store")
        first_row[sample.item_id] = row


def check_sample_count(spec: RunSpec, samples: list[Sample]) -> None:
    """Raise TaskError for an empty dataset, or a --limit beyond what it holds (never quietly fewer items)."""
    source = spec.data or f"the {spec.task} data"
    if not samples:
        raise TaskError(f"{source} holds no items; give a {spec.task} file with at least one item")
    if spec.limit is not None and len(samples) < spec.limit:
        raise TaskError(f"--limit {spec.limit} is more than the {len(samples)} items {source} holds; "
                        f"give --limit {len(samples)} or leave it out")


def check_limits(specs: list[RunSpec]) -> None:
    """`check_sample_count` for every spec before any runs (not when the run of a later task starts)."""
    for spec in specs:
        check_sample_count(spec, get_task(spec.task).load_samples(spec.data, spec.limit))


def dataset_hash(samples: list[Sample]) -> str:
    return stable_hash(*(s.item_hash for s in samples))


def run_evaluation(store: Store, spec: RunSpec, progress: bool = True) -> RunOutcome:
    """Run `spec` to completion (or until Ctrl-C, raising RunInterrupted)."""
    return run_until_stopped(execute_run(store, spec, progress))


async def execute_run(store: Store, spec: RunSpec, progress: bool = True) -> RunOutcome:
    queries.check_endpoint_name(spec.endpoint)
    task = get_task(spec.task, spec.isolation)
    template = pick_template(task, spec.template)
    samples = task.load_samples(spec.data, spec.limit)
    check_sample_count(spec, samples)
    check_item_ids(samples)
    task.prepare()  # e.g. the sandbox's self-check: a broken one stops the run before anything is stored
    async with EndpointClient(
        spec.base_url, spec.model, api_key=spec.api_key, timeout_s=spec.timeout_s,
        max_connections=max(spec.concurrency, 1),
    ) as client:
        fingerprint = await client.fingerprint()
        with store.session() as session:
            run, resumed, done = _open_run(session, spec, template, samples, fingerprint, client.base_url, task.isolation)
            pending = [s for s in samples if s.item_id not in done]
            log.info("run %d: %d items, %d already done", run.id, len(samples), len(samples) - len(pending))
            try:
                await _evaluate(session, run.id, task, template, client, spec, pending, len(samples), progress)
            except asyncio.CancelledError:
                queries.finish_run(session, run.id, "interrupted")
                raise RunInterrupted(run.id) from None
            summary = queries.summarize_runs(session, [run.id])[0]
            status, error = _final_status(summary, spec.max_error_rate, queries.common_error(session, run.id))
            queries.finish_run(session, run.id, status, error)
            summary = queries.summarize_runs(session, [run.id])[0]
    return RunOutcome(run_id=run.id, resumed=resumed, skipped=len(samples) - len(pending), summary=summary,
                      error=error)


def _open_run(session, spec, template, samples, fingerprint, base_url, isolation):  # type: ignore[no-untyped-def]
    endpoint = queries.upsert_endpoint(session, spec.endpoint, base_url, spec.model, fingerprint, spec.metadata,
                                       new_url=spec.new_url)
    fields = {
        "task": spec.task,
        "template": template.key,
        "mode": template.mode,
        "decoding": spec.settings.as_dict(),
        "config_hash": config_hash(spec.task, template, spec.settings, isolation),
        "isolation": isolation,
        "dataset_hash": dataset_hash(samples),
        "n_items": len(samples),
        "evalsvc_version": tool_version(),
    }
    run, resumed = queries.open_run(session, endpoint, fields, spec.new_repeat)
    if resumed and run.isolation not in (None, isolation):
        session.rollback()
        raise IsolationMismatch(
            f"run {run.id} was scored under {run.isolation!r} isolation, this one would be {isolation!r}; "
            "pass --repeat to start a fresh run instead of resuming it"
        )
    if not resumed and not spec.new_repeat:  # e.g. a larger --limit: keep what a stored run already answered
        reused = queries.reuse_items(session, run, {s.item_id: s.item_hash for s in samples})
        log.info("run %d: reused %d finished items of an earlier run with the same settings", run.id, reused)
    session.commit()
    return run, resumed, queries.done_item_ids(session, run.id)


class ItemWriter:
    """Commits finished items from one coroutine, as many per transaction as are waiting.

    Durability: `save` returns only once the item's row is committed, and the
    runner keeps the item's concurrency slot until then, so at any moment at
    most `concurrency` items are in flight or waiting for their commit; a
    kill -9 loses at most those, and a resume redoes them. Items that finish
    while a commit runs go into the next one (group commit, no timer), which
    spares a transaction per item without delaying any row.
    """

    def __init__(self, conn: Connection, run_id: int) -> None:
        self._conn = conn
        self._run_id = run_id
        self._queue: asyncio.Queue[tuple[dict[str, Any], asyncio.Future[None]]] = asyncio.Queue()

    async def save(self, row: dict[str, Any]) -> None:
        """Queue `row` (from `queries.item_values`) and wait until it is committed."""
        committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((row, committed))
        await committed

    async def run(self) -> None:
        """Write batches until cancelled."""
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(0)  # let items that finished in the same loop turn join this commit
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                self._write(batch)
            except Exception as exc:  # never leave an item waiting on a writer that died
                for _, committed in batch:
                    if not committed.done():
                        committed.set_exception(exc)

    def _write(self, batch: list[tuple[dict[str, Any], asyncio.Future[None]]]) -> None:
        try:
            queries.save_items(self._conn, self._run_id, [row for row, _ in batch])
        except Exception as exc:  # one unstorable row must not sink the others: store them one by one
            self._rollback()
            log.warning("run %d: a batch of %d items failed to store (%s); storing them one by one",
                        self._run_id, len(batch), _describe(exc))
            for row, committed in batch:
                self._write_one(row, committed)
            return
        for _, committed in batch:
            if not committed.done():
                committed.set_result(None)

    def _write_one(self, row: dict[str, Any], committed: asyncio.Future[None]) -> None:
        """Store `row`, or in its place an error row saying why it could not be stored.

        Only when even that fails (the store itself is gone) does the item fail, and with it the run.
        """
        try:
            queries.save_items(self._conn, self._run_id, [row])
        except Exception as exc:
            self._rollback()
            log.warning("run %d: item %s could not be stored: %s", self._run_id, row["item_id"], _describe(exc))
            try:
                queries.save_items(self._conn, self._run_id, [queries.error_values(
                    row, f"could not store the item: {_describe(exc)}")])
            except Exception as fatal:
                self._rollback()
                if not committed.done():
                    committed.set_exception(fatal)
                return
        if not committed.done():
            committed.set_result(None)

    def _rollback(self) -> None:
        try:
            self._conn.rollback()
        except Exception as exc:  # a connection that is gone has nothing to roll back; the next write says so
            log.debug("rollback failed: %s", exc)


def _describe(exc: BaseException) -> str:
    """The exception's type and first line: enough to act on, short enough for a row."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


async def _evaluate(
    session: Session, run_id: int, task: Task, template: PromptTemplate, client: EndpointClient,
    spec: RunSpec, pending: list[Sample], total: int, progress: bool,
) -> None:
    bar = tqdm(total=total, initial=total - len(pending), disable=not progress, desc=f"{spec.endpoint}/{spec.task}")
    limiter = asyncio.Semaphore(max(spec.concurrency, 1))
    writer_conn = session.get_bind().connect()
    writer = ItemWriter(writer_conn, run_id)

    async def one(sample: Sample) -> None:
        async with limiter:
            request = template.build(sample)
            completion = await _complete(client, request, spec.settings)
            result, completion = await _score(task, sample, completion)
            await writer.save(_row(run_id, sample, request, completion, result))
        bar.update(1)

    writing = asyncio.create_task(writer.run())
    beating = asyncio.create_task(_heartbeat(writer_conn, run_id))
    try:
        await asyncio.gather(*(one(s) for s in pending))
    finally:
        beating.cancel()
        writing.cancel()
        writer_conn.close()
        bar.close()


async def _heartbeat(conn: Connection, run_id: int) -> None:
    """Beat every `queries.HEARTBEAT_S` until cancelled; on the writer's connection, between its commits."""
    while True:
        await asyncio.sleep(queries.HEARTBEAT_S)
        try:
            queries.beat(conn, run_id)
        except Exception as exc:  # a missed beat must not stop the run; the next one tries again
            conn.rollback()
            log.warning("run %d: heartbeat not recorded: %s", run_id, exc)


async def _complete(client: EndpointClient, request: Request, settings: DecodingSettings) -> Completion:
    """The endpoint's answer; an unexpected failure while getting or reading it is this item's error."""
    try:
        return await client.complete(request, settings)
    except Exception as exc:  # whatever a response does to the client, it ends this item only
        log.exception("request failed unexpectedly")
        return Completion(error=f"reading the response failed: {_describe(exc)}")


def _row(run_id: int, sample: Sample, request: Request, completion: Completion,
         result: ItemResult | None) -> dict[str, Any]:
    """The item's row; when its values cannot even be built, an error row saying why."""
    try:
        return queries.item_values(run_id, sample, request, completion, result)
    except Exception as exc:
        log.exception("item %s cannot be turned into a row", sample.item_id)
        bare = queries.item_values(run_id, sample, request, Completion(latency_s=completion.latency_s,
                                   attempts=completion.attempts, error="unstorable"), None)
        return queries.error_values(bare, f"could not store the item: {_describe(exc)}")


async def _score(task: Task, sample: Sample, completion: Completion) -> tuple[ItemResult | None, Completion]:
    if completion.error is not None:
        return None, completion
    try:
        if task.score_blocks:  # e.g. running tests in the sandbox
            return await asyncio.to_thread(task.score, sample, completion), completion
        return task.score(sample, completion), completion
    except Exception as exc:  # a scoring failure is an error row, never a wrong answer
        log.exception("scoring %s failed", sample.item_id)
        failed = Completion(**{**completion.__dict__, "error": f"scoring failed: {_describe(exc)}"})
        return None, failed


def _final_status(summary: queries.RunSummary, max_error_rate: float,
                  common: tuple[str, int] | None) -> tuple[str, str | None]:
    """complete, or failed with why: the share of errors, the most common one, and how to retry."""
    if summary.n and summary.errors / summary.n > max_error_rate:
        why = f"; most common error ({common[1]} of them): {common[0]}" if common else ""
        return "failed", (f"{summary.errors} of {summary.n} items failed (more than {max_error_rate:.0%}){why}; "
                          "fix the cause and run the same command: it retries only the failed items")
    return "complete", None
