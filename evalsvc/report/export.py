"""Results that leave the store: one run's items as JSONL or CSV rows, and its summary as JSON.

The summary carries the evalsvc version that exports it and the endpoint's
fingerprint (what the server said it was), so a file read months later
still says what was measured. Nothing secret: stored URLs and fingerprints
are already stripped of credentials, and are scrubbed again here for stores
written by an older evalsvc.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from sqlalchemy.orm import Session

from db import queries
from db.models import Run
from evalsvc import tool_version
from harness.redact import mask_text, scrub, strip_credentials

ITEM_FIELDS = (
    "run_id", "endpoint", "task", "item_id", "item_hash", "status", "correct", "extracted", "extracted_strict",
    "extracted_flexible", "reference", "completion", "reasoning", "prompt_tokens", "completion_tokens",
    "reasoning_tokens", "finish_reason", "truncated", "latency_s", "attempts", "error", "request", "detail",
)


def item_records(session: Session, run: Run) -> Iterator[dict[str, Any]]:
    """One plain record per stored item of the run, in item order (the request as parsed JSON)."""
    for item in queries.get_items(session, run.id):
        record = {name: getattr(item, name, None) for name in ITEM_FIELDS}
        record.update(run_id=run.id, endpoint=run.endpoint.name, task=run.task, request=_json(item.request),
                      error=mask_text(item.error) if item.error else None)
        yield record


def items_jsonl(session: Session, run: Run) -> Iterator[str]:
    for record in item_records(session, run):
        yield json.dumps(record, ensure_ascii=False, default=str) + "\n"


def items_csv(session: Session, run: Run, header: bool = True) -> Iterator[str]:
    """CSV rows (the header first, unless `header` is False); the request and detail columns hold JSON text."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=ITEM_FIELDS)
    if header:
        writer.writeheader()
    for record in item_records(session, run):
        writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v
                         for k, v in record.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def run_summary(session: Session, run: Run) -> dict[str, Any]:
    """The run's counts, settings, endpoint and fingerprint, with the exporting evalsvc's version."""
    summary = queries.summarize_runs(session, [run.id])[0]
    endpoint = run.endpoint
    return {
        **summary.as_dict(),
        "evalsvc_version": tool_version(),  # the version exporting; run_evalsvc_version started the run
        "run_evalsvc_version": run.evalsvc_version,
        "exported_at": datetime.now(timezone.utc).isoformat(),
        "mode": run.mode,
        "decoding": run.decoding,
        "config_hash": run.config_hash,
        "dataset_hash": run.dataset_hash,
        "error": mask_text(run.error) if run.error else None,
        "endpoint_detail": {"name": endpoint.name, "base_url": strip_credentials(endpoint.base_url), "model": endpoint.model,
                     "fingerprint": scrub(endpoint.fingerprint or {}), "metadata": scrub(endpoint.metadata_ or {})},
    }


def _json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text
