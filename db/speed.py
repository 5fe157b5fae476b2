"""Speed measurements: the queries that store and read them (the tables are in `db.models`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import Endpoint, SpeedRun, SpeedSampleRow
from harness.types import SpeedSample


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
