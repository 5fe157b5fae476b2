"""Query functions: everything that reads or writes the store goes through here.

They return ORM rows for the runner and plain records or DataFrames for the
statistics and the dashboard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import Endpoint, Item, Run, SpeedRun, SpeedSampleRow, utcnow
from harness.errors import UserError
from harness.redact import mask_url, scrub, strip_credentials
from harness.types import Completion, ItemResult, Request, Sample, SpeedSample
from harness.urls import normalize_base_url

if TYPE_CHECKING:
    import pandas as pd

# The columns of an items frame (`items_frame`), the one shape statistics, reports and the dashboard read.
ITEM_COLUMNS = (
    "run_id", "endpoint", "task", "item_id", "item_hash", "status", "correct", "extracted", "reference",
    "completion_tokens", "reasoning_tokens", "prompt_tokens", "finish_reason", "truncated", "latency_s",
)


class NotFound(UserError, LookupError):
    """A run or endpoint named on the command line does not exist."""


NAME_MAX = 200  # endpoints.name column width


class InvalidName(UserError, ValueError):
    """An endpoint name the store cannot hold."""


class EndpointConflict(UserError):
    """An endpoint name is already bound to a different model."""


@dataclass(frozen=True)
class RunSummary:
    run_id: int
    endpoint: str
    task: str
    template: str
    status: str
    n_items: int
    n: int
    correct: int
    errors: int
    truncated: int
    accuracy: float | None
    mean_completion_tokens: float | None
    repeat: int
    started_at: datetime
    isolation: str | None  # the sandbox HumanEval programs ran in; None when scoring runs no code
    finished_at: datetime | None
    # Answered items whose completion token count is unknown (the endpoint sent none or an impossible one):
    # left out of every length and task-time figure.
    unknown_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["started_at"] = self.started_at.isoformat() if self.started_at else None
        d["finished_at"] = self.finished_at.isoformat() if self.finished_at else None
        return d


# -- endpoints ----------------------------------------------------------------


def check_endpoint_name(name: str) -> None:
    """Raise InvalidName for a name the store cannot hold or that reads as a run id."""
    if not name.strip() or len(name) > NAME_MAX:
        raise InvalidName(f"endpoint name must be 1 to {NAME_MAX} characters, got {len(name)}; choose a shorter --endpoint")
    if name.isdigit():
        raise InvalidName(f"endpoint name {name!r} looks like a run id (`show {name}` would mean run {name}); "
                          "choose a name with a letter in it, e.g. step" + name)


def upsert_endpoint(
    session: Session, name: str, base_url: str, model: str, fingerprint: dict[str, Any], metadata: dict[str, Any],
    new_url: bool = False,
) -> Endpoint:
    """The endpoint called `name`, created or refreshed. A name stays bound to one model and one URL.

    The URL is stored in its one spelling (`harness.urls.normalize_base_url`), whoever stores it. Another
    URL for a stored name is refused (the stored URL is what its earlier runs were measured at) unless
    `new_url` says the endpoint moved; the URL it had is then kept in its metadata. Nothing secret is
    stored: the URL loses its user part and key parameters, and credential fields of the fingerprint
    (SGLang's server info lists its `api_key`) and metadata are masked.
    """
    check_endpoint_name(name)
    base_url = normalize_base_url(strip_credentials(base_url))
    fingerprint, metadata = scrub(fingerprint), scrub(metadata)
    endpoint = session.scalar(select(Endpoint).where(Endpoint.name == name))
    if endpoint is None:
        endpoint = Endpoint(name=name, base_url=base_url, model=model, fingerprint=fingerprint, metadata_=metadata)
        session.add(endpoint)
        session.flush()
        return endpoint
    check_same_endpoint(endpoint, base_url, model, new_url)
    if normalize_base_url(endpoint.base_url) != base_url:
        moves = [*endpoint.metadata_.get("earlier_urls", []), {"url": endpoint.base_url, "until": utcnow().isoformat()}]
        metadata = {**metadata, "earlier_urls": moves}
    endpoint.base_url = base_url
    endpoint.fingerprint = fingerprint
    endpoint.metadata_ = {**endpoint.metadata_, **metadata}
    session.flush()
    return endpoint


def check_same_endpoint(endpoint: Endpoint, base_url: str, model: str, new_url: bool) -> None:
    """Raise EndpointConflict when a stored endpoint name is reused for another model, or silently another URL."""
    if endpoint.model != model:
        raise EndpointConflict(
            f"endpoint {endpoint.name!r} was stored with model {endpoint.model!r}, not {model!r}; "
            "use a new --endpoint name for a different model"
        )
    # Stores written before URLs had one spelling may hold `http://h:p`; it is the same server as `http://h:p/v1`.
    if normalize_base_url(endpoint.base_url) != normalize_base_url(base_url) and not new_url:
        raise EndpointConflict(
            f"endpoint {endpoint.name!r} was stored at {mask_url(endpoint.base_url)}, not {mask_url(base_url)}; "
            "use a new --endpoint name for another server, or add --new-url if this endpoint moved"
        )


def get_endpoint(session: Session, name: str) -> Endpoint:
    endpoint = session.scalar(select(Endpoint).where(Endpoint.name == name))
    if endpoint is None:
        known = session.scalars(select(Endpoint.name).order_by(Endpoint.name)).all()
        raise NotFound(f"no endpoint named {name!r}; known endpoints: {', '.join(known) or '(none yet)'}")
    return endpoint


# -- runs -------------------------------------------------------------------------


def open_run(session: Session, endpoint: Endpoint, fields: dict[str, Any], new_repeat: bool) -> tuple[Run, bool]:
    """The run to continue for this endpoint + task + config + items, or a new one.

    Returns (run, resumed). With `new_repeat`, a fresh repeat run is always
    started (for measuring run-to-run noise).
    """
    identity = (
        (Run.endpoint_id == endpoint.id)
        & (Run.task == fields["task"])
        & (Run.config_hash == fields["config_hash"])
        & (Run.dataset_hash == fields["dataset_hash"])
    )
    existing = session.scalars(select(Run).where(identity).order_by(Run.repeat.desc())).first()
    if existing is not None and not new_repeat:
        existing.status = "running"
        existing.finished_at = None
        existing.heartbeat_at = utcnow()
        session.flush()
        return existing, True
    repeat = 0 if existing is None else existing.repeat + 1
    run = Run(endpoint_id=endpoint.id, repeat=repeat, status="running", heartbeat_at=utcnow(), **fields)
    session.add(run)
    session.flush()
    return run, False


def finish_run(session: Session, run_id: int, status: str, error: str | None = None) -> None:
    run = session.get(Run, run_id)
    assert run is not None
    run.status = status
    run.error = error
    run.finished_at = utcnow()
    session.commit()


# A runner beats every HEARTBEAT_S seconds; a "running" run with no beat for STALLED_AFTER_S reads as "stalled":
# its runner died (kill -9, power loss, OOM) without recording it. Running the same command again resumes it.
HEARTBEAT_S = 10.0
STALLED_AFTER_S = 60.0


def beat(conn: Connection, run_id: int) -> None:
    """Record that a runner is alive and working on the run."""
    conn.execute(update(Run).where(Run.id == run_id, Run.status == "running").values(heartbeat_at=utcnow()))
    conn.commit()


def shown_status(status: str, heartbeat_at: datetime | None, now: datetime | None = None) -> str:
    """The stored status, or "stalled" for a running run whose runner stopped beating."""
    if status != "running" or heartbeat_at is None:
        return status
    if heartbeat_at.tzinfo is None:  # SQLite hands back naive datetimes; they were written in UTC
        heartbeat_at = heartbeat_at.replace(tzinfo=timezone.utc)
    silent = ((now or utcnow()) - heartbeat_at).total_seconds()
    return "stalled" if silent > STALLED_AFTER_S else status


def reuse_items(session: Session, run: Run, item_hashes: dict[str, str]) -> int:
    """Copy into a new `run` the finished items of the same endpoint's latest other run with
    the same task and settings, where item id and content match `item_hashes`; returns how many.

    This is what lets a larger `--limit` on a stored run evaluate only the new items.
    """
    source = session.scalars(
        select(Run).where(Run.endpoint_id == run.endpoint_id, Run.task == run.task,
                          Run.config_hash == run.config_hash, Run.id != run.id)
        .order_by(Run.id.desc())
    ).first()
    if source is None:
        return 0
    columns = [c for c in _ITEMS.c if c.key not in ("id", "run_id")]
    rows = session.execute(select(*columns).where(_ITEMS.c.run_id == source.id, _ITEMS.c.status == "ok")).mappings()
    copies = [{**row, "run_id": run.id} for row in rows if item_hashes.get(row["item_id"]) == row["item_hash"]]
    if copies:
        session.execute(insert(_ITEMS), copies)
    return len(copies)


def done_item_ids(session: Session, run_id: int) -> set[str]:
    """Items of the run already answered without error (a resume skips them)."""
    rows = session.scalars(select(Item.item_id).where(Item.run_id == run_id, Item.status == "ok"))
    return set(rows)


# Built once: Core statements on the session's connection cost a fraction of the ORM's unit of work per item.
_ITEMS = Item.__table__
_INSERT_ITEMS = insert(_ITEMS)
_DELETE_ERROR_ROWS = delete(_ITEMS).where(
    _ITEMS.c.run_id == bindparam("run_id"),
    _ITEMS.c.item_id.in_(bindparam("item_ids", expanding=True)),
    _ITEMS.c.status != "ok",
)


def save_items(bind: Session | Connection, run_id: int, rows: list[dict[str, Any]]) -> None:
    """Write finished items (from `item_values`) in one transaction, replacing earlier error rows for them.

    `bind` is a Session or, cheaper for a stream of writes, a Connection of
    its own. An item already stored as ok (by a resumed copy of this run
    running at the same time) is kept and the new row for it dropped: one row
    per item, always. The plain insert is tried first; the uniqueness
    constraint tells when some item already has a row, and only then are
    error rows deleted and the insert redone without the taken items.
    """
    if not rows:
        return
    conn = bind.connection() if isinstance(bind, Session) else bind
    try:
        conn.execute(_INSERT_ITEMS, rows)
        bind.commit()
    except IntegrityError:
        bind.rollback()
        _replace_error_rows(bind, run_id, rows)


def _replace_error_rows(bind: Session | Connection, run_id: int, rows: list[dict[str, Any]]) -> None:
    conn = bind.connection() if isinstance(bind, Session) else bind
    item_ids = [row["item_id"] for row in rows]
    conn.execute(_DELETE_ERROR_ROWS, {"run_id": run_id, "item_ids": item_ids})
    query = select(_ITEMS.c.item_id).where(_ITEMS.c.run_id == run_id, _ITEMS.c.item_id.in_(item_ids))
    taken = set(conn.execute(query).scalars())  # ok rows: they stay
    fresh = [row for row in rows if row["item_id"] not in taken]
    if fresh:
        conn.execute(_INSERT_ITEMS, fresh)
    bind.commit()


def item_values(
    run_id: int, sample: Sample, request: Request, completion: Completion, result: ItemResult | None
) -> dict[str, Any]:
    """The column values of one item's row, texts made storable on every backend."""
    ok = completion.error is None and result is not None
    return {
        "run_id": run_id,
        "item_id": sample.item_id,
        "item_hash": sample.item_hash,
        "status": "ok" if ok else "error",
        "correct": result.passed if ok and result else None,
        "reference": _clean_text(sample.reference),
        "extracted": _clean_optional(result.extracted if result else None),
        "extracted_strict": _clean_optional(result.extracted_strict if result else None),
        "extracted_flexible": _clean_optional(result.extracted_flexible if result else None),
        "request": _clean_text(request.as_json()),
        "completion": _clean_text(completion.text),
        "reasoning": _clean_optional(completion.reasoning_text or None),
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "reasoning_tokens": completion.reasoning_tokens,
        "finish_reason": completion.finish_reason,
        "truncated": completion.truncated,
        "latency_s": completion.latency_s,
        "attempts": completion.attempts,
        "error": _clean_optional(completion.error),
        "response_issue": _clean_optional(completion.issue),
        "detail": result.detail if result else {},
        "created_at": utcnow(),
    }


_UNKNOWN_WHEN_UNSTORED = ("correct", "extracted", "extracted_strict", "extracted_flexible", "reasoning",
                          "prompt_tokens", "completion_tokens", "reasoning_tokens", "finish_reason", "response_issue")


def error_values(row: dict[str, Any], reason: str) -> dict[str, Any]:
    """An error row in place of `row` (from `item_values`) that could not be built or stored.

    Keeps the item's identity, reference, request and timing, drops every value read from the response, and
    says why in `error`: the item is redone on resume, and the rest of the run is unaffected.
    """
    return {**row, **dict.fromkeys(_UNKNOWN_WHEN_UNSTORED), "status": "error", "completion": "", "truncated": False,
            "detail": {}, "error": _clean_text(reason[:1000]), "created_at": utcnow()}


def _clean_optional(text: str | None) -> str | None:
    return None if text is None else _clean_text(text)


def _clean_text(text: str) -> str:
    """Text every backend can store: lone surrogates and NUL become U+FFFD.

    Lone surrogates (from a broken server's JSON escapes) cannot be encoded as
    UTF-8 by any driver, and PostgreSQL rejects NUL in text columns; marking
    both with the replacement character keeps the row and shows where.
    """
    if text.isascii() and "\x00" not in text:
        return text
    # UTF-16 with surrogatepass joins split pairs into their character; what is left unpaired becomes U+FFFD.
    repaired = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return repaired.replace("\x00", "\ufffd")


# -- reading ----------------------------------------------------------------------


def resolve_run(session: Session, ref: str, task: str | None = None) -> Run:
    """A run by id, or the latest complete run of the endpoint called `ref` on `task`."""
    if ref.isdigit():
        run = session.get(Run, int(ref))
        if run is None:
            raise NotFound(f"no run with id {ref}; `evalsvc runs` lists them")
        return run
    endpoint = get_endpoint(session, ref)
    query = select(Run).where(Run.endpoint_id == endpoint.id, Run.status == "complete")
    if task:
        query = query.where(Run.task == task)
    run = session.scalars(query.order_by(Run.finished_at.desc(), Run.id.desc())).first()
    if run is None:
        raise NotFound(f"endpoint {ref!r} has no complete {task or ''} run yet; run `evalsvc run` first")
    return run


def common_error(session: Session, run_id: int) -> tuple[str, int] | None:
    """The run's most frequent item error (its first line, cut to 200 characters) and how many items had it."""
    errors = session.scalars(select(Item.error).where(Item.run_id == run_id, Item.status == "error")).all()
    counts: dict[str, int] = {}
    for error in errors:
        line = (error or "unknown error").strip().splitlines()[0][:200] if (error or "").strip() else "unknown error"
        counts[line] = counts.get(line, 0) + 1
    return max(counts.items(), key=lambda kv: kv[1]) if counts else None


def summarize_runs(session: Session, run_ids: list[int] | None = None) -> list[RunSummary]:
    """Counts per run, computed in SQL so a store of many runs stays fast."""
    stats = (
        select(
            Item.run_id,
            func.count(Item.id).label("n"),
            func.sum(func.coalesce(Item.correct, False).cast(Integer)).label("correct"),
            func.sum((Item.status == "error").cast(Integer)).label("errors"),
            func.sum(Item.truncated.cast(Integer)).label("truncated"),
            func.avg(Item.completion_tokens).filter(Item.status == "ok").label("mean_tokens"),
            func.sum(((Item.status == "ok") & Item.completion_tokens.is_(None)).cast(Integer)).label("unknown_tokens"),
        )
        .group_by(Item.run_id)
        .subquery()
    )
    query = (
        select(Run, Endpoint.name, stats)
        .join(Endpoint, Run.endpoint_id == Endpoint.id)
        .outerjoin(stats, stats.c.run_id == Run.id)
        .order_by(Run.id)
    )
    if run_ids is not None:
        query = query.where(Run.id.in_(run_ids))
    return [_summary(row) for row in session.execute(query)]


def _summary(row: Any) -> RunSummary:
    run: Run = row[0]
    n, correct, errors = int(row.n or 0), int(row.correct or 0), int(row.errors or 0)
    scored = n - errors
    return RunSummary(
        run_id=run.id,
        endpoint=row.name,
        task=run.task,
        template=run.template,
        status=shown_status(run.status, run.heartbeat_at),
        n_items=run.n_items,
        n=n,
        correct=correct,
        errors=errors,
        truncated=int(row.truncated or 0),
        accuracy=(correct / scored) if scored else None,
        mean_completion_tokens=float(row.mean_tokens) if row.mean_tokens is not None else None,
        repeat=run.repeat,
        started_at=run.started_at,
        finished_at=run.finished_at,
        unknown_tokens=int(row.unknown_tokens or 0),
        isolation=run.isolation,
    )


def unknown_token_reasons(session: Session, run_id: int) -> dict[str, int]:
    """Why answered items of the run have no completion token count: reason -> items, most frequent first."""
    query = (
        select(func.coalesce(Item.response_issue, "no reason stored"), func.count(Item.id))
        .where(Item.run_id == run_id, Item.status == "ok", Item.completion_tokens.is_(None))
        .group_by(Item.response_issue)
        .order_by(func.count(Item.id).desc(), Item.response_issue)
    )
    return {reason: int(count) for reason, count in session.execute(query)}


def get_runs(session: Session, run_ids: list[int]) -> dict[int, Run]:
    """The runs with these ids, by id, in one query; ids not in the store are left out."""
    if not run_ids:
        return {}
    return {run.id: run for run in session.scalars(select(Run).where(Run.id.in_(run_ids)))}


def items_frame(session: Session, run_id: int) -> "pd.DataFrame":
    """One row per item of the run, in the columns the statistics expect."""
    frames = items_frames(session, [run_id])
    if run_id in frames:
        return frames[run_id]
    import pandas as pd

    return _typed_items(pd.DataFrame(columns=list(ITEM_COLUMNS)))


def items_frames(
    session: Session, run_ids: list[int], columns: Sequence[str] = ITEM_COLUMNS
) -> "dict[int, pd.DataFrame]":
    """`items_frame` of several runs, read in one query: run id -> frame; runs without items are left out.

    `columns` (a subset of `ITEM_COLUMNS`, `run_id` always included) narrows what is read.
    """
    import numpy as np
    import pandas as pd  # only readers need it; keeps `evalsvc run` start-up light

    unknown = sorted(set(columns) - set(ITEM_COLUMNS))
    if unknown:
        raise ValueError(f"not item columns: {', '.join(unknown)}")
    if not run_ids:
        return {}
    wanted = ["run_id", *(c for c in ITEM_COLUMNS if c in columns and c != "run_id")]
    sources = {"endpoint": Endpoint.name.label("endpoint"), "task": Run.task}
    query = (
        select(*(sources[column] if column in sources else getattr(Item, column) for column in wanted))
        .join(Run, Item.run_id == Run.id)
        .join(Endpoint, Run.endpoint_id == Endpoint.id)
        .where(Item.run_id.in_(run_ids))
        .order_by(Item.run_id, Item.item_id)
    )
    # A Core result of plain tuples: ORM row handling and pandas probing Row objects both cost several times more.
    rows = [tuple(row) for row in session.connection().execute(query)]
    frame = _typed_items(pd.DataFrame.from_records(rows, columns=wanted))
    run_of_row = frame["run_id"].to_numpy()
    starts = np.r_[0, np.flatnonzero(np.diff(run_of_row)) + 1]
    ends = np.r_[starts[1:], len(frame)]
    return {int(run_of_row[a]): frame.iloc[a:b].reset_index(drop=True) for a, b in zip(starts, ends) if b > a}


def _typed_items(frame: "pd.DataFrame") -> "pd.DataFrame":
    if "correct" in frame.columns:
        frame["correct"] = frame["correct"].fillna(False).astype(bool)
    return frame


def get_items(session: Session, run_id: int, item_ids: list[str] | None = None) -> list[Item]:
    query = select(Item).where(Item.run_id == run_id).order_by(Item.item_id)
    if item_ids is not None:
        query = query.where(Item.item_id.in_(item_ids))
    return list(session.scalars(query))


def find_complete_run(
    session: Session, endpoint: str, task: str, config_hash: str, dataset_hash: str, isolation: str | None = None
) -> int | None:
    """The latest complete run with this identity and sandbox isolation, or None (a ladder step then needs evaluating)."""
    same_isolation = Run.isolation.is_(None) if isolation is None else Run.isolation == isolation
    query = (
        select(Run.id)
        .join(Endpoint, Run.endpoint_id == Endpoint.id)
        .where(Endpoint.name == endpoint, Run.task == task, Run.config_hash == config_hash,
               Run.dataset_hash == dataset_hash, Run.status == "complete", same_isolation)
        .order_by(Run.id.desc())
    )
    return session.scalars(query).first()


def items_in_latest_run(session: Session, endpoint: str, task: str) -> int:
    """How many items the newest run of `task` on `endpoint` has stored (0 when there is none): a run's progress."""
    run_id = session.scalars(
        select(Run.id).join(Endpoint, Run.endpoint_id == Endpoint.id)
        .where(Endpoint.name == endpoint, Run.task == task).order_by(Run.id.desc())
    ).first()
    if run_id is None:
        return 0
    return session.scalar(select(func.count()).select_from(Item).where(Item.run_id == run_id)) or 0


# -- speed ------------------------------------------------------------------------


def add_speed_run(
    session: Session, endpoint: Endpoint, workload: str, samples: list[tuple[str, SpeedSample]],
    source: str, max_tokens: int, spec_stats: dict[str, Any] | None,
) -> SpeedRun:
    """Store a measured speed run and every sample (failed ones too)."""
    run = SpeedRun(endpoint_id=endpoint.id, workload=workload, measured=True, source=source,
                   max_tokens=max_tokens, spec_stats=spec_stats)
    session.add(run)
    session.flush()
    session.add_all(
        SpeedSampleRow(
            speed_run_id=run.id, prompt_id=prompt_id, ttft_s=s.ttft_s, decode_tps=s.decode_tps,
            output_tokens=s.output_tokens, token_source=s.token_source, total_s=s.total_s,
            finish_reason=s.finish_reason, accept_length=s.accept_length, reasoning_tokens=s.reasoning_tokens,
            error=s.error,
        )
        for prompt_id, s in samples
    )
    session.commit()
    return run


def add_speed_by_hand(
    session: Session, endpoint: Endpoint, workload: str, decode_tps: float, ttft_s: float, source: str
) -> SpeedRun:
    run = SpeedRun(endpoint_id=endpoint.id, workload=workload, measured=False, source=source,
                   decode_tps_by_hand=decode_tps, ttft_s_by_hand=ttft_s)
    session.add(run)
    session.commit()
    return run


def latest_speed_run(session: Session, endpoint_id: int, workload: str) -> SpeedRun | None:
    query = (select(SpeedRun).where(SpeedRun.endpoint_id == endpoint_id, SpeedRun.workload == workload)
             .order_by(SpeedRun.id.desc()))
    return session.scalars(query).first()


def speed_run_ids(session: Session, endpoints: Sequence[str]) -> tuple[int, ...]:
    """Ids of every speed run of the named endpoints, ascending: what a cache of decisions keys on."""
    query = (select(SpeedRun.id).join(Endpoint, Endpoint.id == SpeedRun.endpoint_id)
             .where(Endpoint.name.in_(list(endpoints))).order_by(SpeedRun.id))
    return tuple(session.scalars(query))


def speed_samples(session: Session, speed_run_id: int) -> list[tuple[str, SpeedSample]]:
    """(prompt id, sample) pairs of a stored speed run, in measurement order."""
    rows = session.scalars(select(SpeedSampleRow).where(SpeedSampleRow.speed_run_id == speed_run_id)
                           .order_by(SpeedSampleRow.id))
    return [
        (r.prompt_id, SpeedSample(index=i, ttft_s=r.ttft_s, decode_tps=r.decode_tps, output_tokens=r.output_tokens,
                                  token_source=r.token_source, total_s=r.total_s,  # type: ignore[arg-type]
                                  finish_reason=r.finish_reason, accept_length=r.accept_length,
                                  reasoning_tokens=r.reasoning_tokens, error=r.error))
        for i, r in enumerate(rows)
    ]
