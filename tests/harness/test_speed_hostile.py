"""The speed probe against hostile streams: a count it cannot trust makes the sample an error, never a speed
(the summary leaves errors out: tests/evalsvc/test_speed_summary.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from harness.speed import probe_speed
from harness.types import DecodingSettings
from tests.fake_openai import Fault, FakeOpenAI, Reply

TEXT = "one two three four five six"
SCRIPTS: dict[str, tuple[Reply, str | None]] = {  # prompt -> reply, and the sample's error (None: measured)
    "plain": (Reply(text=TEXT, completion_tokens=6), None),
    "cumulative usage": (Reply(text=TEXT, stream_usage=(2, 4, 9)), None),
    "unknown finish": (Reply(text=TEXT, finish_reason="weird", completion_tokens=12), None),
    "usage goes down": (Reply(text=TEXT, stream_usage=(9, 4)), "usage chunks disagree: completion_tokens 9, then 4"),
    "nan usage": (Reply(text=TEXT, completion_tokens=math.nan), "usage.completion_tokens nan is not a number"),
    "string usage": (Reply(text=TEXT, completion_tokens="12"), "usage.completion_tokens '12' is not an integer"),
    "negative usage": (Reply(text=TEXT, completion_tokens=-7), "usage.completion_tokens -7 is negative"),
    "huge usage": (Reply(text=TEXT, completion_tokens=2**62), "is above the bound"),
    "aborted": (Reply(text=TEXT, finish_reason="abort"), "the server aborted the request"),
    "out of order": (Reply(text=TEXT, completion_tokens=6), "text chunk after the finish_reason chunk"),
}


def reply_for(body: dict[str, Any]) -> Reply:
    return SCRIPTS[body["messages"][0]["content"]][0]


def faults(_: int, body: dict[str, Any]) -> Fault | None:
    return Fault("stream_disorder") if body["messages"][0]["content"] == "out of order" else None


def test_hostile_streams_are_errors_never_speeds() -> None:
    prompts = list(SCRIPTS)
    with FakeOpenAI(reply_for, faults=faults) as server:
        samples = asyncio.run(probe_speed(server.base_url, "fake-model", prompts, decoding=DecodingSettings(max_tokens=64),
                                              warmup=0)).samples
    by_prompt = dict(zip(prompts, samples))
    for prompt, (_, error) in SCRIPTS.items():
        sample = by_prompt[prompt]
        if error is None:
            assert sample.ok and sample.token_source == "usage", (prompt, sample.error)
        else:
            assert not sample.ok and error in sample.error and sample.output_tokens is None, (prompt, sample.error)
    assert [by_prompt[p].output_tokens for p in ("plain", "cumulative usage", "unknown finish")] == [6, 9, 12]
    assert (by_prompt["plain"].finish_reason, by_prompt["unknown finish"].finish_reason) == ("stop", None)
