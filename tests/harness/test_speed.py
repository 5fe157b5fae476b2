"""Speed probe against a real local streaming server whose token timing the test sets,
plus the chat prompt loader that feeds the chat workload."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.chat_prompts import ChatPromptError, builtin_prompts_path, load_chat_prompts, messages_from_record
from harness.client import request_body
from harness.speed import (
    WARMUP_MAX_TOKENS,
    WARMUP_PROMPT,
    accept_length_from_meta,
    probe_speed,
)
from harness.types import DecodingSettings, Request, SpeedSample
from tests.fake_openai import FakeOpenAI, StreamScript

ROOT = Path(__file__).resolve().parents[2]


def run_probe(script: StreamScript, prompts: list, **kwargs) -> tuple[list[SpeedSample], list[dict]]:
    samples, server = run_probe_served(script, prompts, **kwargs)
    return samples, list(server.requests)


def run_probe_served(script: StreamScript, prompts: list, **kwargs) -> tuple[list[SpeedSample], FakeOpenAI]:
    """Samples and the server, whose `sent_at` holds the pacing it really served."""
    with script.server() as server:
        samples = asyncio.run(probe_speed(server.base_url, "fake-model", prompts, **kwargs)).samples
    return samples, server


def served_ttft(server: FakeOpenAI, request: int) -> float:
    """From the request's arrival to its first text chunk leaving: the least TTFT a client can measure (it sends
    before the server reads, and reads after the server writes)."""
    return server.sent_at[request][0] - server.arrived_at[request]


def assert_tracks_served_pacing(sample: SpeedSample, server: FakeOpenAI, request: int, tokens: int) -> None:
    """The probe's decode speed is the pacing the server really kept (a loaded machine
    stretches the scripted intervals, so the script alone is not the truth), and
    never faster than the script allows."""
    served = server.served_decode_tps(request, tokens)
    assert sample.decode_tps == pytest.approx(served, rel=0.2)


# ---------------------------------------------------------------- timing


def test_probe_measures_the_scripted_ttft_and_decode_speed() -> None:
    script = StreamScript(ttft_s=0.1, interval_s=0.01, n_tokens=50)
    decoding = DecodingSettings(max_tokens=64, seed=7)
    samples, server = run_probe_served(script, ["What is 2+2?", "Name a colour."], decoding=decoding, warmup=1)
    requests = server.requests

    assert len(samples) == 2
    for number, sample in enumerate(samples, start=1):
        assert sample.ok, sample.error
        # The role-only first chunk leaves at once; counting it would give a TTFT below the served one.
        assert served_ttft(server, number) <= sample.ttft_s < sample.total_s
        assert_tracks_served_pacing(sample, server, number, 50)
        assert sample.output_tokens == 50
        assert sample.token_source == "usage"
        assert sample.finish_reason == "stop"
        assert sample.total_s >= server.sent_at[number][-1] - server.arrived_at[number]
    # One warm-up plus two measured requests, each streamed, asking for usage, with the accuracy runs' body.
    assert len(requests) == 3
    for body in requests:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert (body["temperature"], body["top_p"], body["seed"]) == (0.0, 1.0, 7)
    scored = request_body(Request("chat", ({"role": "user", "content": "What is 2+2?"},)), "fake-model", decoding)
    assert {k: v for k, v in requests[1].items() if not k.startswith("stream")} == scored
    assert [r["max_tokens"] for r in requests] == [WARMUP_MAX_TOKENS, 64, 64]
    # The warm-up must not be the first measured prompt (a prefix-cache hit would flatter its TTFT).
    assert requests[0]["messages"] == [{"role": "user", "content": WARMUP_PROMPT}]
    assert requests[1]["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert requests[2]["messages"] == [{"role": "user", "content": "Name a colour."}]


def test_slower_interval_gives_proportionally_lower_decode_speed() -> None:
    fast, fast_server = run_probe_served(StreamScript(ttft_s=0.05, interval_s=0.01, n_tokens=40), ["a"], warmup=0)
    slow, slow_server = run_probe_served(StreamScript(ttft_s=0.05, interval_s=0.02, n_tokens=40), ["a"], warmup=0)
    assert_tracks_served_pacing(fast[0], fast_server, 0, 40)
    assert_tracks_served_pacing(slow[0], slow_server, 0, 40)
    served_ratio = fast_server.served_decode_tps(0, 40) / slow_server.served_decode_tps(0, 40)
    assert fast[0].decode_tps / slow[0].decode_tps == pytest.approx(served_ratio, rel=0.3)


def test_usage_count_is_preferred_to_counted_chunks() -> None:
    # Three tokens per chunk, as speculative decoding emits: 20 chunks, 60 tokens. The chunks come 30 ms apart:
    # at 10 ms the counted-chunk window was 0.19 s, and one late read of the first chunk on a busy machine
    # (28 ms) moved the figure past 20%.
    script = StreamScript(ttft_s=0.05, interval_s=0.03, n_tokens=60, tokens_per_chunk=3)
    with_usage, with_server = run_probe_served(script, ["a"], warmup=0)
    without_usage, without_server = run_probe_served(StreamScript(**{**script.__dict__, "usage": False}), ["a"],
                                                     warmup=0)

    assert (with_usage[0].output_tokens, with_usage[0].token_source, with_usage[0].text_chunks) == (60, "usage", 20)
    assert (without_usage[0].output_tokens, without_usage[0].token_source) == (20, "chunks")
    # 59 tokens over the 19 intervals served; counted chunks give a third of that.
    assert_tracks_served_pacing(with_usage[0], with_server, 0, 60)
    assert_tracks_served_pacing(without_usage[0], without_server, 0, 20)


def test_usage_figure_is_taken_as_reported() -> None:
    samples, _ = run_probe(StreamScript(ttft_s=0.02, interval_s=0.005, n_tokens=30, usage_tokens=47), ["a"], warmup=0)
    assert samples[0].output_tokens == 47
    assert samples[0].text_chunks == 30


def test_reasoning_tokens_count_for_ttft_and_length() -> None:
    script = StreamScript(ttft_s=0.05, interval_s=0.05, n_tokens=12, reasoning_tokens=10, usage=False)
    samples, server = run_probe_served(script, ["think"], warmup=0)
    # Ignoring reasoning, the first token could not be read before the first content chunk left (0.5 s after the
    # first reasoning chunk), and 2 chunks would be counted.
    assert samples[0].ttft_s < server.sent_at[0][10] - server.arrived_at[0]
    assert samples[0].output_tokens == 12


def test_completions_mode_posts_a_raw_prompt() -> None:
    samples, server = run_probe_served(
        StreamScript(ttft_s=0.05, interval_s=0.01, n_tokens=20), ["def add(a, b):"], mode="completions", warmup=0
    )
    assert server.requests[0]["prompt"] == "def add(a, b):"
    assert "messages" not in server.requests[0]
    assert samples[0].ok and samples[0].output_tokens == 20
    assert_tracks_served_pacing(samples[0], server, 0, 20)


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (StreamScript(ttft_s=0.05, interval_s=0.01, fail_after=10, fail_mode="stream_error"), "error event"),
        (StreamScript(ttft_s=0.05, interval_s=0.01, fail_after=10, fail_mode="stream_drop"), "RemoteProtocolError"),
        (StreamScript(ttft_s=0.05, interval_s=0.01, fail_after=10, fail_mode="stream_no_done"), "without [DONE]"),
        (StreamScript(status=503), "HTTP 503"),
    ],
    ids=["error-event", "disconnect", "no-done", "http-503"],
)
def test_failed_stream_gives_an_error_not_a_speed(script: StreamScript, expected: str) -> None:
    samples, _ = run_probe(script, ["a", "b"], warmup=0)
    for sample in samples:
        assert not sample.ok
        assert expected in sample.error
        assert (sample.ttft_s, sample.decode_tps, sample.output_tokens) == (None, None, None)


def test_a_proxy_in_the_environment_is_not_timed_as_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe reaches the endpoint as the accuracy runs do (`harness.client.endpoint_http`): never through a
    proxy from the environment, which would be timed (here: a dead one, which would fail every request)."""
    for name in ("ALL_PROXY", "HTTP_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    samples, requests = run_probe(StreamScript(ttft_s=0.01, interval_s=0.002, n_tokens=10), ["a"], warmup=0)
    assert [(s.ok, s.output_tokens) for s in samples] == [(True, 10)] and len(requests) == 1


def test_failed_request_does_not_stop_the_probe() -> None:
    script = StreamScript(ttft_s=0.05, interval_s=0.005, n_tokens=20, fail_after=5, fail_requests=(1,))
    samples, requests = run_probe(script, ["a", "b", "c"], warmup=0)
    assert len(requests) == 3
    assert [s.ok for s in samples] == [True, False, True]
    assert samples[2].decode_tps is not None and samples[2].output_tokens == 20


# ---------------------------------------------------------------- SGLang extras


def test_meta_info_gives_per_request_accept_length() -> None:
    meta = {"completion_tokens": 30, "spec_verify_ct": 12}
    script = StreamScript(ttft_s=0.02, interval_s=0.005, n_tokens=30, meta_info=meta)
    samples, _ = run_probe(script, ["a"], warmup=0)
    assert samples[0].accept_length == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (None, None),
        ({}, None),
        ({"completion_tokens": 106, "spec_verify_ct": 43}, 106 / 43),
        ({"completion_tokens": 10, "spec_verify_ct": 0}, None),
        ({"spec_accept_length": 3.25, "completion_tokens": 10, "spec_verify_ct": 5}, 3.25),
        # SGLang's SpecTokensDetails defaults to 0.0 for a request that was never verified.
        ({"spec_accept_length": 0.0, "spec_verify_ct": 0}, None),
    ],
)
def test_accept_length_from_meta(meta: dict | None, expected: float | None) -> None:
    assert accept_length_from_meta(meta) == (pytest.approx(expected) if expected is not None else None)


