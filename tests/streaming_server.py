"""Test double: an OpenAI-compatible streaming server whose token timing the test sets.

Speaks real HTTP/1.1 with chunked transfer encoding and server-sent events on
127.0.0.1, for `/v1/chat/completions` and `/v1/completions` (SGLang's own
routes are served by tests/fake_openai.py's FakeSGLang). Each token is written and flushed on its own
schedule: `ttft_s` after the request for the first, then every `interval_s`,
against absolute deadlines so scheduling delays do not accumulate.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

FailMode = Literal["error_event", "disconnect", "no_done"]
MODEL_ID = "fake-model"  # what /v1/models lists, so the CLI can register the endpoint


@dataclass(frozen=True)
class StreamScript:
    """How the server answers every completion request.

    - `tokens_per_chunk > 1` mimics speculative decoding emitting several tokens at once.
    - `reasoning_tokens`: the first N tokens go out as `reasoning_content`.
    - `usage`: send usage in a final chunk when the request asks for it
      (`stream_options.include_usage`); `usage_tokens` overrides the count.
    - `fail_after`: after that many text chunks, fail as `fail_mode` says; only
      on the requests numbered in `fail_requests` (0-based) when that is given.
    - `role_chunk`: send a role-only first chunk with empty content, as vLLM does.
    """

    ttft_s: float = 0.2
    interval_s: float = 0.01
    n_tokens: int = 50
    tokens_per_chunk: int = 1
    reasoning_tokens: int = 0
    usage: bool = True
    usage_tokens: int | None = None
    finish_reason: str = "stop"
    meta_info: dict[str, Any] | None = None
    fail_after: int | None = None
    fail_mode: FailMode = "error_event"
    fail_requests: tuple[int, ...] | None = None
    status: int = 200
    role_chunk: bool = True


@dataclass
class StreamingServer:
    """A running server; `requests` collects every JSON body received, and
    `sent_at` the `time.perf_counter()` at which each text chunk of each
    request left (one list per request, empty when nothing was streamed):
    the pacing really served, which a busy machine can stretch past the script."""

    base_url: str
    script: StreamScript
    requests: list[dict[str, Any]] = field(default_factory=list)
    sent_at: list[list[float]] = field(default_factory=list)

    def served_decode_tps(self, request: int, tokens: int) -> float:
        """`tokens - 1` over the time between the first and last text chunk this server sent."""
        times = self.sent_at[request]
        return (tokens - 1) / (times[-1] - times[0])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each token must leave as soon as it is written
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        number = len(self.server.state.requests)
        self.server.state.requests.append(body)
        self.server.state.sent_at.append([])
        script = self.server.state.script
        if script.fail_requests is not None and number not in script.fail_requests:
            script = replace(script, fail_after=None)
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_json(404, {"detail": "Not Found"})
        elif script.status != 200:
            self._send_json(script.status, {"error": {"message": "scripted failure", "code": script.status}})
        else:
            self._stream(script, body, chat=self.path.endswith("chat/completions"))

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: dict[str, Any] | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._write_chunk(f"data: {text}\n\n".encode())

    def _stream(self, script: StreamScript, body: dict[str, Any], chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        start = time.perf_counter()
        cap = body.get("max_tokens")
        if isinstance(cap, int) and cap < script.n_tokens:  # a real server stops at the cap and says so
            script = replace(script, n_tokens=cap, finish_reason="length")
        if chat and script.role_chunk:
            self._event(_chunk(body, {"role": "assistant", "content": ""}, chat))
        for index, text, is_reasoning in _token_groups(script):
            # Absolute deadlines: a late wake-up on a busy machine delays one chunk, not all that follow.
            _sleep_until(start + script.ttft_s + index * script.interval_s)
            if script.fail_after is not None and index >= script.fail_after:
                self._fail(script.fail_mode)
                return
            delta = {"reasoning_content": text} if is_reasoning else {"content": text}
            self._event(_chunk(body, delta, chat))
            self.server.state.sent_at[-1].append(time.perf_counter())
        self._finish(script, body, chat)

    def _finish(self, script: StreamScript, body: dict[str, Any], chat: bool) -> None:
        final = _chunk(body, {}, chat, finish_reason=script.finish_reason)
        if script.meta_info is not None:
            final["meta_info"] = script.meta_info
        self._event(final)
        if script.usage and (body.get("stream_options") or {}).get("include_usage"):
            tokens = script.usage_tokens if script.usage_tokens is not None else script.n_tokens
            usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": 12 + tokens}
            self._event({"id": "cmpl-test", "object": "chunk", "choices": [], "usage": usage})
        self._event("[DONE]")
        self._write_chunk(b"")

    def _fail(self, mode: FailMode) -> None:
        if mode == "error_event":
            self._event({"error": {"message": "scripted mid-stream failure", "code": 500}})
            self._event("[DONE]")
            self._write_chunk(b"")
        elif mode == "no_done":
            self._write_chunk(b"")
        else:
            # Drop the socket without the terminating chunk, as a crashed server would.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def _token_groups(script: StreamScript) -> Iterator[tuple[int, str, bool]]:
    """(chunk index, chunk text, is reasoning) for every text chunk of the reply."""
    position = 0
    index = 0
    while position < script.n_tokens:
        size = min(script.tokens_per_chunk, script.n_tokens - position)
        is_reasoning = position < script.reasoning_tokens
        yield index, "".join(f" t{position + k}" for k in range(size)), is_reasoning
        position += size
        index += 1


def _chunk(body: dict[str, Any], delta: dict[str, Any], chat: bool, finish_reason: str | None = None) -> dict[str, Any]:
    if chat:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": delta.get("content", ""), "finish_reason": finish_reason}
    return {"id": "cmpl-test", "object": "chunk", "model": body.get("model"), "choices": [choice]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: StreamingServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading after an error event resets the socket: expected, not a bug.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextmanager
def serve_stream(script: StreamScript) -> Iterator[StreamingServer]:
    """Run the scripted server on a free 127.0.0.1 port for the duration of the block."""
    server = _Server(("127.0.0.1", 0), _Handler)
    host, port = server.server_address[:2]
    server.state = StreamingServer(base_url=f"http://{host}:{port}", script=script)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
