"""Batch-1 streaming speed probe: time to first token, decode speed, tokens.

One request at a time (the coding-agent and chat-window case), streamed,
greedy. Per request the probe records:

- ``ttft_s``: seconds from sending the request to the first chunk that
  carries content or reasoning text (a role-only first chunk does not count).
- ``decode_tps``: ``(output_tokens - 1) / (t_last - t_first)``, where
  ``t_first`` and ``t_last`` are the arrival times of the first and last
  chunks carrying text. The first token is paid for by the TTFT, so the
  remaining ``output_tokens - 1`` tokens are the ones produced during the
  decode window. When a server packs several tokens into the first chunk
  (speculative decoding does) the rate is slightly overstated; with hundreds
  of tokens the bias is a fraction of a percent.
- ``output_tokens``: ``usage.completion_tokens`` when the server reports
  usage (``stream_options.include_usage``), else the number of text-bearing
  chunks; ``token_source`` says which. Reasoning tokens are included.
- ``reasoning_tokens``: from the usage chunk, OpenAI's nested
  ``completion_tokens_details.reasoning_tokens`` or SGLang's top-level
  ``reasoning_tokens`` (``harness.client.usage_reasoning_field``); an
  implausible count is left unknown.

A request that fails (HTTP error, an error event or a dropped connection
mid-stream, a stream that ends without ``[DONE]``) yields a sample with
``error`` set and no speed: a broken stream must never look fast. So does a
stream that cannot be trusted: a usage count that is not a plausible integer
(``harness.response``), usage chunks whose counts go down (several cumulative
ones are fine: the last counts), text after the finish_reason chunk, a chunk
that is not an object, or SGLang's ``abort``. An unknown finish_reason is
stored as None. Requests
are not retried, because a retry would hide the failure in the timing.

SGLang extras (``probe_speed(read_server_stats=True)``): on an SGLang server the measured
requests ask for ``return_spec_tokens_details``, and SGLang (0.5.23) answers
with a last ``sglext.spec_tokens_details`` chunk holding the request's own
``spec_accept_length`` (completion tokens / verify steps); that becomes
``SpeedSample.accept_length``. Around the measured requests the server's state
is read twice (``harness.sglang_stats``) for the probe's own token-weighted
acceptance length and, labelled as such, SGLang's lifetime average.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import httpx

from harness.chat_prompts import ChatPrompt
from harness.client import endpoint_http, request_body, usage_reasoning_field
from harness.redact import mask_text
from harness.response import STORABLE_MAX, ResponseBroken, check_count, check_finish_reason, shown, token_bound
from harness.sglang_stats import SpecStats, read_spec_snapshot, spec_stats_between
from harness.types import DecodingSettings, Mode, Request, SpeedSample, TokenSource
from harness.urls import api_url

logger = logging.getLogger(__name__)

PromptLike = Request | ChatPrompt | Sequence[Mapping[str, str]] | str

# SGLang's request field for per-request speculative statistics (a last `sglext` chunk in a stream).
SGLANG_SPEC_DETAILS = {"return_spec_tokens_details": True}

# Deliberately unlike any benchmark prompt, so warming up does not fill the
# prefix cache with the first measured prompt and flatter its TTFT.
WARMUP_PROMPT = "Reply with the single word: ready."
WARMUP_MAX_TOKENS = 16

class SpeedProbeError(Exception):
    """The probe cannot be set up (bad prompt shape for the chosen mode)."""


@dataclass
class _StreamState:
    """Mutable accumulator while one stream is read; frozen into a SpeedSample."""

    t_first: float | None = None
    t_last: float | None = None
    text_chunks: int = 0
    usage_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    finished: bool = False  # a finish_reason chunk arrived (its value may be unknown, hence None)
    meta_info: dict[str, Any] | None = None
    spec_details: dict[str, Any] | None = None
    done: bool = False
    error: str | None = None
    bound: int = STORABLE_MAX  # the largest plausible token count for this request


# ---------------------------------------------------------------- requests


def build_stream_body(prompt: PromptLike, model: str, mode: Mode, decoding: DecodingSettings) -> dict[str, Any]:
    """The JSON body of one streaming request, asking for usage in the last chunk.

    Built by the accuracy runs' `request_body` from the same `DecodingSettings` and stop sequences, so
    the probe measures the requests that were scored and the lengths match.
    """
    body = request_body(as_request(prompt, mode), model, decoding)
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def as_request(prompt: PromptLike, mode: Mode) -> Request:
    """The `Request` a prompt stands for in `mode`; a `Request` keeps its stop sequences."""
    stop = prompt.stop if isinstance(prompt, Request) else ()
    if mode == "chat":
        return Request(mode, messages=_messages_of(prompt), stop=stop)
    return Request(mode, prompt=_prompt_text_of(prompt), stop=stop)


def _messages_of(prompt: PromptLike) -> tuple[dict[str, str], ...]:
    if isinstance(prompt, ChatPrompt):
        return tuple(dict(m) for m in prompt.messages)
    if isinstance(prompt, Request):
        if not prompt.messages:
            raise SpeedProbeError(f"chat mode needs messages; request has mode {prompt.mode!r} and none")
        return tuple(dict(m) for m in prompt.messages)
    if isinstance(prompt, str):
        return ({"role": "user", "content": prompt},)
    return tuple(dict(m) for m in prompt)


def _prompt_text_of(prompt: PromptLike) -> str:
    if isinstance(prompt, Request) and prompt.prompt:
        return prompt.prompt
    if isinstance(prompt, str):
        return prompt
    raise SpeedProbeError("completions mode needs a raw prompt string or a Request with `prompt` set")


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


# ---------------------------------------------------------------- stream parsing


def _chunk_text(choice: Mapping[str, Any]) -> str:
    """Content or reasoning text carried by one streamed choice (chat or completions)."""
    delta = choice.get("delta") or {}
    parts = (
        delta.get("content"),
        delta.get("reasoning_content"),
        delta.get("reasoning"),
        choice.get("text"),
    )
    return "".join(p for p in parts if isinstance(p, str))


def _absorb_chunk(state: _StreamState, chunk: Any, now: float) -> None:
    """Update the accumulator with one parsed SSE data payload; anything malformed sets `state.error`."""
    if not isinstance(chunk, Mapping):
        state.error = f"stream chunk {shown(chunk)} is not an object"
        return
    if "error" in chunk and not chunk.get("choices"):
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, Mapping) else error
        state.error = f"error event mid-stream after {state.text_chunks} text chunks: {message}"
        return
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(choice, Mapping) for choice in choices):
        state.error = f"stream chunk choices {shown(choices)} are not a list of objects"
        return
    for choice in choices:
        _absorb_choice(state, choice, now)
    _absorb_usage(state, chunk.get("usage"))
    if isinstance(chunk.get("meta_info"), Mapping):
        state.meta_info = dict(chunk["meta_info"])
    details = _spec_tokens_details(chunk)
    if details is not None:
        state.spec_details = details


def _spec_tokens_details(chunk: Mapping[str, Any]) -> dict[str, Any] | None:
    """SGLang's per-request `sglext.spec_tokens_details` (a list when n > 1: the first choice's)."""
    sglext = chunk.get("sglext")
    details = sglext.get("spec_tokens_details") if isinstance(sglext, Mapping) else None
    if isinstance(details, list):
        details = details[0] if details else None
    return dict(details) if isinstance(details, Mapping) else None


def _absorb_choice(state: _StreamState, choice: Mapping[str, Any], now: float) -> None:
    if _chunk_text(choice):
        if state.finished:  # text after the finish: chunks out of order, so no timing of it can be trusted
            state.error = f"text chunk after the finish_reason chunk (after {state.text_chunks} text chunks)"
            return
        state.t_first = now if state.t_first is None else state.t_first
        state.t_last = now
        state.text_chunks += 1
    if choice.get("finish_reason") is not None:
        try:
            state.finish_reason = check_finish_reason(choice["finish_reason"]).value
        except ResponseBroken as exc:
            state.error = str(exc)
        state.finished = True
    if isinstance(choice.get("meta_info"), Mapping):
        state.meta_info = dict(choice["meta_info"])


def _absorb_usage(state: _StreamState, usage: Any) -> None:
    """Usage may come in several chunks (cumulative, as with continuous usage stats): the last one counts,
    and a count that goes down or is not a plausible integer makes the sample an error, never a speed."""
    if usage is None or state.error:
        return
    if not isinstance(usage, Mapping):
        state.error = f"usage {shown(usage)} is not an object"
        return
    checked = check_count("usage.completion_tokens", usage.get("completion_tokens"), state.bound)
    if checked.issue is not None:
        state.error = f"{checked.issue}: the token count is unknown, so no speed is measured"
    elif checked.value is not None and state.usage_tokens is not None and checked.value < state.usage_tokens:
        state.error = f"usage chunks disagree: completion_tokens {state.usage_tokens}, then {checked.value}"
    elif checked.value is not None:
        state.usage_tokens = checked.value
        # A reasoning count SGLang or OpenAI gets wrong leaves it unknown; the speed does not depend on it.
        state.reasoning_tokens = check_count("usage.reasoning_tokens", usage_reasoning_field(usage), state.bound).value


def _absorb_line(state: _StreamState, line: str, now: float) -> None:
    """Handle one SSE line; ignores comments, event names and keep-alives."""
    if not line.startswith("data:"):
        return
    payload = line[len("data:") :].strip()
    if payload == "[DONE]":
        state.done = True
        return
    try:
        chunk = json.loads(payload)
    except json.JSONDecodeError:
        state.error = f"unparseable stream chunk after {state.text_chunks} text chunks: {payload[:200]!r}"
        return
    _absorb_chunk(state, chunk, now)


# ---------------------------------------------------------------- samples


def accept_length_from_meta(meta_info: Mapping[str, Any] | None) -> float | None:
    """Per-request speculative accept length from SGLang's `meta_info` or `sglext.spec_tokens_details`.

    Uses `spec_accept_length` when the server gives a positive one (SGLang
    sends 0.0 for a request that was never verified), else
    `completion_tokens / spec_verify_ct` (tokens emitted per verify step).
    """
    if not meta_info:
        return None
    direct = meta_info.get("spec_accept_length")
    if isinstance(direct, (int, float)) and not isinstance(direct, bool) and direct > 0:
        return float(direct)
    verify = meta_info.get("spec_verify_ct")
    tokens = meta_info.get("completion_tokens")
    if isinstance(verify, (int, float)) and isinstance(tokens, (int, float)) and verify > 0:
        return float(tokens) / float(verify)
    return None


def _sample_from_state(index: int, state: _StreamState, t_start: float, t_end: float) -> SpeedSample:
    """Freeze a finished stream into a sample; incomplete streams become errors."""
    total_s = t_end - t_start
    error = state.error
    if error is None and not state.done and not state.finished:
        error = f"stream ended without [DONE] or a finish_reason after {state.text_chunks} text chunks"
    if error is None and state.t_first is None:
        error = "stream finished without any content or reasoning text"
    if error is not None:
        return SpeedSample(index=index, text_chunks=state.text_chunks, total_s=total_s, error=error)
    source: TokenSource = "usage" if state.usage_tokens is not None else "chunks"
    tokens = state.usage_tokens if state.usage_tokens is not None else state.text_chunks
    t_first = state.t_first
    window = (state.t_last or t_first) - t_first
    tps = (tokens - 1) / window if tokens > 1 and window > 0 else None
    return SpeedSample(
        index=index,
        ttft_s=t_first - t_start,
        decode_tps=tps,
        output_tokens=tokens,
        token_source=source,
        text_chunks=state.text_chunks,
        total_s=total_s,
        finish_reason=state.finish_reason,
        accept_length=accept_length_from_meta(state.spec_details or state.meta_info),
        reasoning_tokens=state.reasoning_tokens,
    )


async def _stream_one(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], index: int
) -> SpeedSample:
    """Send one streaming request and time its chunks."""
    prompt_bytes = len(json.dumps(body.get("messages") or body.get("prompt")).encode())
    state = _StreamState(bound=token_bound(int(body.get("max_tokens") or 0), prompt_bytes))
    t_start = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")[:300]
                return SpeedSample(
                    index=index,
                    total_s=time.perf_counter() - t_start,
                    error=mask_text(f"HTTP {response.status_code} from {url}: {text}"),
                )
            async for line in response.aiter_lines():
                _absorb_line(state, line, time.perf_counter())
                if state.error or state.done:
                    break
    except httpx.HTTPError as exc:
        state.error = mask_text(f"{type(exc).__name__} from {url} after {state.text_chunks} text chunks: {exc}")
    return _sample_from_state(index, state, t_start, time.perf_counter())


class SpeedProbe(NamedTuple):
    """What one probe measured: a sample per prompt, and SGLang's speculative figures (None elsewhere)."""

    samples: list[SpeedSample]
    spec: SpecStats | None


