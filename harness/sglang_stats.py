"""What an SGLang server says about itself, read before and after a speed probe.

Facts from SGLang 0.5.23's source (sglang/srt/...):

- Server info: `GET /server_info` (entrypoints/http_server.py); `/get_server_info`
  is its deprecated alias and the only route on older builds, so both are
  tried, the current one first. The payload holds the resolved server
  arguments (`speculative_algorithm`, `speculative_num_draft_tokens`, ...),
  `version`, and `internal_states`: one dict per data-parallel rank.
- `internal_states[i].avg_spec_accept_length` is that rank's
  `spec_total_num_accept_tokens / spec_total_num_forward_ct`
  (managers/scheduler_components/internal_state.py): an average over every
  request since the server started (warm-up, accuracy runs, other clients),
  and the per-request counts are folded into those totals only every
  `--decode-log-interval` decode batches (default 40), so it also lags.
  SGLang does not serve the two totals. From an average A0/F0 before the probe
  and (A0+a)/(F0+f) after it, the probe's own a/f cannot be recovered: the
  after-average is a mean of the two weighted by F0 and f, both unknown. The
  two reads say which way the probe pulled the lifetime average, not by how
  much, and are reported as lifetime figures only.
- The probe's own mean comes from counters: a server started with
  `--enable-metrics` serves Prometheus counters at `/metrics`, to which every
  finished request adds its completion tokens (`sglang:generation_tokens_total`)
  and its verify steps (`sglang:spec_verify_calls_total`)
  (observability/metrics_collector.py, observe_one_finished_request). Their
  differences around the probe give tokens per verify step over the probe's
  requests: SGLang's own per-request definition of acceptance length
  (`completion_tokens / spec_verify_ct`, managers/tokenizer_manager.py),
  weighted by tokens. Requests of other clients finishing meanwhile would
  count too; the probe sends one request at a time and expects the server to
  itself.
"""

from __future__ import annotations

import logging
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from harness.urls import server_root

logger = logging.getLogger(__name__)

# Current route first, then the deprecated alias that older builds serve alone.
SERVER_INFO_ROUTES = ("server_info", "get_server_info")
MODEL_INFO_ROUTES = ("model_info", "get_model_info")
TOKENS_COUNTER = "sglang:generation_tokens_total"
VERIFY_COUNTER = "sglang:spec_verify_calls_total"
# One sample line of the Prometheus text format: name, optional {labels}, value.
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+(\S+)")
_TYPE = re.compile(r"^#\s*TYPE\s+([A-Za-z_:][A-Za-z0-9_:]*)\s+counter\b")


@dataclass(frozen=True)
class SpecSnapshot:
    """One read of an SGLang server's speculative-decoding state."""

    route: str
    version: str | None = None
    algorithm: str | None = None
    num_draft_tokens: int | None = None
    lifetime_accept_length: float | None = None
    generation_tokens: float | None = None
    verify_calls: float | None = None


@dataclass(frozen=True)
class SpecStats:
    """Speculative decoding around one probe; `probe_accept_length` is the probe's own, or None.

    `lifetime_before`/`lifetime_after` are SGLang's averages since the server
    started (mean over data-parallel ranks); never the probe's figure.
    """

    algorithm: str | None
    num_draft_tokens: int | None
    probe_accept_length: float | None
    probe_generation_tokens: int | None
    probe_verify_calls: int | None
    lifetime_before: float | None
    lifetime_after: float | None
    server_info_route: str
    sglang_version: str | None = None

    def as_record(self) -> dict[str, Any]:
        """A JSON-ready dict, as stored with a speed run."""
        return asdict(self)


# ---------------------------------------------------------------- parsing (pure)


def snapshot_from(route: str, info: Mapping[str, Any], metrics_text: str | None) -> SpecSnapshot:
    """A snapshot from a server-info payload and, when served, the `/metrics` text."""
    counters = counter_totals(metrics_text, (TOKENS_COUNTER, VERIFY_COUNTER)) if metrics_text else {}
    draft = info.get("speculative_num_draft_tokens")
    version = info.get("version")
    algorithm = info.get("speculative_algorithm")
    return SpecSnapshot(
        route=route,
        version=version if isinstance(version, str) else None,
        algorithm=algorithm if isinstance(algorithm, str) else None,
        num_draft_tokens=int(draft) if _is_number(draft) else None,
        lifetime_accept_length=lifetime_accept_length(info),
        generation_tokens=counters.get(TOKENS_COUNTER),
        verify_calls=counters.get(VERIFY_COUNTER),
    )


