"""The OpenAI-compatible client against a scripted server over real HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from harness.client import EndpointClient, EndpointError, RetryPolicy
from harness.types import Completion, DecodingSettings, Request
from tests.fake_openai import Fault, FakeOpenAI, FakeSGLang, Reply, sglang_fixture

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05)
CHAT = Request(mode="chat", messages=({"role": "user", "content": "2+2?"},))


def complete(server: FakeOpenAI, request: Request = CHAT, retry: RetryPolicy = FAST_RETRY, **kw: Any) -> Completion:
    async def go() -> Completion:
        async with EndpointClient(server.base_url, "fake-model", retry=retry, **kw) as client:
            return await client.complete(request, DecodingSettings(max_tokens=77))

    return asyncio.run(go())


def test_chat_request_is_greedy_and_captures_everything() -> None:
    reply = Reply(text="It is 4.", reasoning="2 plus 2", completion_tokens=9, prompt_tokens=12)
    with FakeOpenAI(lambda body: reply) as server:
        result = complete(server)
        body = server.requests[0]
    assert body["temperature"] == 0.0 and body["seed"] == 1234 and body["max_tokens"] == 77
    assert body["messages"] == [{"role": "user", "content": "2+2?"}]
    assert (result.text, result.reasoning_text) == ("It is 4.", "2 plus 2")
    assert (result.prompt_tokens, result.completion_tokens, result.finish_reason) == (12, 9, "stop")
    assert result.error is None and result.attempts == 1 and result.latency_s > 0


def test_completions_mode_sends_prompt_and_stop() -> None:
    request = Request(mode="completions", prompt="Question: x\nAnswer:", stop=("\n\nQuestion:",))
    with FakeOpenAI(lambda body: Reply(text=" 5", finish_reason="length")) as server:
        result = complete(server, request)
        body = server.requests[0]
    assert body["prompt"] == "Question: x\nAnswer:" and body["stop"] == ["\n\nQuestion:"]
    assert "messages" not in body
    assert result.text == " 5" and result.truncated


@pytest.mark.parametrize("fault", [Fault("status", 500), Fault("status", 503), Fault("drop"), Fault("malformed"),
                                   Fault("empty_choices"), Fault("status", 429, retry_after=0.01)])
def test_transient_faults_are_retried(fault: Fault) -> None:
    with FakeOpenAI(lambda b: Reply(text="ok"), faults=lambda i, b: fault if i < 2 else None) as server:
        result = complete(server)
        assert len(server.requests) == 3
    assert result.error is None and result.text == "ok" and result.attempts == 3


def test_retries_are_capped() -> None:
    with FakeOpenAI(faults=lambda i, b: Fault("status", 502)) as server:
        result = complete(server)
        assert len(server.requests) == FAST_RETRY.max_attempts
    assert result.error is not None and "HTTP 502" in result.error and result.text == ""


@pytest.mark.parametrize("status", [400, 401, 422])
def test_client_errors_are_not_retried(status: int) -> None:
    with FakeOpenAI(faults=lambda i, b: Fault("status", status)) as server:
        result = complete(server)
        assert len(server.requests) == 1
    assert result.error is not None and f"HTTP {status}" in result.error


def test_retry_after_is_honoured() -> None:
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.0, max_delay_s=5.0)
    with FakeOpenAI(faults=lambda i, b: Fault("status", 429, retry_after=0.6) if i == 0 else None) as server:
        result = complete(server, retry=policy)
    assert result.error is None and result.latency_s >= 0.6


def test_invalid_utf8_body_is_decoded_with_replacement() -> None:
    with FakeOpenAI(faults=lambda i, b: Fault("bad_utf8")) as server:
        result = complete(server)
    assert result.error is None and "\ufffd" in result.text and result.text.endswith("7.")


def test_huge_body_is_an_error_not_a_crash() -> None:
    with FakeOpenAI(faults=lambda i, b: Fault("huge")) as server:
        result = complete(server)
    assert result.error is not None and "too large" in result.error


def test_timeout_bounds_the_whole_request_not_each_read() -> None:
    """A server that trickles its body never trips a per-read timeout; the request still ends."""
    async def go(url: str, timeout_s: float) -> Completion:
        retry = RetryPolicy(max_attempts=2, base_delay_s=0.01)
        async with EndpointClient(url, "fake-model", timeout_s=timeout_s, retry=retry) as client:
            return await client.complete(Request(mode="completion", prompt="2+2="), DecodingSettings())

    # Ten pieces 0.06 s apart: each read comes within 0.06 s, so only a limit on the whole attempt cuts it at 0.3 s.
    with FakeOpenAI(lambda body: Reply(text="x" * 40), faults=lambda i, b: Fault("trickle", delay_s=0.06)) as server:
        cut = asyncio.run(go(server.base_url, 0.3))
        whole = asyncio.run(go(server.base_url, 30.0))  # the same trickle, given time, is a normal answer
    assert cut.error is not None and "no complete response within 0.3 s" in cut.error and cut.attempts == 2
    assert whole.error is None and whole.text == "x" * 40


def test_unknown_model_lists_served_models() -> None:
    async def go(url: str) -> None:
        async with EndpointClient(url, "llama-70b") as client:
            await client.check_model()

    with FakeOpenAI(models=("qwen-27b", "draft")) as server:
        with pytest.raises(EndpointError, match="does not serve model 'llama-70b'; /v1/models lists: qwen-27b, draft"):
            asyncio.run(go(server.base_url))


def test_unreachable_endpoint() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> None:
        async with EndpointClient(f"http://127.0.0.1:{port}", "m") as client:
            await client.list_models()

    with pytest.raises(EndpointError, match=f"127.0.0.1:{port}/v1 is unreachable"):
        asyncio.run(go())


def test_server_that_is_not_openai_compatible() -> None:
    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def go() -> None:
        async with EndpointClient(f"http://127.0.0.1:{server.server_address[1]}", "m") as client:
            await client.list_models()

    try:
        with pytest.raises(EndpointError, match="not OpenAI-compatible: GET .* did not return a model list"):
            asyncio.run(go())
    finally:
        server.shutdown()


def test_sglang_fingerprint_and_meta_info() -> None:
    async def go(url: str) -> tuple[dict[str, Any], Completion]:
        async with EndpointClient(url, "fake-model", retry=FAST_RETRY) as client:
            return await client.fingerprint(), await client.complete(CHAT, DecodingSettings())

    with FakeOpenAI(lambda b: Reply(text="a b c d"), sglang=True) as server:  # an older build: /get_* routes only
        fingerprint, result = asyncio.run(go(server.base_url))
    assert fingerprint["engine"] == "sglang"
    assert fingerprint["routes"] == {"model_info": "/get_model_info", "server_info": "/get_server_info"}
    assert fingerprint["server_info"]["internal_states"][0]["avg_spec_accept_length"] == 2.5
    assert result.extra["meta_info"]["spec_verify_ct"] == 2


def test_fingerprint_reads_sglangs_current_routes_first() -> None:
    info = sglang_fixture("server_info.json")["responses"]["eagle3_one_rank"]

    async def go(url: str) -> dict[str, Any]:
        async with EndpointClient(url, "fake-model", retry=FAST_RETRY) as client:
            return await client.fingerprint()

    with FakeOpenAI(sglang=FakeSGLang(dict(info))) as sglang, FakeOpenAI() as plain:
        current, other = asyncio.run(go(sglang.base_url)), asyncio.run(go(plain.base_url))
        gets = list(sglang.gets)
    assert current["routes"] == {"model_info": "/model_info", "server_info": "/server_info"}
    assert (current["server_info"]["version"], current["model_info"]["reasoning_parser"]) == ("0.5.23", "qwen3")
    assert "/get_server_info" not in gets and "/get_model_info" not in gets
    assert other == {"models": ["fake-model"], "engine": "openai-compatible"}


# ---------------------------------------------------------------- reasoning tokens, as SGLang and OpenAI report them

@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("sglang_0_5_23_reasoning", 352),
        ("sglang_0_5_23_no_reasoning", 0),
        ("sglang_top_level_only", 352),
        ("openai_nested", 352),
        ("openai_nested_zero", 0),
        ("no_reasoning_count", None),
    ],
)
def test_reasoning_tokens_are_read_where_the_server_puts_them(shape: str, expected: int | None) -> None:
    usage = sglang_fixture("usage.json")["usage"][shape]
    reply = Reply(text="It is 4.", reasoning="2 plus 2", extra={"usage": usage})
    with FakeOpenAI(lambda body: reply) as server:
        result = complete(server)
    assert result.reasoning_tokens == expected
    assert result.completion_tokens == usage["completion_tokens"]
