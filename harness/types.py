"""Records shared by every layer: what flows through one evaluation item, and one speed sample.

`Sample` -> `Request` -> `Completion` -> `ItemResult`; `SpeedSample` is one
timed streaming request. All frozen: a record is built once and never edited,
so a stored row always matches what was scored or measured. This module
imports nothing heavier than the standard library, so the store and the
statistics can use the records without loading the HTTP client.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["chat", "completions"]
TokenSource = Literal["usage", "chunks"]  # where a speed sample's token count came from


def stable_hash(*parts: str) -> str:
    """Short content hash used for item identity and config identity."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:16]


@dataclass(frozen=True)
class Sample:
    """One benchmark item as loaded from its dataset.

    `item_id` is stable across loads (task, split and index); `item_hash` is a
    hash of the content, so two runs only pair items whose text is identical.
    """

    task: str
    item_id: str
    item_hash: str
    prompt: str
    reference: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DecodingSettings:
    """Greedy decoding by default. `max_tokens` is generous on purpose: a short
    cap silently turns a more verbose model into a less accurate one."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 1234
    max_tokens: int = 2048

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Request:
    """What is sent for one sample: chat messages or a raw prompt."""

    mode: Mode
    messages: tuple[dict[str, str], ...] = ()
    prompt: str = ""
    stop: tuple[str, ...] = ()

    def as_json(self) -> str:
        return json.dumps(
            {"mode": self.mode, "messages": list(self.messages), "prompt": self.prompt, "stop": list(self.stop)},
            ensure_ascii=False,
        )


@dataclass(frozen=True)
class Completion:
    """What the endpoint returned, or why it did not.

    `error` is set when the request failed after retries; the text fields are
    then empty and the item must be stored as an error, never scored. `issue`
    says why a token count or the finish reason is unknown (None), or that a
    null content was taken as an empty answer; see `harness.response`.
    """

    text: str = ""
    reasoning_text: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    issue: str | None = None

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class ItemResult:
    """A scored item. `extracted` is the answer used for scoring; the strict and
    flexible extractions are both kept so a reader can see which one applied."""

    passed: bool
    extracted: str | None = None
    extracted_strict: str | None = None
    extracted_flexible: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpeedSample:
    """Timing of one streamed request (`harness.speed` says how each figure is measured).

    `error` set means no speed was measured.
    """

    index: int
    ttft_s: float | None = None
    decode_tps: float | None = None
    output_tokens: int | None = None
    token_source: TokenSource | None = None
    text_chunks: int = 0
    total_s: float = 0.0
    finish_reason: str | None = None
    accept_length: float | None = None
    reasoning_tokens: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None
