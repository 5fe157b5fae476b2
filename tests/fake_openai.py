"""A scripted OpenAI-compatible server over real HTTP on 127.0.0.1.

Test double for the runner: it speaks `/v1/models`, `/v1/chat/completions` and
`/v1/completions` (plain and streamed), reports usage and finish_reason, and
injects faults chosen by the test: HTTP errors, Retry-After, dropped
connections, malformed JSON, empty or several choices, a choice without a
message, a Content-Length that lies either way, slow replies, huge or
invalid-UTF-8 bodies, and for streams chunks out of order. A `Reply` can carry
any JSON value where a server should put text or a token count (NaN, "12",
null, 10 MB), so hostile responses are scripted per item.

With `sglang=FakeSGLang(...)` it also serves SGLang's own routes from
responses recorded from SGLang 0.5.23's source (tests/fixtures/sglang):
`/server_info` and its deprecated alias `/get_server_info`, `/metrics`, and
the per-request `sglext.spec_tokens_details` chunk; its speculative counters
move with every request it serves.

Streams go out as server-sent events in chunked transfer encoding; with a
`Pacing` their text chunks leave on a set schedule, and the server records
when each request arrived and each chunk left (`arrived_at`, `sent_at`,
`served_decode_tps`), the facts the speed tests compare the probe against.
`StreamScript` scripts a whole paced stream (tokens, reasoning, usage, a
mid-stream failure) for the speed probe's tests.

It is the one fake server of the tests and the benches: `python -m
tests.fake_openai --port P` runs it as a process, e.g. as a ladder step's
launch command, and `--instant` (with `start_process`) is the zero-latency
GSM8K server bench/harness_overhead.py times the client against (see `serve`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from harness.tasks.gsm8k import packaged_data_dir


MISSING = "<missing>"  # as a Reply field value: leave the key out of the response


@dataclass(frozen=True)
class Reply:
    """What the server answers. Fields typed Any take hostile values as they are (json.dumps writes NaN and
    Infinity as Python's json does); `MISSING` leaves the key out.

    Streamed, the reasoning then the text go out `words_per_chunk` words a chunk (speculative decoding emits
    several tokens at once), after a role-only first chunk when `role_chunk` (as vLLM sends); `extra` keys other
    than `usage` ride on the finish chunk (SGLang's `meta_info`). `stream_usage`: the completion_tokens of each
    usage chunk of a streamed reply (default: one chunk with the reply's count; `()`: none)."""

    text: Any
    finish_reason: Any = "stop"
    reasoning: str | None = None
    completion_tokens: Any = None  # default: whitespace word count
    prompt_tokens: Any = 20
    extra: dict[str, Any] = field(default_factory=dict)
    stream_usage: tuple[Any, ...] | None = None
    spec_verify_ct: int | None = None  # verify steps a speculative server spent on this reply
    words_per_chunk: int = 1
    role_chunk: bool = False


@dataclass(frozen=True)
class Fault:
    """kind: status | drop | malformed | truncated | short_length | empty_choices | several_choices | no_message |
    delay | stall | huge | bad_utf8 | no_usage | stream_disorder (streams: the finish chunk goes out before the text).

    `trickle` sends the reply's body in ten pieces `delay_s` apart: each read is quick, the whole one slow.
    `stall` sends nothing until the client hangs up (at most `STALL_CAP_S`), so only the client's own timeout ends
    the request, however busy the machine; the server then records the request's index in `hung_up`.

    Streams that break after `after` text chunks: stream_error (an error event, then [DONE]), stream_drop (the
    socket closes mid-body, as a crashed server's does), stream_no_done (the body ends without [DONE])."""

    kind: str
    status: int = 500
    retry_after: float | None = None
    delay_s: float = 0.0
    after: int = 0


STREAM_BREAKS = ("stream_error", "stream_drop", "stream_no_done")


@dataclass(frozen=True)
class Pacing:
    """When a streamed reply's text chunks leave: the first `ttft_s` after the request, then one every
    `interval_s`, against absolute deadlines so that a late wake-up on a busy machine delays one chunk, not all
    that follow. The server records when each really left (`sent_at`): the pacing served."""

    ttft_s: float = 0.0
    interval_s: float = 0.0


STALL_CAP_S = 300.0  # a stalled request a client never abandons still ends, so a broken test cannot hang forever

SGLANG_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sglang"


def sglang_fixture(name: str) -> Any:
    """A recorded SGLang response: `usage.json`, `server_info.json`, `stream_sglext.json` or `metrics.txt`."""
    text = (SGLANG_FIXTURES / name).read_text(encoding="utf-8")
    return json.loads(text) if name.endswith(".json") else text


@dataclass
class FakeSGLang:
    """SGLang's speculative-decoding state as its routes report it, moved by the requests served.

    `server_info` is a recorded `/server_info` payload whose first rank's
    `avg_spec_accept_length` (if any) stands for `accepted / verify_steps` so far
    (`verify_steps` gives the weight). Served tokens and verify steps are folded
    into that average only every `fold_every` verify steps, as SGLang folds them
    every `--decode-log-interval` decode batches. `routes`: the server-info
    routes that answer (older builds had only `/get_server_info`). `metrics`:
    serve `/metrics` (a server started with `--enable-metrics`).
    """

    server_info: dict[str, Any]
    verify_steps: int = 3000
    routes: tuple[str, ...] = ("/server_info", "/get_server_info")
    metrics: bool = True
    spec_details: bool = True  # answers `return_spec_tokens_details` (SGLang 0.5.23 does)
    fold_every: int = 1
    streamed_tokens: int = 0
    verify_calls: int = 0
    _accepted: float = 0.0
    _pending: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        average = self._states()[0].get("avg_spec_accept_length") if self._states() else None
        self._accepted = float(average) * self.verify_steps if average is not None else 0.0
        if average is None:
            self.verify_steps = 0

    @property
    def speculative(self) -> bool:
        """Whether the recorded server runs speculative decoding at all."""
        return bool(self.server_info.get("speculative_algorithm"))

    def _states(self) -> list[dict[str, Any]]:
        return self.server_info.get("internal_states") or []

    def served(self, tokens: int, verify: int | None, streamed: bool) -> None:
        """Count one finished request, as SGLang's tokenizer and scheduler do."""
        if streamed:
            self.streamed_tokens += tokens
        if not verify or not self.speculative:
            return
        self.verify_calls += verify
        tokens_pending, verify_pending = self._pending[0] + tokens, self._pending[1] + verify
        if verify_pending >= self.fold_every:
            self._accepted += tokens_pending
            self.verify_steps += verify_pending
            tokens_pending = verify_pending = 0
        self._pending = (tokens_pending, verify_pending)

    def info_now(self) -> dict[str, Any]:
        info = json.loads(json.dumps(self.server_info))
        if info.get("internal_states") and self.verify_steps:
            info["internal_states"][0]["avg_spec_accept_length"] = self._accepted / self.verify_steps
        return info

    def metrics_now(self) -> str:
        """The recorded /metrics text with this server's streamed-token and verify counters."""
        base = {"streamed": 1200.0, "verify": 18000.0}  # the recorded samples' values
        lines = []
        for line in sglang_fixture("metrics.txt").splitlines():
            if line.startswith('sglang:generation_tokens_total{') and 'is_streaming="true"' in line:
                line = f"{line.rsplit(' ', 1)[0]} {base['streamed'] + self.streamed_tokens}"
            elif line.startswith("sglang:spec_verify_calls_total{"):
                line = f"{line.rsplit(' ', 1)[0]} {base['verify'] + self.verify_calls}"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def spec_tokens_details(self, tokens: int, verify: int) -> dict[str, Any]:
        """The per-request `sglext` chunk's payload, shaped like the recorded one."""
        details = dict(sglang_fixture("stream_sglext.json")["chunk"]["sglext"]["spec_tokens_details"])
        draft = int(self.server_info.get("speculative_num_draft_tokens") or 1)
        proposed = verify * (draft - 1)
        details.update(spec_accept_length=tokens / verify, spec_verify_ct=verify,
                       spec_num_proposed_drafts=proposed, spec_num_correct_drafts=max(tokens - verify, 0),
                       spec_accept_rate=max(tokens - verify, 0) / proposed if proposed else 0.0)
        return details


Responder = Callable[[dict[str, Any]], Reply]
FaultPlan = Callable[[int, dict[str, Any]], "Fault | None"]


def echo_responder(body: dict[str, Any]) -> Reply:
    return Reply(text="The answer is 0.")


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-reply (Ctrl-C, a timeout) is normal here, not a traceback on stderr."""

    # socketserver's default backlog of 5 drops the connections of a 16-wide client while a busy machine delays
    # accept(); real servers queue far more (uvicorn 2048).
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeOpenAI:
    """Run with `with FakeOpenAI(...) as server:`; `server.base_url` ends in /v1."""

    def __init__(
        self,
        responder: Responder = echo_responder,
        models: tuple[str, ...] = ("fake-model",),
        faults: FaultPlan | None = None,
        latency_s: float = 0.0,
        sglang: bool | FakeSGLang = False,
        api_key: str | None = None,
        port: int = 0,
        pacing: Pacing | None = None,
    ) -> None:
        self.responder = responder
        self.pacing = pacing
        self.api_key = api_key  # when set, every route but /health answers 401 without `Authorization: Bearer <key>`
        self.authorized = 0  # requests that carried the key, when one is required
        self.models = models
        self.faults = faults
        self.latency_s = latency_s
        self.sglang = sglang
        self.requests: list[dict[str, Any]] = []
        self.gets: list[str] = []  # paths of GET requests, in order
        self.hung_up: list[int] = []  # indices (into `requests`) of stalled requests whose client gave up
        # Per request, as `time.perf_counter()`: when it arrived, and when each streamed text chunk left (the moment
        # its write began).
        self.arrived_at: list[float] = []
        self.sent_at: list[list[float]] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified on every request recorded
        self._server = _QuietServer(("127.0.0.1", port), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def admits(self, authorization: str | None) -> bool:
        """Whether a request with this Authorization header may pass; counts the ones that carried the key."""
        if self.api_key is None:
            return True
        with self._lock:
            if authorization == f"Bearer {self.api_key}":
                self.authorized += 1
                return True
        return False

    def record(self, body: dict[str, Any]) -> int:
        with self._lock:
            self.requests.append(body)
            self.arrived_at.append(time.perf_counter())
            self.sent_at.append([])
            self._arrived.notify_all()
            return len(self.requests) - 1

    def record_get(self, path: str) -> None:
        with self._lock:
            self.gets.append(path)
            self._arrived.notify_all()

    def served_decode_tps(self, request: int, tokens: int) -> float:
        """`tokens - 1` over the time between the first and last text chunk this server sent for `request`: the
        decode speed really served, which a busy machine can stretch past the pacing asked for."""
        times = self.sent_at[request]
        return (tokens - 1) / (times[-1] - times[0])

    def wait_until(self, condition: Callable[["FakeOpenAI"], bool], timeout_s: float = 120.0) -> bool:
        """Block until `condition(server)` holds, checked as each request arrives; False on timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: condition(self), timeout_s)


def _make_handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave as two writes: with Nagle's algorithm on, the client's delayed ACK held each
        # reply about 40 ms (a 120-item run took 0.87 s instead of 0.24 s). Real servers set TCP_NODELAY too.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def _refused(self) -> bool:
            """Answer 401 (as SGLang and vLLM do) when the server needs a key the request lacks."""
            if server.admits(self.headers.get("Authorization")):
                return False
            self._json(401, {"error": {"message": "Invalid API Key"}})
            return True

        def do_GET(self) -> None:
            server.record_get(self.path)
            if self.path == "/health":
                self._json(200, {})
            elif self._refused():
                return
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
            elif server.sglang and self.path == "/get_model_info":
                self._json(200, {"model_path": server.models[0], "is_generation": True})
            elif isinstance(server.sglang, FakeSGLang):
                self._sglang_get(server.sglang)
            elif server.sglang and self.path == "/get_server_info":
                # SGLang lists its server arguments here, the API key among them.
                self._json(200, {"version": "0.0-fake", "api_key": server.api_key,
                                 "internal_states": [{"avg_spec_accept_length": 2.5}]})
            else:
                self._json(404, {"error": "not found"})

        def _sglang_get(self, sglang: FakeSGLang) -> None:
            with server._lock:
                if self.path in sglang.routes:
                    self._json(200, sglang.info_now())
                elif self.path == "/model_info" and "/server_info" in sglang.routes:  # builds with the new routes
                    info = sglang.server_info
                    self._json(200, {k: info.get(k) for k in ("model_path", "served_model_name", "reasoning_parser")})
                elif self.path == "/metrics" and sglang.metrics:
                    self._raw(200, sglang.metrics_now().encode(), {"Content-Type": "text/plain; version=0.0.4"})
                else:
                    self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self._refused():
                return
            mode = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}.get(self.path)
            if mode is None:
                self._json(404, {"error": f"no route {self.path}"})
                return
            if isinstance(body, list) or isinstance(body.get("prompt"), list):
                count = len(body if isinstance(body, list) else body["prompt"])
                self._json(400, {"error": {"message": f"batched prompts ({count}) are not supported"}})
                return
            if body.get("model") not in server.models:
                self._json(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                return
            index = server.record(body)
            fault = server.faults(index, body) if server.faults else None
            if server.latency_s:
                time.sleep(server.latency_s)
            if fault is not None and fault.kind == "stall":
                self._stall(index)
                return
            if fault is not None and self._inject(fault):
                return
            reply = server.responder(body)
            payload = _payload(mode, body, reply, server.sglang)
            if fault is not None:
                _mangle(fault.kind, payload)
            if isinstance(server.sglang, FakeSGLang):
                with server._lock:
                    server.sglang.served(_count(reply), reply.spec_verify_ct, bool(body.get("stream")))
            if body.get("stream"):
                self._stream(mode, body, reply, index, fault)
            elif fault is not None and fault.kind == "trickle":
                self._trickle(json.dumps(payload).encode(), fault.delay_s)
            else:
                self._json(200, payload)

        def _trickle(self, data: bytes, gap_s: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            piece = -(-len(data) // 10)
            for start in range(0, len(data), piece):
                self.wfile.write(data[start:start + piece])
                self.wfile.flush()
                time.sleep(gap_s)

        def _stall(self, index: int) -> None:
            """Hold the request unanswered until the client closes the connection."""
            self.close_connection = True
            self.connection.settimeout(STALL_CAP_S)
            try:
                gave_up = self.connection.recv(1) == b""
            except (TimeoutError, OSError):
                gave_up = False
            if gave_up:
                with server._lock:
                    server.hung_up.append(index)
                    server._arrived.notify_all()

        def _inject(self, fault: Fault) -> bool:
            """Send the fault; True when the request is fully handled."""
            if fault.kind == "delay":
                time.sleep(fault.delay_s)
                return False
            if fault.kind == "status":
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                self._json(fault.status, {"error": {"message": "injected"}}, headers)
            elif fault.kind == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
            elif fault.kind == "malformed":
                self._raw(200, b'{"choices": [{"message": ')
            elif fault.kind == "truncated":
                # Promise a full body, send half of it, hang up: the client sees an incomplete message.
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "400")
                self.end_headers()
                self.wfile.write(b'{"choices": [{"message": {"role": "assistant", "content": "The ans')
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            elif fault.kind == "short_length":
                # Declare fewer bytes than are sent: the client reads a cut body. The connection is closed so the
                # rest cannot be read as the start of another item's response (a test sees each fault on its item).
                data = json.dumps(_payload("chat", {}, Reply(text="The answer is 7."), False)).encode()
                self._raw(200, data, {"Connection": "close"}, declared=len(data) // 2)
                self.close_connection = True
            elif fault.kind == "huge":
                self._raw(200, b'{"pad": "' + b"x" * (17 * 1024 * 1024) + b'"}')
            elif fault.kind == "bad_utf8":
                text = b'{"choices":[{"message":{"role":"assistant","content":"The answer is \xff\xfe 7."},'
                self._raw(200, text + b'"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":4}}')
            else:
                return False
            return True

        def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            self._raw(status, json.dumps(payload).encode(), headers)

        def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None,
                 declared: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) if declared is None else declared))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, mode: str, body: dict[str, Any], reply: Reply, index: int, fault: Fault | None) -> None:
            """Server-sent events in chunked transfer encoding, each flushed as it is written."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            start = time.perf_counter()
            head, text, tail = _stream_events(mode, body, reply, _sglext_chunks(server, body, reply))
            if fault is not None and fault.kind == "stream_disorder":  # the finish chunk first, then the text
                head, tail = [tail[0], *head], tail[1:]
            for event in head:
                self._event(event)
            pacing = server.pacing or Pacing()
            for number, event in enumerate(text):
                _sleep_until(start + pacing.ttft_s + number * pacing.interval_s)
                if fault is not None and fault.kind in STREAM_BREAKS and number >= fault.after:
                    self._break(fault.kind)
                    return
                # Stamped before the write: a client cannot read the chunk earlier, however late this thread runs
                # again after writing on a busy machine, so a probe's TTFT is never below the one served.
                leaving = time.perf_counter()
                self._event(event)
                with server._lock:
                    server.sent_at[index].append(leaving)
            for event in tail:
                self._event(event)
            self._event("[DONE]")
            self._write_chunk(b"")

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _event(self, event: dict[str, Any] | str) -> None:
            self._write_chunk(b"data: " + (event if isinstance(event, str) else json.dumps(event)).encode() + b"\n\n")

        def _break(self, kind: str) -> None:
            if kind == "stream_error":
                self._event({"error": {"message": "injected mid-stream failure", "code": 500}})
                self._event("[DONE]")
                self._write_chunk(b"")
            elif kind == "stream_no_done":
                self._write_chunk(b"")
            else:  # without the terminating chunk: the client sees a body cut short
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


def _tokens(reply: Reply) -> Any:
    if reply.completion_tokens is not None:
        return reply.completion_tokens
    return len(reply.text.split()) if isinstance(reply.text, str) else 0


def _count(reply: Reply) -> int:
    """The reply's token count when it is a plain count (hostile values count as 0)."""
    tokens = _tokens(reply)
    return tokens if type(tokens) is int else 0