# ---------------------------------------------------------------- chat prompts


def test_builtin_chat_prompts_are_varied_single_user_turns() -> None:
    prompts = load_chat_prompts()
    assert len(prompts) >= 30
    assert len({p.prompt_id for p in prompts}) == len(prompts)
    assert len({p.messages[-1]["content"] for p in prompts}) == len(prompts)
    assert all(p.origin == "builtin" and p.messages[-1]["role"] == "user" for p in prompts)
    categories = {json.loads(line)["category"] for line in builtin_prompts_path().read_text().splitlines()}
    assert len(categories) >= 10
    assert len(load_chat_prompts(limit=5)) == 5


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}, [("user", "hi")]),
        (
            {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "2+2?"}]},
            [("system", "be brief"), ("user", "2+2?")],
        ),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
            [("user", "a")],
        ),
        ({"conversation": [{"role": "user", "content": "lmsys-style"}]}, [("user", "lmsys-style")]),
        ({"prompt": "plain"}, [("user", "plain")]),
        ({"conversations": [{"from": "gpt", "value": "no opener"}, {"from": "human", "value": "late"}]}, None),
        ({"conversations": [{"from": "human", "value": "   "}]}, None),
        ({"text": "unknown shape"}, None),
    ],
)
def test_messages_from_record(record: dict, expected: list[tuple[str, str]] | None) -> None:
    messages = messages_from_record(record)
    got = None if messages is None else [(m["role"], m["content"]) for m in messages]
    assert got == expected


