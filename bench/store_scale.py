"""Store at scale: `evalsvc compare` and `evalsvc report` on a store of many runs.

Builds a SQLite store with bulk inserts: `--endpoints` endpoints (25), each
with a GSM8K run of 400 items and a HumanEval run of 164 items (564 items per
endpoint), repeated `--repeats` times (2): 100 runs and 28,200 item rows by
default, with realistic completion and request texts. Then times, in process
(the command's own work, interpreter start-up excluded) and as a command:

- `evalsvc compare step00 step01` (target < 0.5 s)
- `evalsvc report --endpoints step00,...,step04` (target < 2 s)

    .venv/bin/python bench/store_scale.py [--endpoints 25] [--repeats 2] [--db PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from click.testing import CliRunner
from sqlalchemy import insert

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db.engine import Store, open_store  # noqa: E402
from db.models import Endpoint, Item, Run, utcnow  # noqa: E402
from harness.types import stable_hash  # noqa: E402

TASKS = {"gsm8k": (400, "zeroshot-chat@v1"), "humaneval": (164, "chat-codeblock@v1")}
LADDER = 5
TEXT = ("Let me work through this step by step. First we add the numbers, then we subtract what was spent. "
        * 8)[:800]


def build_store(store: Store, n_endpoints: int, repeats: int, seed: int = 7) -> int:
    """Insert the endpoints, runs and items in a few large transactions; returns the item rows written."""
    rng = random.Random(seed)
    written = 0
    with store.engine.begin() as conn:
        for e in range(n_endpoints):
            endpoint_id = conn.execute(insert(Endpoint.__table__).values(
                name=f"step{e:02d}", base_url=f"http://127.0.0.1:{30000 + e}/v1", model="model",
                fingerprint={}, metadata={}, created_at=utcnow())).inserted_primary_key[0]
            accuracy = 0.8 - 0.01 * e
            for task, (n_items, template) in TASKS.items():
                for repeat in range(repeats):
                    run_id = conn.execute(insert(Run.__table__).values(run_values(endpoint_id, task, template,
                                                                                  n_items, repeat)))
                    rows = list(item_rows(run_id.inserted_primary_key[0], task, n_items, accuracy, rng))
                    conn.execute(insert(Item.__table__), rows)
                    written += len(rows)
    return written


def run_values(endpoint_id: int, task: str, template: str, n_items: int, repeat: int) -> dict[str, Any]:
    now = utcnow()
    return {"endpoint_id": endpoint_id, "task": task, "template": template, "mode": "chat",
            "decoding": {"temperature": 0.0, "top_p": 1.0, "seed": 1234, "max_tokens": 2048},
            "config_hash": stable_hash(task, template), "dataset_hash": stable_hash(task), "n_items": n_items,
            "repeat": repeat, "status": "complete", "error": None, "started_at": now, "finished_at": now}


def item_rows(run_id: int, task: str, n_items: int, accuracy: float, rng: random.Random) -> Iterator[dict[str, Any]]:
    created = utcnow()
    for i in range(n_items):
        item_id = f"{task}/test/{i:04d}" if task == "gsm8k" else f"HumanEval/{i}"
        correct = rng.random() < accuracy
        tokens = rng.randint(80, 600)
        yield {"run_id": run_id, "item_id": item_id, "item_hash": stable_hash(item_id), "status": "ok",
               "correct": correct, "reference": "42", "extracted": "42" if correct else "41",
               "extracted_strict": None, "extracted_flexible": None, "request": TEXT, "completion": TEXT,
               "reasoning": None, "prompt_tokens": 120, "completion_tokens": tokens, "reasoning_tokens": None,
               "finish_reason": "stop", "truncated": False, "latency_s": tokens / 50, "attempts": 1,
               "error": None, "detail": {}, "created_at": created}


def time_in_process(args: list[str], repeats: int) -> tuple[float, list[float]]:
    """Median seconds of the CLI command run in this process (start-up excluded), after one warm-up."""
    from evalsvc.cli import main

    runner = CliRunner()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = runner.invoke(main, args, catch_exceptions=False)
        times.append(time.perf_counter() - start)
        if result.exit_code != 0:
            raise RuntimeError(f"evalsvc {' '.join(args)} failed: {result.output}")
    return statistics.median(times[1:]), times


def time_command(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "evalsvc.cli", *args], check=True, capture_output=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def report(label: str, args: list[str], target_s: float, repeats: int) -> None:
    median, times = time_in_process(args, repeats)
    command = time_command(args)
    verdict = "meets" if median < target_s else "MISSES"
    print(f"{label}: {median:.3f} s in process (median of {repeats}; first call {times[0]:.3f} s), "
          f"{verdict} target < {target_s} s; as a command with start-up: {command:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description="compare/report timings on a large store")
    parser.add_argument("--endpoints", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=2, help="Runs per endpoint and task.")
    parser.add_argument("--timing-repeats", type=int, default=5)
    parser.add_argument("--db", type=Path, help="Store file to create (default: a temporary file).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="evalsvc-scale-") as tmp:
        path = args.db or Path(tmp) / "scale.db"
        store = open_store(str(path))
        start = time.perf_counter()
        rows = build_store(store, args.endpoints, args.repeats)
        runs = args.endpoints * len(TASKS) * args.repeats
        print(f"built {runs} runs, {rows} item rows ({path.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - start:.1f} s; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        db = ["--db", str(path)]
        report("compare step00 step01", ["compare", "step00", "step01", *db], 0.5, args.timing_repeats)
        ladder = ",".join(f"step{i:02d}" for i in range(LADDER))
        report(f"report over {LADDER} steps", ["report", "--endpoints", ladder, *db], 2.0, args.timing_repeats)
        store.dispose()


if __name__ == "__main__":
    main()