def _present(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if not (isinstance(value, str) and value == MISSING)}


def _usage(reply: Reply, tokens: Any) -> dict[str, Any]:
    total = reply.prompt_tokens + tokens if all(type(v) is int for v in (reply.prompt_tokens, tokens)) else None
    return _present(prompt_tokens=reply.prompt_tokens, completion_tokens=tokens, total_tokens=total)


def _payload(mode: str, body: dict[str, Any], reply: Reply, sglang: bool | FakeSGLang) -> dict[str, Any]:
    tokens = _tokens(reply)
    if mode == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        choice: dict[str, Any] = _present(index=0, message=message, finish_reason=reply.finish_reason)
    else:
        choice = _present(index=0, text=reply.text, finish_reason=reply.finish_reason)
    payload: dict[str, Any] = {
        "id": "cmpl-fake",
        "object": "chat.completion" if mode == "chat" else "text_completion",
        "model": body.get("model"),
        "choices": [choice],
        "usage": _usage(reply, tokens),
        **reply.extra,
    }
    if sglang is True and type(tokens) is int:  # the plain flag's stand-in; FakeSGLang answers as SGLang 0.5.23
        payload["meta_info"] = {"completion_tokens": tokens, "spec_verify_ct": max(tokens // 2, 1)}
    return payload


def _mangle(kind: str, payload: dict[str, Any]) -> None:
    """Break a well-formed payload the way `kind` says (faults that still send a 200 with JSON)."""
    if kind == "empty_choices":
        payload["choices"] = []
    elif kind == "several_choices":
        payload["choices"] = [payload["choices"][0], {**payload["choices"][0], "index": 1}]
    elif kind == "no_message":
        payload["choices"][0].pop("message", None)
    elif kind == "no_usage":
        payload.pop("usage")


def _usage_chunks(body: dict[str, Any], reply: Reply) -> int:
    if not (body.get("stream_options") or {}).get("include_usage"):
        return 0
    return len(reply.stream_usage) if reply.stream_usage is not None else 1


def _sglext_chunks(server: FakeOpenAI, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """SGLang's per-request statistics chunk, when the request asks for it and the server has some."""
    sglang = server.sglang
    if not (isinstance(sglang, FakeSGLang) and sglang.speculative and sglang.spec_details
            and body.get("return_spec_tokens_details") and reply.spec_verify_ct):
        return []
    details = sglang.spec_tokens_details(_count(reply), reply.spec_verify_ct)
    return [{"id": "cmpl-fake", "object": "chat.completion.chunk", "model": body.get("model"), "choices": [],
             "sglext": {"spec_tokens_details": details}}]


def _stream_events(
    mode: str, body: dict[str, Any], reply: Reply, closing: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The data events of a streamed reply, as (before the text, the text chunks, after the text): the role chunk
    if any; reasoning then text, `words_per_chunk` words each; the finish chunk, `closing` (SGLang's statistics
    chunk), then the usage chunks asked for."""
    def chunk(fields: dict[str, Any]) -> dict[str, Any]:
        return {"id": "cmpl-fake", "object": "chunk", "model": body.get("model"), "choices": [{"index": 0, **fields}]}

    chat = mode == "chat"
    head = [chunk({"delta": {"role": "assistant", "content": ""}})] if chat and reply.role_chunk else []
    thinking = _word_groups(reply.reasoning, reply.words_per_chunk) if chat and reply.reasoning else []
    text = [chunk({"delta": {"reasoning_content": words}}) for words in thinking]
    text += [chunk({"delta": {"content": words}} if chat else {"text": words})
             for words in _word_groups(reply.text if isinstance(reply.text, str) else "", reply.words_per_chunk)]
    finish = chunk({"delta": {}, "finish_reason": reply.finish_reason} if chat
                   else {"text": "", "finish_reason": reply.finish_reason})
    finish.update({key: value for key, value in reply.extra.items() if key != "usage"})
    if reply.stream_usage is None and "usage" in reply.extra:  # a recorded usage object, as the reply carries it
        usages = [reply.extra["usage"]]
    else:
        counts = reply.stream_usage if reply.stream_usage is not None else (_tokens(reply),)
        usages = [_usage(reply, count) for count in counts]
    tail = [finish, *closing] + [{"id": "cmpl-fake", "object": "chunk", "choices": [], "usage": usage}
                                 for usage in usages[: _usage_chunks(body, reply)]]
    return head, text, tail


def _word_groups(text: str, size: int) -> list[str]:
    """`text` cut into chunks of `size` words, each word followed by its space."""
    words = [word + " " for word in text.split(" ")]
    return ["".join(words[start:start + size]) for start in range(0, len(words), size)]


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


# -- a paced stream ----------------------------------------------------------------


@dataclass(frozen=True)
class StreamScript:
    """Every completion request answered with `n_tokens` tokens ("t0 t1 ...") streamed at a set pace: the
    speed probe's scripted server, built on `FakeOpenAI` by `server()`.

    - `tokens_per_chunk > 1` mimics speculative decoding emitting several tokens at once.
    - `reasoning_tokens`: the first N tokens go out as `reasoning_content`.
    - `usage`: send usage when the request asks for it; `usage_tokens` overrides the count.
    - `fail_after`: after that many text chunks, break the stream as `fail_mode` (a `Fault` kind in
      `STREAM_BREAKS`) says; only on the requests numbered in `fail_requests` (0-based) when that is given.
    - `status`: answer every request with this HTTP status instead.
    - `role_chunk`: a role-only first chunk with empty content, as vLLM sends.
    A request's `max_tokens` below `n_tokens` cuts the reply there with finish_reason "length", as a real server does.
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
    fail_mode: str = "stream_error"
    fail_requests: tuple[int, ...] | None = None
    status: int = 200
    role_chunk: bool = True

    def reply(self, body: dict[str, Any]) -> Reply:
        cap = body.get("max_tokens")
        n, finish = (cap, "length") if isinstance(cap, int) and cap < self.n_tokens else (self.n_tokens, None)
        words = [f"t{k}" for k in range(n)]
        thinking = min(self.reasoning_tokens, n)
        return Reply(text=" ".join(words[thinking:]), reasoning=" ".join(words[:thinking]) or None,
                     finish_reason=finish or self.finish_reason,
                     completion_tokens=self.usage_tokens if self.usage_tokens is not None else n,
                     stream_usage=None if self.usage else (), words_per_chunk=self.tokens_per_chunk,
                     extra={"meta_info": self.meta_info} if self.meta_info is not None else {},
                     role_chunk=self.role_chunk)

    def fault(self, request: int, body: dict[str, Any]) -> Fault | None:
        if self.status != 200:
            return Fault("status", self.status)
        if self.fail_after is None or (self.fail_requests is not None and request not in self.fail_requests):
            return None
        return Fault(self.fail_mode, after=self.fail_after)

    def server(self) -> FakeOpenAI:
        """The scripted server, not yet started (`with script.server() as server:`)."""
        return FakeOpenAI(self.reply, faults=self.fault, pacing=Pacing(self.ttft_s, self.interval_s))


# -- GSM8K oracle ---------------------------------------------------------------

GSM8K_DIR = packaged_data_dir()
GSM8K_TEST_FILE = GSM8K_DIR / "test.jsonl.gz"


def gsm8k_rows(path: Path = GSM8K_TEST_FILE) -> list[dict[str, str]]:
    """Every row of a GSM8K JSONL file (gzip-compressed when it ends in .gz), read without the task's loader."""
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")) as f:
        return [json.loads(line) for line in f if line.strip()]


def gsm8k_answers(path: Path = GSM8K_TEST_FILE) -> dict[str, str]:
    """question text -> gold number, from the reference solutions."""
    return {row["question"]: row["answer"].rpartition("####")[2].strip().replace(",", "") for row in gsm8k_rows(path)}


def question_of(body: dict[str, Any]) -> str:
    """The GSM8K question inside a chat or few-shot completion request."""
    if "messages" in body:
        text = body["messages"][-1]["content"]
        return text.split("\n\n", 1)[1] if "\n\n" in text else text
    return re.split(r"Question: ", body["prompt"])[-1].rsplit("\nAnswer:", 1)[0]


def gsm8k_oracle(wrong: Callable[[str], bool], tokens: Callable[[str], int] | None = None) -> Responder:
    """Answers every question correctly except those for which `wrong(question)` is true."""
    answers = gsm8k_answers()

    def respond(body: dict[str, Any]) -> Reply:
        question = question_of(body)
        gold = answers.get(question)
        if gold is None:  # a speed probe's chat or warm-up prompt
            return Reply(text="Sure. Here is a short answer to that request.", completion_tokens=9)
        value = str(int(gold) + 1) if wrong(question) else gold
        n = tokens(question) if tokens else 10 + len(question) % 50
        return Reply(text=f"Let me think. Some steps. The answer is {value}.", completion_tokens=n)

    return respond


def gsm8k_reference(path: Path = GSM8K_TEST_FILE) -> Responder:
    """Every question of the file at `path` answered right in both forms graders read ("The answer is N." and
    GSM8K's "#### N"), anything else with 0: what the benches time a client against."""
    answers = gsm8k_answers(path)

    def respond(body: dict[str, Any]) -> Reply:
        gold = answers.get(question_of(body), "0")
        return Reply(text=f" Adding it up. The answer is {gold}.\n#### {gold}", completion_tokens=12,
                     prompt_tokens=100)

    return respond


# -- as a launched server ---------------------------------------------------------

KEY_ENV = "FAKE_OPENAI_API_KEY"
READY = "fake OpenAI server on port"


def start_process(*options: str) -> tuple[subprocess.Popen[str], str]:
    """Run the server as its own process (`serve`'s options, on a free port); (the process, its base URL once it
    listens). The caller stops it."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "tests.fake_openai", "--port", "0", *options], cwd=root,
                            env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith(READY):
        proc.kill()
        raise RuntimeError(f"the fake OpenAI server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[-1])}/v1"


def serve(argv: list[str]) -> None:
    """Serve the GSM8K oracle (every answer right) on `--port` (0: a free one) until killed; print
    "fake OpenAI server on port N" once it listens. `--instant`: answer in GSM8K's reference form from
    `--data` (see `gsm8k_reference`), for benches.

    With `--fork-child` a forked child keeps the listening socket open, as the
    worker processes of a multi-process server (SGLang) do: stopping only the
    leader does not free the port. `--pid-file` gets the leader's pid and the
    child's, one a line, once the server listens. The server requires the key in
    $FAKE_OPENAI_API_KEY when that is set (a key never goes on a command line);
    `--env-report` gets the names of the variables it was started with.
    """
    parser = argparse.ArgumentParser(prog="python -m tests.fake_openai")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--instant", action="store_true", help="answer in GSM8K's reference form, for benches")
    parser.add_argument("--data", type=Path, default=GSM8K_TEST_FILE, help="the GSM8K file --instant answers from")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--fork-child", action="store_true")
    parser.add_argument("--pid-file")
    parser.add_argument("--sglang", action="store_true", help="also answer SGLang's info routes")
    parser.add_argument("--env-report")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM, as a hung server does")
    args = parser.parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the forked child inherits it
    if args.env_report:
        Path(args.env_report).write_text(json.dumps(sorted(os.environ)))
    responder = gsm8k_reference(args.data) if args.instant else gsm8k_oracle(lambda question: False)
    server = FakeOpenAI(responder, latency_s=args.latency, port=args.port,
                        sglang=args.sglang, api_key=os.environ.get(KEY_ENV) or None)
    pids = [os.getpid()]
    if args.fork_child:
        child = os.fork()  # before any thread starts
        if child == 0:
            while True:
                signal.pause()
        pids.append(child)
    if args.pid_file:
        Path(args.pid_file).write_text("".join(f"{pid}\n" for pid in pids))
    with server:
        print(f"{READY} {server.port}", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    serve(sys.argv[1:])
