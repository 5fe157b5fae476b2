"""What the speed probe reads from SGLang, against responses recorded from SGLang 0.5.23's source.

The fixtures (tests/fixtures/sglang) are served over real HTTP by the fake
server in tests/fake_openai.py, whose speculative counters move with every
request it serves: `/server_info` (and the deprecated `/get_server_info`),
`/metrics`, the per-request `sglext.spec_tokens_details` chunk, and usage with
reasoning tokens in either place.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness.sglang_stats import (
    TOKENS_COUNTER,
    VERIFY_COUNTER,
    SpecSnapshot,
    counter_totals,
    lifetime_accept_length,
    snapshot_from,
    spec_stats_between,
)
from harness.sglang_stats import SpecStats
from harness.speed import WARMUP_PROMPT, probe_speed
from harness.types import DecodingSettings, SpeedSample
from tests.fake_openai import FakeOpenAI, FakeSGLang, Reply, sglang_fixture

INFO = sglang_fixture("server_info.json")["responses"]
METRICS = sglang_fixture("metrics.txt")
PROMPTS = ["first question", "second question", "third question"]
# (completion tokens, verify steps) of the three measured replies: accept lengths 3, 4 and 2.
MEASURED = {"first question": (30, 10), "second question": (40, 10), "third question": (50, 25)}
WARMUP = (16, 5)


def spec_responder(body: dict[str, Any]) -> Reply:
    prompt = body["messages"][-1]["content"]
    tokens, verify = WARMUP if prompt == WARMUP_PROMPT else MEASURED[prompt]
    return Reply(text=" ".join(f"w{i}" for i in range(tokens)), completion_tokens=tokens, spec_verify_ct=verify)


def run_probe(server: FakeOpenAI, prompts: list[str] = PROMPTS) -> tuple[list[SpeedSample], SpecStats | None]:
    return asyncio.run(probe_speed(server.base_url, "fake-model", prompts, decoding=DecodingSettings(max_tokens=64), warmup=1))


# ---------------------------------------------------------------- parsing recorded responses


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("eagle3_one_rank", 3.0),
        ("eagle3_two_ranks", 3.0),  # mean of the ranks' 2.75 and 3.25
        ("eagle3_fresh", None),  # SGLang leaves the key out until a verify step is counted
        ("no_speculation", None),
        ("older_top_level", 2.5),
    ],
)
def test_lifetime_accept_length_from_internal_states(response: str, expected: float | None) -> None:
    assert lifetime_accept_length(INFO[response]) == expected


def test_counters_sum_over_label_sets_and_skip_created_and_gauges() -> None:
    totals = counter_totals(METRICS, (TOKENS_COUNTER, VERIFY_COUNTER))
    assert totals == {TOKENS_COUNTER: 52311.0 + 1200.0, VERIFY_COUNTER: 18000.0}


def test_a_declared_counter_without_samples_is_zero_and_an_undeclared_one_absent() -> None:
    text = "# HELP sglang:spec_verify_calls Number.\n# TYPE sglang:spec_verify_calls counter\n"
    assert counter_totals(text, (TOKENS_COUNTER, VERIFY_COUNTER)) == {VERIFY_COUNTER: 0.0}


def test_snapshot_reads_the_algorithm_and_version() -> None:
    snap = snapshot_from("/server_info", INFO["eagle3_one_rank"], METRICS)
    assert (snap.algorithm, snap.num_draft_tokens, snap.version) == ("EAGLE3", 4, "0.5.23")
    assert (snap.lifetime_accept_length, snap.generation_tokens, snap.verify_calls) == (3.0, 53511.0, 18000.0)


@pytest.mark.parametrize(
    ("before", "after", "probe"),
    [
        ((53511.0, 18000.0), (53631.0, 18045.0), 120 / 45),
        ((53511.0, 18000.0), (100.0, 40.0), None),  # counters went down: the server restarted in between
        ((None, None), (None, None), None),  # no /metrics: started without --enable-metrics
        ((53511.0, 18000.0), (53511.0, 18000.0), None),  # nothing verified during the probe
    ],
    ids=["counted", "restarted", "no-metrics", "no-verify"],
)
def test_probe_mean_comes_only_from_counter_differences(
    before: tuple[float | None, float | None], after: tuple[float | None, float | None], probe: float | None
) -> None:
    a = SpecSnapshot("/server_info", algorithm="EAGLE3", lifetime_accept_length=3.0,
                     generation_tokens=before[0], verify_calls=before[1])
    b = SpecSnapshot("/server_info", algorithm="EAGLE3", lifetime_accept_length=2.99,
                     generation_tokens=after[0], verify_calls=after[1])
    stats = spec_stats_between(a, b)
    assert stats is not None
    assert stats.probe_accept_length == (pytest.approx(probe) if probe is not None else None)
    # The lifetime figures are kept, labelled as such, whatever the counters say.
    assert (stats.lifetime_before, stats.lifetime_after) == (3.0, 2.99)


def test_no_speculation_gives_no_stats() -> None:
    snap = snapshot_from("/server_info", INFO["no_speculation"], None)
    assert spec_stats_between(snap, snap) is None


# ---------------------------------------------------------------- the probe against a live fake SGLang


def test_probe_reports_its_own_acceptance_not_the_servers_lifetime_one() -> None:
    sglang = FakeSGLang(dict(INFO["eagle3_one_rank"]))
    with FakeOpenAI(spec_responder, sglang=sglang) as server:
        samples, stats = run_probe(server)
        bodies = list(server.requests)
    assert [s.accept_length for s in samples] == [3.0, 4.0, 2.0]  # from each request's sglext chunk
    assert stats is not None
    # 120 tokens over 45 verify steps: the warm-up's 16 tokens / 5 steps are outside the two reads.
    assert (stats.probe_generation_tokens, stats.probe_verify_calls) == (120, 45)
    assert stats.probe_accept_length == pytest.approx(120 / 45)
    # The lifetime average still holds the 3000 verify steps before the probe: it barely moves.
    assert stats.lifetime_before == pytest.approx((9000 + 16) / 3005)
    assert stats.lifetime_after == pytest.approx((9000 + 16 + 120) / 3050)
    assert abs(stats.lifetime_after - stats.probe_accept_length) > 0.3
    assert (stats.algorithm, stats.num_draft_tokens, stats.server_info_route) == ("EAGLE3", 4, "/server_info")
    assert stats.sglang_version == "0.5.23"
    # Only the measured requests ask for SGLang's per-request statistics.
    assert [b.get("return_spec_tokens_details") for b in bodies] == [None, True, True, True]


def test_current_route_is_read_first() -> None:
    with FakeOpenAI(spec_responder, sglang=FakeSGLang(dict(INFO["eagle3_one_rank"]))) as server:
        run_probe(server)
        gets = list(server.gets)
    assert gets.count("/server_info") == 2 and "/get_server_info" not in gets
    assert gets.count("/metrics") == 2


def test_older_sglang_falls_back_to_get_server_info_and_reports_no_probe_mean() -> None:
    sglang = FakeSGLang(dict(INFO["eagle3_one_rank"]), routes=("/get_server_info",), metrics=False,
                        spec_details=False)
    with FakeOpenAI(spec_responder, sglang=sglang) as server:
        samples, stats = run_probe(server)
        gets = list(server.gets)
    assert "/server_info" in gets and "/get_server_info" in gets
    assert stats is not None and stats.server_info_route == "/get_server_info"
    assert stats.probe_accept_length is None and stats.probe_verify_calls is None
    assert stats.lifetime_before is not None and stats.lifetime_after is not None
    assert all(s.accept_length is None for s in samples)


def test_lifetime_average_lags_the_probe_while_the_counters_do_not() -> None:
    # SGLang folds verify steps into the lifetime average only every --decode-log-interval batches.
    sglang = FakeSGLang(dict(INFO["eagle3_one_rank"]), fold_every=1000)
    with FakeOpenAI(spec_responder, sglang=sglang) as server:
        _, stats = run_probe(server)
    assert stats is not None
    assert stats.lifetime_before == stats.lifetime_after == 3.0
    assert stats.probe_accept_length == pytest.approx(120 / 45)


def test_server_without_speculation_gives_no_stats() -> None:
    with FakeOpenAI(spec_responder, sglang=FakeSGLang(dict(INFO["no_speculation"]))) as server:
        samples, stats = run_probe(server)
    assert stats is None
    assert all(s.ok for s in samples)


def test_other_servers_are_not_sent_sglang_fields() -> None:
    with FakeOpenAI(spec_responder) as server:
        samples, stats = run_probe(server)
        bodies = list(server.requests)
    assert stats is None
    assert all("return_spec_tokens_details" not in b for b in bodies)
    assert [s.output_tokens for s in samples] == [30, 40, 50]


@pytest.mark.parametrize(
    ("shape", "expected"),
    [("sglang_0_5_23_reasoning", 352), ("sglang_top_level_only", 352), ("openai_nested", 352),
     ("sglang_0_5_23_no_reasoning", 0), ("no_reasoning_count", None)],
)
def test_stream_usage_reasoning_tokens_in_either_place(shape: str, expected: int | None) -> None:
    usage = sglang_fixture("usage.json")["usage"][shape]
    reply = Reply(text="It is 4.", reasoning="two plus two", extra={"usage": usage})
    with FakeOpenAI(lambda body: reply, sglang=FakeSGLang(dict(INFO["no_speculation"]))) as server:
        samples, _ = run_probe(server, ["2+2?"])
    assert (samples[0].output_tokens, samples[0].token_source) == (usage["completion_tokens"], "usage")
    assert samples[0].reasoning_tokens == expected


@pytest.mark.parametrize("bad", [-3, "16", 1.5, 10**12])
def test_an_impossible_reasoning_count_is_unknown_and_the_speed_still_measured(bad: Any) -> None:
    reply = Reply(text="It is 4.", reasoning="two plus two",
                  extra={"usage": {"prompt_tokens": 5, "completion_tokens": 7, "reasoning_tokens": bad}})
    with FakeOpenAI(lambda body: reply) as server:
        samples, _ = run_probe(server, ["2+2?"])
    assert samples[0].ok and samples[0].output_tokens == 7
    assert samples[0].reasoning_tokens is None


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-5.0", "lots"])
def test_an_unusable_counter_sample_gives_no_counters_at_all(value: str) -> None:
    text = METRICS.replace('model_name="qwen3-30b-a3b"} 18000.0', f'model_name="qwen3-30b-a3b"}} {value}')
    assert text != METRICS
    assert counter_totals(text, (TOKENS_COUNTER, VERIFY_COUNTER)) == {}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "3.0"])
def test_an_unusable_lifetime_average_is_left_out(value: Any) -> None:
    info = {"internal_states": [{"avg_spec_accept_length": value}, {"avg_spec_accept_length": 2.5}]}
    assert lifetime_accept_length(info) == 2.5
