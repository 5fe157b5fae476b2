"""The store's tables. The schema is the contract between runner and dashboard;
it changes only through an Alembic migration in db/migrations/versions."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON}


class Endpoint(Base):
    """A served model at a URL: one ladder step."""

    __tablename__ = "endpoints"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    base_url: Mapped[str] = mapped_column(String(500))
    model: Mapped[str] = mapped_column(String(500))
    fingerprint: Mapped[dict[str, Any]] = mapped_column(default=dict)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    runs: Mapped[list["Run"]] = relationship(back_populates="endpoint")


class Run(Base):
    """One evaluation of one endpoint on one task with one configuration."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id"), index=True)
    task: Mapped[str] = mapped_column(String(50))
    template: Mapped[str] = mapped_column(String(100))
    mode: Mapped[str] = mapped_column(String(20))
    decoding: Mapped[dict[str, Any]] = mapped_column(default=dict)
    config_hash: Mapped[str] = mapped_column(String(32))
    dataset_hash: Mapped[str] = mapped_column(String(32))
    n_items: Mapped[int] = mapped_column(Integer)
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(20), default="running")
    error: Mapped[Optional[str]] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    # Written every few seconds while a runner works on the run; a "running" run whose beat stops has died.
    heartbeat_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    # How the run's code was executed: "bwrap", "process" (asked for by name), None when scoring runs no code.
    isolation: Mapped[Optional[str]] = mapped_column(String(20))
    # The evalsvc version that started the run (provenance; NULL for runs stored before it was recorded).
    evalsvc_version: Mapped[Optional[str]] = mapped_column(String(40))

    endpoint: Mapped[Endpoint] = relationship(back_populates="runs")

    __table_args__ = (
        UniqueConstraint("endpoint_id", "task", "config_hash", "dataset_hash", "repeat", name="uq_run_identity"),
    )


class Item(Base):
    """One scored (or failed) item of a run; written as soon as it finishes."""

    __tablename__ = "items"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    item_id: Mapped[str] = mapped_column(String(100))
    item_hash: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(10))  # ok | error
    correct: Mapped[Optional[bool]] = mapped_column(Boolean)
    reference: Mapped[str] = mapped_column(Text, default="")
    extracted: Mapped[Optional[str]] = mapped_column(Text)
    extracted_strict: Mapped[Optional[str]] = mapped_column(Text)
    extracted_flexible: Mapped[Optional[str]] = mapped_column(Text)
    request: Mapped[str] = mapped_column(Text, default="")
    completion: Mapped[str] = mapped_column(Text, default="")
    reasoning: Mapped[Optional[str]] = mapped_column(Text)
    prompt_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    completion_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    reasoning_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    finish_reason: Mapped[Optional[str]] = mapped_column(String(50))
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    error: Mapped[Optional[str]] = mapped_column(Text)
    # Why a token count or the finish reason is unknown (NULL), as read by harness.response; NULL when all were valid.
    response_issue: Mapped[Optional[str]] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (
        UniqueConstraint("run_id", "item_id", name="uq_item_per_run"),
        Index("ix_items_run_status", "run_id", "status"),
    )


class SpeedRun(Base):
    """One speed measurement of an endpoint on a workload, or a hand-entered figure with its provenance."""

    __tablename__ = "speed_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    endpoint_id: Mapped[int] = mapped_column(ForeignKey("endpoints.id"), index=True)
    workload: Mapped[str] = mapped_column(String(20))
    measured: Mapped[bool] = mapped_column()
    source: Mapped[str] = mapped_column(Text)
    max_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    decode_tps_by_hand: Mapped[Optional[float]] = mapped_column(Float)
    ttft_s_by_hand: Mapped[Optional[float]] = mapped_column(Float)
    spec_stats: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class SpeedSampleRow(Base):
    """One streamed request of a measured speed run (failed ones too)."""

    __tablename__ = "speed_samples"

    id: Mapped[int] = mapped_column(primary_key=True)
    speed_run_id: Mapped[int] = mapped_column(ForeignKey("speed_runs.id", ondelete="CASCADE"), index=True)
    prompt_id: Mapped[str] = mapped_column(String(100))
    ttft_s: Mapped[Optional[float]] = mapped_column(Float)
    decode_tps: Mapped[Optional[float]] = mapped_column(Float)
    output_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    token_source: Mapped[Optional[str]] = mapped_column(String(10))
    total_s: Mapped[float] = mapped_column(Float, default=0.0)
    finish_reason: Mapped[Optional[str]] = mapped_column(String(50))
    accept_length: Mapped[Optional[float]] = mapped_column(Float)
    reasoning_tokens: Mapped[Optional[int]] = mapped_column(Integer)
    error: Mapped[Optional[str]] = mapped_column(Text)
