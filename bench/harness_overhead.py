"""Harness overhead: evalsvc against a bare asyncio HTTP client and against lm-eval.

Starts the tests' fake OpenAI server (tests/fake_openai.py, `--instant`: no latency, every
GSM8K answer right) in its own process, then, in one invocation:

1. a bare httpx.AsyncClient posts the 400 GSM8K request bodies evalsvc would
   send, at the same concurrency, and parses each reply (nothing stored);
2. `run_evaluation` (in process) loads, sends, scores and stores the same 400
   items in a fresh SQLite file;
3. `evalsvc run` and lm-eval's `local-completions` model run end to end as
   commands on the same 400 questions against the same server.

(1) and (2) alternate `--repeats` times; medians are printed with the ratio
(target: evalsvc <= 1.5x bare). lm-eval runs from its own venv (default
~/.cache/evalsvc/peer-venv) on a local copy of GSM8K through a task file that
includes lm-eval's own gsm8k.yaml and points it at the JSONL files.

    .venv/bin/python bench/harness_overhead.py [--n 400] [--concurrency 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db.engine import open_store  # noqa: E402
from evalsvc.run.runner import RunSpec, run_evaluation  # noqa: E402
from harness.client import EndpointClient  # noqa: E402
from harness.tasks import get_task, pick_template  # noqa: E402
from harness.tasks.gsm8k import packaged_data_dir  # noqa: E402
from harness.types import DecodingSettings  # noqa: E402
from tests.fake_openai import start_process  # noqa: E402

GSM8K_TEST = packaged_data_dir() / "test.jsonl.gz"
PEER_VENV = Path.home() / ".cache" / "evalsvc" / "peer-venv"
TEMPLATE = "fewshot-completion"  # lm-eval's local-completions speaks /v1/completions too
N_SHOT = 8


class Server(NamedTuple):
    proc: subprocess.Popen[str]
    base_url: str


def start_server(data: Path) -> Server:
    """Its own process, so that it does not share the client's GIL."""
    return Server(*start_process("--instant", "--data", str(data)))


def request_bodies(n: int, data: Path) -> list[dict[str, Any]]:
    """The exact JSON bodies evalsvc sends for the first n items (built outside any timing)."""
    task = get_task("gsm8k")
    template = pick_template(task, TEMPLATE)
    client = EndpointClient("http://unused", "fake-model")
    return [client.build_body(template.build(s), DecodingSettings()) for s in task.load_samples(str(data), n)]


class Timing(NamedTuple):
    wall_s: float
    cpu_s: float  # this process's CPU time: steadier than wall time on a shared, loaded machine


async def bare_run(base_url: str, bodies: list[dict[str, Any]], concurrency: int) -> Timing:
    """Time for a plain httpx client to post every body and parse every reply."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    limiter = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as http:
        async def one(body: dict[str, Any]) -> str:
            async with limiter:
                resp = await http.post(f"{base_url}/completions", json=body)
                resp.raise_for_status()
                return resp.json()["choices"][0]["text"]

        start, cpu = time.perf_counter(), time.process_time()
        texts = await asyncio.gather(*(one(b) for b in bodies))
        elapsed = Timing(time.perf_counter() - start, time.process_time() - cpu)
    assert len(texts) == len(bodies)
    return elapsed


def evalsvc_run(base_url: str, data: Path, n: int, concurrency: int, workdir: Path, tag: str) -> tuple[Timing, str]:
    """Time for evalsvc to load, send, score and store n items in a fresh SQLite file; and a summary."""
    store = open_store(str(workdir / f"overhead-{tag}.db"))
    spec = RunSpec(endpoint="instant", base_url=base_url, model="fake-model", task="gsm8k", template=TEMPLATE,
                   data=str(data), limit=n, concurrency=concurrency)
    start, cpu = time.perf_counter(), time.process_time()
    outcome = run_evaluation(store, spec, progress=False)
    elapsed = Timing(time.perf_counter() - start, time.process_time() - cpu)
    store.dispose()
    s = outcome.summary
    assert s.n == n and s.errors == 0, f"evalsvc run incomplete: {s}"
    return elapsed, f"{s.correct}/{s.n} correct"


def evalsvc_cli(base_url: str, data: Path, n: int, concurrency: int, workdir: Path) -> float:
    """Wall seconds of the `evalsvc run` command, start-up included."""
    args = [sys.executable, "-m", "evalsvc.cli", "run", "--endpoint", "instant", "--url", base_url,
            "--model", "fake-model", "--data", str(data), "--limit", str(n), "--template", TEMPLATE,
            "--concurrency", str(concurrency), "--db", str(workdir / "cli.db"), "--no-progress"]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def lm_eval_task_dir(venv: Path, data: Path, workdir: Path) -> Path:
    """A task folder whose yaml includes lm-eval's own gsm8k.yaml, reading local JSONL instead of the hub."""
    packaged = sorted(venv.glob("lib/python*/site-packages/lm_eval/tasks/gsm8k/gsm8k.yaml"))
    if not packaged:
        raise FileNotFoundError(f"no lm_eval/tasks/gsm8k/gsm8k.yaml under {venv}")
    folder = workdir / "lm_eval_tasks"
    folder.mkdir(exist_ok=True)
    (folder / "gsm8k_local.yaml").write_text(
        f"include: {packaged[0]}\ntask: gsm8k_local\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    train: {data.with_name(data.name.replace('test', 'train'))}\n    test: {data}\n"
    )
    return folder