def test_local_jsonl_is_read_and_unusable_records_skipped(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    lines = [
        {"id": "a", "conversations": [{"from": "human", "value": "first"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "skip me"}]},
        {"prompt": "x" * 500},
        {"id": "d", "messages": [{"role": "user", "content": "fourth"}]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    prompts = load_chat_prompts(str(path), max_chars=100)
    assert [(p.prompt_id, p.messages[0]["content"], p.origin) for p in prompts] == [
        ("a", "first", str(path)),
        ("d", "fourth", str(path)),
    ]


def test_bad_local_jsonl_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(ChatPromptError, match=r"bad\.jsonl:2"):
        load_chat_prompts(str(path))


_DATASETS_SCRIPT = """
import json, sys
from harness.chat_prompts import ChatPromptError, load_chat_prompts
folder = sys.argv[1]
loaded = load_chat_prompts(folder, limit=2)
fallback = load_chat_prompts("no-such-owner/no-such-chat-set", limit=3)
try:
    load_chat_prompts("no-such-owner/no-such-chat-set", strict=True)
    strict = "no error"
except ChatPromptError as exc:
    strict = str(exc)
print(json.dumps({
    "loaded": [[p.prompt_id, p.origin, [m["content"] for m in p.messages]] for p in loaded],
    "fallback": [p.origin for p in fallback],
    "strict": strict,
}))
"""


@pytest.mark.slow
def test_datasets_source_loads_sharegpt_folder_and_falls_back_offline(tmp_path: Path) -> None:
    folder = tmp_path / "sharegpt"
    folder.mkdir()
    records = [
        {"id": "s1", "conversations": [{"from": "human", "value": "plan a picnic"}, {"from": "gpt", "value": "ok"}]},
        {"id": "s2", "conversations": [{"from": "gpt", "value": "orphan"}]},
        {"id": "s3", "conversations": [{"from": "human", "value": "fix my bike chain"}]},
        {"id": "s4", "conversations": [{"from": "human", "value": "not reached: limit is 2"}]},
    ]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    # Offline mode makes the hub lookup fail at once instead of retrying for ~25 s.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [sys.executable, "-c", _DATASETS_SCRIPT, str(folder)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [
        ["s1", str(folder), ["plan a picnic"]],
        ["s3", str(folder), ["fix my bike chain"]],
    ]
    assert result["fallback"] == ["builtin"] * 3
    assert "no-such-owner/no-such-chat-set" in result["strict"]
    assert "using the built-in chat prompts" in done.stderr


def test_chat_prompts_feed_the_probe() -> None:
    prompts = load_chat_prompts(limit=2)
    samples, requests = run_probe(StreamScript(ttft_s=0.02, interval_s=0.002, n_tokens=10), prompts, warmup=0)
    assert [r["messages"] for r in requests] == [list(p.messages) for p in prompts]
    assert all(s.ok for s in samples)


def test_built_in_prompt_ids_are_stable() -> None:
    # Stored speed runs refer to prompt ids; renumbering them would break pairing.
    ids = [p.prompt_id for p in load_chat_prompts()]
    assert ids[:3] == ["chat-001", "chat-002", "chat-003"]
    assert ids == [f"chat-{i:03d}" for i in range(1, len(ids) + 1)]


def test_request_prompts_keep_their_stop_sequences() -> None:
    request = Request(mode="completions", prompt="def f():\n", stop=("\ndef ", "\nclass "))
    script = StreamScript(ttft_s=0.02, interval_s=0.002, n_tokens=10)
    samples, requests = run_probe(script, [request], mode="completions", warmup=0)
    assert requests[0]["prompt"] == "def f():\n"
    assert requests[0]["stop"] == ["\ndef ", "\nclass "]
    assert samples[0].ok
