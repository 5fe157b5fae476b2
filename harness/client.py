"""Async client for OpenAI-compatible endpoints (SGLang, vLLM, llama.cpp server).

Speaks `/v1/chat/completions` and `/v1/completions`, greedy by default, and
understands SGLang's extra fields (`reasoning_content`, `meta_info`,
`/model_info`, `/server_info`). Retries are classified: connection
errors, timeouts, 429 and 5xx are retried with capped exponential backoff
(honouring Retry-After); any other 4xx fails at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from harness.errors import UnreachableError, UserError
from harness.redact import MaskedError
from harness.response import (
    STORABLE_MAX, ResponseBroken, check_count, check_finish_reason, check_text, join_issues, shown, token_bound,
)
from harness.sglang_stats import MODEL_INFO_ROUTES, SERVER_INFO_ROUTES, fetch_native
from harness.types import Completion, DecodingSettings, Request
from harness.urls import normalize_base_url

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
API_KEY_ENV = "EVALSVC_API_KEY"  # where commands and their child processes find the endpoint's key
_JSON_HEADERS = {"Content-Type": "application/json"}


class EndpointError(UserError):
    """The endpoint cannot be used at all (unreachable, not OpenAI-compatible, unknown model)."""


class EndpointUnreachable(EndpointError, UnreachableError):
    """The endpoint does not answer at all (connection refused or timed out, unknown host)."""


class RequestFailed(MaskedError):
    """One request failed; `retryable` says whether trying again may help."""

    def __init__(self, message: str, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay_s)
        backoff = self.base_delay_s * (2 ** (attempt - 1))
        return min(backoff, self.max_delay_s) * (0.5 + random.random() / 2)


def request_body(request: Request, model: str, settings: DecodingSettings) -> dict[str, Any]:
    """The JSON body of one request: greedy, seeded, with a generous token cap (`DecodingSettings`).

    The one place a request's sampling settings are spelt; the speed probe streams the same body.
    """
    body: dict[str, Any] = {
        "model": model,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "seed": settings.seed,
        "max_tokens": settings.max_tokens,
    }
    if request.mode == "chat":
        body["messages"] = list(request.messages)
    else:
        body["prompt"] = request.prompt
    if request.stop:
        body["stop"] = list(request.stop)
    return body


def endpoint_http(
    base_url: str, timeout_s: float, headers: Mapping[str, str] | None = None, max_connections: int = 64
) -> httpx.AsyncClient:
    """The HTTP client requests to an endpoint go through, for accuracy runs and the speed probe alike.

    No proxy from the environment: a proxy in the path would be timed and retried as if it were the
    server. Loading the CA bundle costs ~50 ms per client; a plain-http endpoint never uses it.
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(
        headers=dict(headers or {}), timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits, trust_env=False,
        verify=base_url.startswith("https://"),
    )