def lifetime_accept_length(info: Mapping[str, Any]) -> float | None:
    """Mean over data-parallel ranks of `internal_states[i].avg_spec_accept_length`; None when absent.

    Older builds put the figure at the top level instead.
    """
    states = info.get("internal_states")
    values = [
        s["avg_spec_accept_length"]
        for s in (states if isinstance(states, list) else [])
        if isinstance(s, Mapping) and _is_number(s.get("avg_spec_accept_length"))
    ]
    if not values and _is_number(info.get("avg_spec_accept_length")):
        values = [info["avg_spec_accept_length"]]
    return float(statistics.fmean(values)) if values else None


def counter_totals(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum over all label sets of each named counter in Prometheus text.

    A counter that is declared (`# TYPE`) but has no sample yet counts as 0:
    a labelled counter shows no sample until it is first incremented.
    """
    totals: dict[str, float] = {}
    for line in text.splitlines():
        declared = _TYPE.match(line)
        if declared:
            for name in names:
                if declared.group(1) in (name, name.removesuffix("_total")):
                    totals.setdefault(name, 0.0)
            continue
        sample = _SAMPLE.match(line)
        if sample and sample.group(1) in names:
            try:
                value = float(sample.group(2))
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or value < 0:  # a counter is a finite count; anything else is unusable
                logger.warning("unusable sample in SGLang /metrics: %r", line[:200])
                return {}
            totals[sample.group(1)] = totals.get(sample.group(1), 0.0) + value
    return totals


def spec_stats_between(before: SpecSnapshot, after: SpecSnapshot) -> SpecStats | None:
    """The probe's speculative figures from reads before and after it; None without speculative decoding."""
    if after.algorithm is None and after.lifetime_accept_length is None:
        return None
    tokens = _difference(before.generation_tokens, after.generation_tokens)
    verify = _difference(before.verify_calls, after.verify_calls)
    probe = tokens / verify if tokens is not None and verify else None
    return SpecStats(
        algorithm=after.algorithm,
        num_draft_tokens=after.num_draft_tokens,
        probe_accept_length=probe,
        probe_generation_tokens=int(tokens) if tokens is not None else None,
        probe_verify_calls=int(verify) if verify is not None else None,
        lifetime_before=before.lifetime_accept_length,
        lifetime_after=after.lifetime_accept_length,
        server_info_route=after.route,
        sglang_version=after.version,
    )


def _difference(before: float | None, after: float | None) -> float | None:
    """after - before of a counter; None when either read lacks it or it went down (server restarted)."""
    if before is None or after is None or after < before:
        return None
    return after - before


def _is_number(value: Any) -> bool:
    """A finite int or float (JSON from a server may carry NaN, Infinity or booleans)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---------------------------------------------------------------- reading (HTTP)


async def read_spec_snapshot(
    http: httpx.AsyncClient, base_url: str, headers: Mapping[str, str] | None = None
) -> SpecSnapshot | None:
    """Read server info (current route, then the deprecated one) and `/metrics`; None if not SGLang.

    None covers: neither route answers 200 with a JSON object (another server),
    or the server is unreachable (logged at warning).
    """
    found = await fetch_native(http, base_url, SERVER_INFO_ROUTES, headers)
    if found is None:
        return None
    route, info = found
    return snapshot_from(route, info, await _metrics_text(http, server_root(base_url), headers or {}))


async def fetch_native(
    http: httpx.AsyncClient,
    base_url: str,
    routes: tuple[str, ...],
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[str, dict[str, Any]] | None:
    """(route, JSON object) from the first of SGLang's native `routes` that answers one; None if none does."""
    root = server_root(base_url)
    for path in routes:
        url = f"{root}/{path}"
        try:
            response = await http.get(url, headers=dict(headers or {}), timeout=timeout_s)
            payload = response.json() if response.status_code == 200 else None
        except httpx.HTTPError as exc:
            logger.warning("could not read SGLang's %s: %s", url, exc)
            return None
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            return f"/{path}", payload
        logger.info("no SGLang %s at %s (HTTP %d)", path, url, response.status_code)
    return None


async def _metrics_text(http: httpx.AsyncClient, root: str, headers: Mapping[str, str]) -> str | None:
    """`/metrics` as text, or None when the server does not serve it (started without --enable-metrics)."""
    try:
        response = await http.get(f"{root}/metrics", headers=dict(headers), timeout=10.0)
    except httpx.HTTPError as exc:
        logger.info("no SGLang /metrics at %s: %s", root, exc)
        return None
    return response.text if response.status_code == 200 else None
