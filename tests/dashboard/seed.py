"""A seeded store for the dashboard tests: a four-step ladder with known answers.

Rows are written through `db.queries` (the runner's own write path), so the
dashboard reads exactly what a real run would leave. The patterns are chosen so
every figure the tests look for can be worked out by hand:

GSM8K, 400 items, gold answer of item i is i:
- bf16: right on i < 320 (80.0%); tokens 150 + i % 50 (mean 174.5).
- int4: right on i < 318 and on 330, 331 (80.0%); tokens bf16 + 9.
- int4-spec: the same answers and tokens as int4.
- int4-spec-kernel: right on i < 300; item 399 failed (error); items 380-389
  truncated at 2048 tokens; other tokens 200 + i % 50. Item 300's text holds
  HTML that must be shown as text.
- bf16 repeat: as bf16 but 316, 317 wrong and 325, 326 right (4 flips).

HumanEval, 164 items (4 x 41): bf16 passes i < 100 with 180 + i % 41 tokens
(mean 200); int4 and int4-spec pass the same with 222 + i % 41 (mean 242, 21%
more); the kernel step passes i < 98 with 210 + i % 41 (mean 230).

Decode speeds (tok/s, entered by hand): math 100, 180, 270, 300; code 226,
252, 400, 420. So for code, int4 writes 21% more tokens at 252 against 226
tok/s and tasks finish no sooner: stop at bf16. For math, int4 and int4-spec
are taken and the kernel step is worse: ship int4-spec.

Chat speed probes (measured, 20 prompts each): decode speeds 90, 160, 240, 280
tok/s (+ prompt % 5), output tokens 200, 210, 210, 205 (+ prompt), none cut.
Chat has no accuracy task, so the worst verdict of a pair's tasks stands in:
chat takes int4 and int4-spec (faster, same tokens within 5%) and stops at
int4-spec, as math does.

Run as a script to write a store: `python -m tests.dashboard.seed PATH`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from db import queries
from db.engine import Store, open_store
from harness.types import Completion, DecodingSettings, ItemResult, Request, Sample, SpeedSample, stable_hash

STEPS = ("bf16", "int4", "int4-spec", "int4-spec-kernel")
GSM8K_N = 400
HUMANEVAL_N = 164
# Hostile model output (no digits: the extracted answer stays the number before it): markup, a tag closing the
# block it is shown in, an image whose error handler would mark the page, Markdown.
HTML_TEXT = ("<b>bold</b><script>alert('x')</script></pre><img src=x onerror=\"document.body.dataset.pwned='yes'\">"
             " **not bold** [link](javascript:alert('y'))")
SPEEDS = {
    "bf16": {"math": 100.0, "code": 226.0},
    "int4": {"math": 180.0, "code": 252.0},
    "int4-spec": {"math": 270.0, "code": 400.0},
    "int4-spec-kernel": {"math": 300.0, "code": 420.0},
}
CHAT_PROMPTS = 20
CHAT_TPS = {"bf16": 90.0, "int4": 160.0, "int4-spec": 240.0, "int4-spec-kernel": 280.0}
CHAT_TOKENS = {"bf16": 200, "int4": 210, "int4-spec": 210, "int4-spec-kernel": 205}
TEMPLATES = {"gsm8k": "zeroshot-chat@v1", "humaneval": "instruct-chat@v1"}
START = datetime(2025, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Outcome:
    """What one endpoint did on one item."""

    correct: bool
    tokens: int | None
    text: str = ""
    extracted: str | None = None
    finish_reason: str = "stop"
    error: str | None = None
    detail: dict[str, Any] | None = None


def gsm8k_sample(i: int) -> Sample:
    """Item i of the synthetic GSM8K set; its gold answer is i."""
    question = f"Question {i}: a farmer has {i} sheep and buys none. How many sheep does the farmer have?"
    return Sample("gsm8k", f"gsm8k/test/{i:04d}", stable_hash("q", str(i)), question, str(i))


def humaneval_sample(i: int) -> Sample:
    """Item i of the synthetic HumanEval set."""
    prompt = f"def f_{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n"
    return Sample("humaneval", f"HumanEval/{i}", stable_hash("h", str(i)), prompt, f"check(f_{i})")


def math_outcome(i: int, right: bool, tokens: int, note: str = "") -> Outcome:
    """A GSM8K answer: right gives i, wrong gives i + 1."""
    answer = str(i if right else i + 1)
    text = f"We count the sheep.\n{note}The farmer has {answer} sheep.\nThe answer is {answer}."
    return Outcome(correct=right, tokens=tokens, text=text, extracted=answer)


def code_outcome(i: int, passed: bool, tokens: int) -> Outcome:
    """A HumanEval answer that passes or fails its tests."""
    body = f"    return x + {i}" if passed else f"    return x - {i}"
    detail = {"result": "passed"} if passed else {"result": "failed: AssertionError", "failed_test": f"assert f_{i}(1) == {1 + i}"}
    return Outcome(correct=passed, tokens=tokens, text=f"def f_{i}(x):\n{body}\n", detail=detail)


def bf16_math(i: int, repeat: int = 0) -> Outcome:
    right = i < 320
    if repeat:
        right = (right and i not in (316, 317)) or i in (325, 326)
    return math_outcome(i, right, 150 + i % 50)


def int4_math(i: int) -> Outcome:
    right = i < 318 or i in (330, 331)
    return math_outcome(i, right, 159 + i % 50, note="Let me double-check the count.\n")


def kernel_math(i: int) -> Outcome:
    if i == 399:
        return Outcome(correct=False, tokens=None, error="HTTP 500 after 3 attempts")
    if 380 <= i <= 389:
        return Outcome(correct=False, tokens=2048, text="We count the sheep. " * 50, finish_reason="length")
    outcome = math_outcome(i, i < 300, 200 + i % 50, note="Counting carefully now.\n")
    if i == 300:
        return Outcome(**{**outcome.__dict__, "text": outcome.text + "\n" + HTML_TEXT})
    return outcome


MATH: dict[str, Callable[[int], Outcome]] = {
    "bf16": bf16_math, "int4": int4_math, "int4-spec": int4_math, "int4-spec-kernel": kernel_math,
}
CODE: dict[str, Callable[[int], Outcome]] = {
    "bf16": lambda i: code_outcome(i, i < 100, 180 + i % 41),
    "int4": lambda i: code_outcome(i, i < 100, 222 + i % 41),
    "int4-spec": lambda i: code_outcome(i, i < 100, 222 + i % 41),
    "int4-spec-kernel": lambda i: code_outcome(i, i < 98, 210 + i % 41),
}


def add_speeds(store: Store, endpoint: str, speeds: dict[str, float], source: str = "seed table") -> None:
    """Decode speeds entered by hand, as `evalsvc speed --tokens-per-second` stores them."""
    with store.session() as session:
        row = queries.get_endpoint(session, endpoint)
        for workload, tps in speeds.items():
            queries.add_speed_by_hand(session, row, workload, tps, 0.0, source)


def add_chat_probe(store: Store, endpoint: str, tps: float, tokens: int) -> None:
    """A measured chat speed run, as `evalsvc speed --workload chat` stores it."""
    samples = [(f"chat/{p:02d}", SpeedSample(index=p, ttft_s=0.05, decode_tps=tps + p % 5, output_tokens=tokens + p,
                                            token_source="usage", total_s=1.0, finish_reason="stop"))
               for p in range(CHAT_PROMPTS)]
    with store.session() as session:
        queries.add_speed_run(session, queries.get_endpoint(session, endpoint), "chat", samples, "seed probe", 1024, None)


def add_run(
    store: Store, endpoint: str, task: str, samples: Sequence[Sample], outcomes: Sequence[Outcome],
    metadata: dict[str, Any] | None = None, repeat: bool = False, finished_at: datetime | None = None,
    settings: DecodingSettings = DecodingSettings(), status: str = "complete",
) -> int:
    """Write one run (complete unless `status` says otherwise) through the store's query functions; returns its id."""
    with store.session() as session:
        row = queries.upsert_endpoint(session, endpoint, "http://127.0.0.1:1/v1", f"model-{endpoint}", {}, metadata or {})
        fields = {
            "task": task, "template": TEMPLATES.get(task, "chat@v1"), "mode": "chat",
            "decoding": settings.as_dict(), "config_hash": stable_hash(task, "cfg", str(settings.as_dict())),
            "dataset_hash": stable_hash(*(s.item_hash for s in samples)), "n_items": len(samples),
        }
        run, _ = queries.open_run(session, row, fields, new_repeat=repeat)
        queries.save_items(session, run.id, [_item(run.id, s, o) for s, o in zip(samples, outcomes)])
        queries.finish_run(session, run.id, status)
        if finished_at is not None:
            run.finished_at = finished_at
            session.commit()
        return run.id