class EndpointClient:
    """One OpenAI-compatible endpoint and model."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy = RetryPolicy(),
        max_connections: int = 64,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.retry = retry
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = endpoint_http(self.base_url, timeout_s, headers, max_connections)

    async def __aenter__(self) -> "EndpointClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- endpoint discovery -------------------------------------------------

    async def list_models(self) -> list[str]:
        """Model ids from `/v1/models`; raises EndpointError when that is not an OpenAI-style list."""
        url = f"{self.base_url}/models"
        try:
            resp = await self._http.get(url, timeout=15.0)
        except httpx.HTTPError as exc:
            raise EndpointUnreachable(f"endpoint {self.base_url} is unreachable: {_describe(exc)}") from exc
        if resp.status_code != 200:
            raise EndpointError(
                f"endpoint {self.base_url} is not OpenAI-compatible: GET {url} returned HTTP {resp.status_code}"
            )
        try:
            data = resp.json()["data"]
            return [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError):
            raise EndpointError(
                f"endpoint {self.base_url} is not OpenAI-compatible: GET {url} did not return a model list"
            ) from None

    async def check_model(self) -> list[str]:
        """Fail clearly when the model is not served; returns the served model ids."""
        models = await self.list_models()
        if self.model not in models:
            raise EndpointError(
                f"endpoint {self.base_url} does not serve model {self.model!r}; "
                f"/v1/models lists: {', '.join(models) or '(nothing)'}"
            )
        return models

    async def fingerprint(self) -> dict[str, Any]:
        """What identifies the server: its model list and, on SGLang, model and server info.

        SGLang's current routes (`/model_info`, `/server_info`) are read first and
        the deprecated `/get_...` ones only when those are missing (older builds);
        `routes` records which answered.
        """
        result: dict[str, Any] = {"models": await self.check_model()}
        routes = {"model_info": MODEL_INFO_ROUTES, "server_info": SERVER_INFO_ROUTES}
        for key, candidates in routes.items():
            found = await fetch_native(self._http, self.base_url, candidates)
            if found is not None:
                result.setdefault("routes", {})[key] = found[0]
                result[key] = found[1]
        result["engine"] = "sglang" if "server_info" in result else "openai-compatible"
        return result

    # -- generation ---------------------------------------------------------

    def build_body(self, request: Request, settings: DecodingSettings) -> dict[str, Any]:
        """The JSON body sent for `request` to this endpoint's model."""
        return request_body(request, self.model, settings)

    async def complete(self, request: Request, settings: DecodingSettings) -> Completion:
        """Send `request`, retrying what is retryable; never raises for a per-request failure."""
        body = self.build_body(request, settings)
        path = "chat/completions" if request.mode == "chat" else "completions"
        bound = token_bound(settings.max_tokens, len(request.as_json().encode("utf-8", "surrogatepass")))
        start = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                payload = await self._post(path, body)
                return parse_completion(payload, request.mode, time.perf_counter() - start, attempt, bound)
            except RequestFailed as exc:
                if not exc.retryable or attempt >= self.retry.max_attempts:
                    return Completion(latency_s=time.perf_counter() - start, attempts=attempt, error=str(exc))
                delay = self.retry.delay(attempt, exc.retry_after)
                log.debug("attempt %d failed (%s); retrying in %.2fs", attempt, exc, delay)
                await asyncio.sleep(delay)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{path}"
        # ASCII-escaped JSON: a lone surrogate in a prompt is sent as an escape instead of failing to encode.
        content = json.dumps(body).encode("ascii")
        try:
            # httpx's timeout bounds each read; this bounds the whole request, so a server trickling bytes cannot
            # hold an item past `timeout_s`.
            async with asyncio.timeout(self.timeout_s):
                async with self._http.stream("POST", url, content=content, headers=_JSON_HEADERS) as resp:
                    data = await _read_capped(resp, url)
        except TimeoutError:
            message = f"POST {url}: no complete response within {self.timeout_s:g} s"
            raise RequestFailed(message, retryable=True) from None
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            raise RequestFailed(f"POST {url}: {_describe(exc)}", retryable=True) from exc
        if resp.status_code == 429 or resp.status_code >= 500:
            raise RequestFailed(
                f"POST {url}: HTTP {resp.status_code} {_snippet(data)}",
                retryable=True,
                retry_after=_retry_after(resp),
            )
        if resp.status_code != 200:
            raise RequestFailed(f"POST {url}: HTTP {resp.status_code} {_snippet(data)}", retryable=False)
        return _decode_object(data, url)


async def _read_capped(resp: httpx.Response, url: str) -> bytes:
    """The body, read no further than MAX_BODY_BYTES so a runaway server cannot exhaust memory."""
    declared = resp.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise RequestFailed(f"POST {url}: response body of {declared} bytes is too large", retryable=False)
    chunks, size = [], 0
    async for chunk in resp.aiter_bytes():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestFailed(f"POST {url}: response body exceeds {MAX_BODY_BYTES} bytes", retryable=False)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode_object(data: bytes, url: str) -> dict[str, Any]:
    # Invalid UTF-8 becomes U+FFFD: the item keeps its (marked) text instead of failing.
    try:
        payload = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        raise RequestFailed(f"POST {url}: response is not JSON: {_snippet(data)}", retryable=True) from None
    if not isinstance(payload, dict):
        raise RequestFailed(f"POST {url}: response JSON is not an object", retryable=True)
    return payload


