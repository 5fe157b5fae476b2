"""A scripted OpenAI-compatible server over real HTTP on 127.0.0.1.

Test double for the runner: it speaks `/v1/models`, `/v1/chat/completions` and
`/v1/completions` (plain and streamed), reports usage and finish_reason, and
injects faults chosen by the test: HTTP errors, Retry-After, dropped
connections, malformed JSON, empty choices, slow replies, huge or invalid-UTF-8
bodies.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from harness.tasks.gsm8k import packaged_data_dir


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str = "stop"
    reasoning: str | None = None
    completion_tokens: int | None = None  # default: whitespace word count
    prompt_tokens: int = 20
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fault:
    """kind: status | drop | malformed | truncated | empty_choices | delay | huge | bad_utf8 | no_usage."""

    kind: str
    status: int = 500
    retry_after: float | None = None
    delay_s: float = 0.0


Responder = Callable[[dict[str, Any]], Reply]
FaultPlan = Callable[[int, dict[str, Any]], "Fault | None"]


def echo_responder(body: dict[str, Any]) -> Reply:
    return Reply(text="The answer is 0.")


class FakeOpenAI:
    """Run with `with FakeOpenAI(...) as server:`; `server.base_url` ends in /v1."""

    def __init__(
        self,
        responder: Responder = echo_responder,
        models: tuple[str, ...] = ("fake-model",),
        faults: FaultPlan | None = None,
        latency_s: float = 0.0,
        sglang: bool = False,
    ) -> None:
        self.responder = responder
        self.models = models
        self.faults = faults
        self.latency_s = latency_s
        self.sglang = sglang
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

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

    def record(self, body: dict[str, Any]) -> int:
        with self._lock:
            self.requests.append(body)
            return len(self.requests) - 1


def _make_handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
            elif server.sglang and self.path == "/get_model_info":
                self._json(200, {"model_path": server.models[0], "is_generation": True})
            elif server.sglang and self.path == "/get_server_info":
                self._json(200, {"version": "0.0-fake", "internal_states": [{"avg_spec_accept_length": 2.5}]})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            mode = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}.get(self.path)
            if mode is None:
                self._json(404, {"error": f"no route {self.path}"})
                return
            if body.get("model") not in server.models:
                self._json(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                return
            index = server.record(body)
            fault = server.faults(index, body) if server.faults else None
            if server.latency_s:
                time.sleep(server.latency_s)
            if fault is not None and self._inject(fault):
                return
            reply = server.responder(body)
            payload = _payload(mode, body, reply, server.sglang)
            if fault is not None and fault.kind == "empty_choices":
                payload["choices"] = []
            if fault is not None and fault.kind == "no_usage":
                payload.pop("usage")
            if body.get("stream"):
                self._stream(mode, reply)
            else:
                self._json(200, payload)

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

        def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, mode: str, reply: Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for word in reply.text.split(" "):
                delta = {"delta": {"content": word + " "}} if mode == "chat" else {"text": word + " "}
                self.wfile.write(b"data: " + json.dumps({"choices": [{"index": 0, **delta}]}).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    return Handler


def _payload(mode: str, body: dict[str, Any], reply: Reply, sglang: bool) -> dict[str, Any]:
    tokens = reply.completion_tokens if reply.completion_tokens is not None else len(reply.text.split())
    if mode == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
    else:
        choice = {"index": 0, "text": reply.text, "finish_reason": reply.finish_reason}
    payload: dict[str, Any] = {
        "id": "cmpl-fake",
        "object": "chat.completion" if mode == "chat" else "text_completion",
        "model": body.get("model"),
        "choices": [choice],
        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": tokens,
                  "total_tokens": reply.prompt_tokens + tokens},
        **reply.extra,
    }
    if sglang:
        payload["meta_info"] = {"completion_tokens": tokens, "spec_verify_ct": max(tokens // 2, 1)}
    return payload


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