def _item(run_id: int, sample: Sample, outcome: Outcome) -> dict[str, Any]:
    request = Request(mode="chat", messages=({"role": "user", "content": sample.prompt},))
    completion = Completion(
        text=outcome.text, prompt_tokens=40, completion_tokens=outcome.tokens, finish_reason=outcome.finish_reason,
        latency_s=0.5, error=outcome.error,
    )
    result = None
    if outcome.error is None:
        result = ItemResult(outcome.correct, outcome.extracted, outcome.extracted, outcome.extracted, outcome.detail or {})
    return queries.item_values(run_id, sample, request, completion, result)


def seed_store(db: str) -> Store:
    """Create the ladder store at `db` (SQLAlchemy URL or SQLite path) and return it open."""
    store = open_store(db)
    math_samples = [gsm8k_sample(i) for i in range(GSM8K_N)]
    code_samples = [humaneval_sample(i) for i in range(HUMANEVAL_N)]
    for index, step in enumerate(STEPS):
        when = START + timedelta(hours=index + 1)
        add_run(store, step, "gsm8k", math_samples, [MATH[step](i) for i in range(GSM8K_N)], finished_at=when)
        add_run(store, step, "humaneval", code_samples, [CODE[step](i) for i in range(HUMANEVAL_N)],
                finished_at=when)
        add_speeds(store, step, SPEEDS[step])
        add_chat_probe(store, step, CHAT_TPS[step], CHAT_TOKENS[step])
    # The repeat finished before the main bf16 run, so the ladder keeps using the main one.
    add_run(store, "bf16", "gsm8k", math_samples, [bf16_math(i, repeat=1) for i in range(GSM8K_N)],
            repeat=True, finished_at=START)
    return store


if __name__ == "__main__":
    seed_store(sys.argv[1]).dispose()