def parse_completion(
    payload: dict[str, Any], mode: str, latency_s: float, attempts: int, bound: int = STORABLE_MAX
) -> Completion:
    """Turn a chat or completions response into a Completion; a broken structure raises RequestFailed.

    Every field read is checked (`harness.response`): implausible token counts and unknown finish reasons
    become None with the reason in `Completion.issue`. A null content next to reasoning text is an empty
    answer (the model never left its reasoning; with finish_reason "length" it was cut off there).
    """
    try:
        choice = _only_choice(payload)
        text, reasoning, empty_issue = _choice_texts(choice, mode)
        finish = check_finish_reason(choice.get("finish_reason"))
    except ResponseBroken as exc:
        raise RequestFailed(str(exc), retryable=exc.retryable) from None
    counts, count_issues = _usage_counts(payload.get("usage"), bound)
    extra = {k: payload[k] for k in ("meta_info", "system_fingerprint") if k in payload}
    return Completion(
        text=text,
        reasoning_text=reasoning,
        **counts,
        finish_reason=finish.value,
        latency_s=latency_s,
        attempts=attempts,
        extra=extra,
        issue=join_issues([empty_issue, *count_issues, finish.issue]),
    )


def _only_choice(payload: dict[str, Any]) -> dict[str, Any]:
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ResponseBroken("response has no choices")
    if len(choices) > 1:
        raise ResponseBroken(f"response has {len(choices)} choices; one was asked for")
    if not isinstance(choices[0], dict):
        raise ResponseBroken("response choice is not an object")
    return choices[0]


def _choice_texts(choice: dict[str, Any], mode: str) -> tuple[str, str | None, str | None]:
    """(answer text, reasoning text, issue) of one choice; raises ResponseBroken when there is no answer."""
    if mode != "chat":
        return check_text("choice text", choice.get("text"), nullable=False) or "", None, None
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ResponseBroken("response choice has no message object")
    text = check_text("message content", message.get("content"))
    reasoning = check_text("reasoning_content", message.get("reasoning_content")) or check_text(
        "reasoning", message.get("reasoning"))
    if text is not None:
        return text, reasoning or None, None
    if not reasoning:
        raise ResponseBroken("response message has neither content nor reasoning text")
    return "", reasoning, "content null after reasoning: answer taken as empty"


def _usage_counts(usage: Any, bound: int) -> tuple[dict[str, int | None], list[str | None]]:
    """The three token counts of `usage`, each checked; unknown ones are None with a reason.

    Reasoning tokens are read where the server puts them (`usage_reasoning_field`).
    """
    if not isinstance(usage, dict):
        issue = "usage missing" if usage is None else f"usage {shown(usage)} is not an object"
        return dict.fromkeys(("prompt_tokens", "completion_tokens", "reasoning_tokens")), [issue]
    checked = {
        "prompt_tokens": check_count("prompt_tokens", usage.get("prompt_tokens"), bound),
        "completion_tokens": check_count("completion_tokens", usage.get("completion_tokens"), bound, required=True),
        "reasoning_tokens": check_count("reasoning_tokens", usage_reasoning_field(usage), bound),
    }
    return {k: c.value for k, c in checked.items()}, [c.issue for c in checked.values()]


def usage_reasoning_field(usage: Mapping[str, Any]) -> Any:
    """The raw reasoning-token count of a usage object, wherever the server put it (check it before use).

    OpenAI nests it (`completion_tokens_details.reasoning_tokens`); SGLang 0.5.23 puts
    it at the top level (0 without reasoning) and nests it too when it is not 0
    (entrypoints/openai/usage_processor.py). A nested 0 is a count, not a gap.
    """
    details = usage.get("completion_tokens_details")
    nested = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return nested if nested is not None else usage.get("reasoning_tokens")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _snippet(data: bytes, limit: int = 200) -> str:
    return data[:limit].decode("utf-8", errors="replace").replace("\n", " ")


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