def lm_eval_run(base_url: str, data: Path, n: int, concurrency: int, venv: Path, workdir: Path) -> tuple[float, str]:
    """Wall seconds of `lm_eval` with local-completions on the same questions; and its gsm8k scores line."""
    tasks = lm_eval_task_dir(venv, data, workdir)
    model_args = (f"model=fake-model,base_url={base_url}/completions,num_concurrent={concurrency},"
                  "max_retries=3,tokenized_requests=False,tokenizer_backend=None")
    args = [str(venv / "bin" / "lm_eval"), "--model", "local-completions", "--model_args", model_args,
            "--tasks", "gsm8k_local", "--include_path", str(tasks), "--limit", str(n),
            "--num_fewshot", str(N_SHOT), "--batch_size", "1"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=workdir)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"lm_eval exited {done.returncode}: {done.stderr.strip().splitlines()[-3:]}")
    return elapsed, ", ".join(_exact_match_scores(done.stdout)) or "no exact_match line in its output"


def _exact_match_scores(table: str) -> list[str]:
    """`filter exact_match=value` for each row of lm-eval's results table."""
    scores = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if "exact_match" in cells:
            at = cells.index("exact_match")
            scores.append(f"{cells[at - 2]} exact_match={cells[at + 2]}")
    return scores


def measure_pair(server: Server, bodies: list[dict[str, Any]], args: argparse.Namespace, workdir: Path) -> None:
    bare_times, evalsvc_times, scored = [], [], ""
    for i in range(args.repeats):
        bare_times.append(asyncio.run(bare_run(server.base_url, bodies, args.concurrency)))
        timing, scored = evalsvc_run(server.base_url, args.data, args.n, args.concurrency, workdir, str(i))
        evalsvc_times.append(timing)
    bare, ours = _median(bare_times), _median(evalsvc_times)
    print(f"bare httpx client : wall {bare.wall_s:6.2f} s, cpu {bare.cpu_s:6.2f} s  ({_fmt(bare_times)})")
    print(f"evalsvc in-process: wall {ours.wall_s:6.2f} s, cpu {ours.cpu_s:6.2f} s  ({_fmt(evalsvc_times)}; "
          f"{scored}, stored)")
    print(f"ratio evalsvc/bare: wall {ours.wall_s / bare.wall_s:5.2f}x, cpu {ours.cpu_s / bare.cpu_s:5.2f}x  "
          "(target <= 1.5x; medians of {args.repeats} alternating repeats)".replace("{args.repeats}", str(args.repeats)))


def measure_peer(server: Server, args: argparse.Namespace, workdir: Path) -> None:
    ours = evalsvc_cli(server.base_url, args.data, args.n, args.concurrency, workdir)
    print(f"evalsvc run (CLI) : {ours:6.2f} s  end to end, start-up included")
    if args.skip_peer:
        print("lm-eval           : skipped (--skip-peer)")
        return
    try:
        theirs, scores = lm_eval_run(server.base_url, args.data, args.n, args.concurrency, args.peer_venv, workdir)
    except (OSError, RuntimeError) as exc:
        print(f"lm-eval           : could not run here: {exc}")
        return
    print(f"lm-eval local-completions: {theirs:6.2f} s  end to end ({scores})")
    print(f"ratio lm-eval/evalsvc: {theirs / ours:6.2f}x  (above 1 means evalsvc is faster)")


def _median(timings: list[Timing]) -> Timing:
    return Timing(statistics.median(t.wall_s for t in timings), statistics.median(t.cpu_s for t in timings))


def _fmt(timings: list[Timing]) -> str:
    return "wall/cpu each: " + ", ".join(f"{t.wall_s:.2f}/{t.cpu_s:.2f}" for t in timings)


def main() -> None:
    parser = argparse.ArgumentParser(description="evalsvc harness overhead vs a bare client and lm-eval")
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=GSM8K_TEST)
    parser.add_argument("--peer-venv", type=Path, default=PEER_VENV)
    parser.add_argument("--skip-peer", action="store_true", help="Do not run lm-eval.")
    args = parser.parse_args()
    server = start_server(args.data)
    print(f"{args.n} GSM8K requests ({TEMPLATE}), concurrency {args.concurrency}, server {server.base_url}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    try:
        bodies = request_bodies(args.n, args.data)
        with tempfile.TemporaryDirectory(prefix="evalsvc-overhead-") as tmp:
            measure_pair(server, bodies, args, Path(tmp))
            measure_peer(server, args, Path(tmp))
    finally:
        server.proc.kill()
        server.proc.wait()


if __name__ == "__main__":
    main()
