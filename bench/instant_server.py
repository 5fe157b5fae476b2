"""An instant OpenAI-compatible server for benchmarks: asyncio, HTTP/1.1 keep-alive, no framework.

Answers every GSM8K question it recognises correctly (`#### N` and "The answer
is N."), in both chat and completions form, and anything else with 0. It does
no work beyond parsing the request, so a benchmark against it measures the
client side. Run it as its own process so it does not share the client's GIL:

    python bench/instant_server.py --port 0 --data harness/data/gsm8k/test.jsonl.gz

It prints `READY <port>` on stdout once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

MODEL = "fake-model"
_LAST_QUESTION = re.compile(r"Question: (.*?)\nAnswer:", re.S)


def load_answers(path: Path) -> dict[str, str]:
    """question text -> gold number."""
    answers = {}
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    for line in text.splitlines():
        row = json.loads(line)
        answers[row["question"].strip()] = row["answer"].rpartition("####")[2].strip().replace(",", "")
    return answers


def find_question(body: dict[str, Any]) -> str:
    """The GSM8K question in a chat message (after the instruction) or the last one in a few-shot prompt."""
    if "messages" in body:
        text = str(body["messages"][-1].get("content", ""))
        return text.split("\n\n", 1)[-1].strip()
    found = _LAST_QUESTION.findall(str(body.get("prompt", "")))
    return found[-1].strip() if found else ""


def reply(path: str, body: dict[str, Any], answers: dict[str, str]) -> dict[str, Any]:
    gold = answers.get(find_question(body), "0")
    text = f" Adding it up. The answer is {gold}.\n#### {gold}"
    usage = {"prompt_tokens": 100, "completion_tokens": 12, "total_tokens": 112}
    if path.endswith("/chat/completions"):
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "stop"}
        kind = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
        kind = "text_completion"
    return {"id": "cmpl-instant", "object": kind, "created": 0, "model": MODEL, "choices": [choice], "usage": usage}


def route(method: str, path: str, raw: bytes, answers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    if method == "GET" and path == "/v1/models":
        return 200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
    if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
        body = json.loads(raw or b"{}")
        if isinstance(body, list) or isinstance(body.get("prompt"), list):
            prompts = body if isinstance(body, list) else body["prompt"]
            return 400, {"error": {"message": f"batched prompts ({len(prompts)}) are not supported"}}
        return 200, reply(path, body, answers)
    return 404, {"error": {"message": f"no route {method} {path}"}}


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           answers: dict[str, str]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            status, payload = route(method, path, raw, answers)
            data = json.dumps(payload).encode()
            writer.write(b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                         % (status, b"OK" if status == 200 else b"Error", len(data)) + data)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(port: int, data: Path) -> None:
    answers = load_answers(data)
    server = await asyncio.start_server(lambda r, w: serve_connection(r, w, answers), "127.0.0.1", port,
                                        backlog=256)
    sys.stdout.write(f"READY {server.sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(main(args.port, args.data))