async def probe_speed(
    base_url: str,
    model: str,
    prompts: Sequence[PromptLike],
    mode: Mode = "chat",
    decoding: DecodingSettings = DecodingSettings(),
    api_key: str | None = None,
    warmup: int = 1,
    timeout_s: float = 600.0,
    on_sample: Callable[[SpeedSample], None] | None = None,
    client: httpx.AsyncClient | None = None,
    read_server_stats: bool = True,
) -> SpeedProbe:
    """Stream each prompt one at a time and time it; one `SpeedSample` per prompt.

    `prompts` are `Request`s, `ChatPrompt`s, chat message lists, or plain strings (a single
    user turn in chat mode, the raw prompt in completions mode), sent with `decoding` (the
    accuracy runs' settings by default). First, `warmup` requests with `WARMUP_PROMPT` are sent
    and their timings discarded, so graph capture or allocator warm-up on a fresh server does
    not count. A server's prefix cache still shortens TTFT for prompts that share a prefix
    (few-shot templates); that is the repeated-use case. `on_sample` is called after each
    measured request (for progress output).

    With `read_server_stats`, the server's state is read after the warm-up and again after the
    last measured request (`harness.sglang_stats.read_spec_snapshot`); when the server is SGLang
    the measured requests also ask for their own statistics. `spec` is None for other servers
    and without speculative decoding.
    """
    url = api_url(base_url, "chat/completions" if mode == "chat" else "completions")
    bodies = [build_stream_body(p, model, mode, decoding) for p in prompts]
    warm_body = build_stream_body(WARMUP_PROMPT, model, mode, replace(decoding, max_tokens=WARMUP_MAX_TOKENS))
    headers = _headers(api_key)
    auth = {k: v for k, v in headers.items() if k == "Authorization"}
    owned = client is None
    http = client or endpoint_http(base_url, timeout_s)
    try:
        await _warm_up(http, url, warm_body, headers, warmup)
        before = await read_spec_snapshot(http, base_url, auth) if read_server_stats else None
        extra = SGLANG_SPEC_DETAILS if before is not None else {}
        samples = await _measure(http, url, [{**body, **extra} for body in bodies], headers, on_sample)
        after = await read_spec_snapshot(http, base_url, auth) if before is not None else None
    finally:
        if owned:
            await http.aclose()
    stats = spec_stats_between(before, after) if before is not None and after is not None else None
    return SpeedProbe(samples, stats)


async def _warm_up(http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], n: int) -> None:
    for _ in range(n):
        discarded = await _stream_one(http, url, body, headers, -1)
        logger.debug("warm-up request: %s", discarded.error or f"{discarded.output_tokens} tokens")


async def _measure(
    http: httpx.AsyncClient,
    url: str,
    bodies: list[dict[str, Any]],
    headers: dict[str, str],
    on_sample: Callable[[SpeedSample], None] | None,
) -> list[SpeedSample]:
    samples = []
    for index, body in enumerate(bodies):
        sample = await _stream_one(http, url, body, headers, index)
        if sample.error:
            logger.warning("speed probe request %d failed: %s", index, sample.error)
        if on_sample is not None:
            on_sample(sample)
        samples.append(sample)
    return samples
