"""The embedded CPU ladder end to end through the CLI: build (or reuse) the engine,
launch each real SmolLM2 step, evaluate a handful of GSM8K items, stop it, compare.
Slow (a real model on the CPU), run in CI."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from db import queries
from db.engine import open_store
from evalsvc.decision.build import build_ladder
from evalsvc.decision.workload import Choice, ReasonKind
from evalsvc.engine.demo import (
    DEMO_CHAT_MAX_TOKENS, DEMO_MAX_TOKENS, DEMO_SPEED_N, chat_cut_line, demo_plan, embedded_ladder_path,
)
from evalsvc.engine.embedded import LADDER_SETUPS
from evalsvc.ladder.file import load_ladder
from evalsvc.ladder.run import prepare_ladder, run_ladder
from tests.conftest import ENGINE_GROUP, GSM8K_TEST, free_port, run_cli_process

pytestmark = ENGINE_GROUP

STEPS = ["q4_1", "q4_1+prompt-lookup", "q4_0-pure+prompt-lookup"]


def on_free_ports(folder: Path) -> Path:
    """The shipped embedded ladder with its fixed ports swapped for free ones, so that two suites on one machine
    never meet on 8391-8393 (the demo keeps the shipped file)."""
    text = embedded_ladder_path().read_text(encoding="utf-8")
    fixed = sorted(set(re.findall(r"127\.0\.0\.1:(\d+)", text)))
    chosen: set[int] = set()
    while len(chosen) < len(fixed):
        chosen.add(free_port())
    for port, free in zip(fixed, sorted(chosen)):
        text = re.sub(rf"\b{port}\b", str(free), text)
    path = folder / "embedded-cpu.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_copy_on_free_ports_differs_from_the_shipped_ladder_only_in_its_ports(tmp_path: Path) -> None:
    shipped, copy = load_ladder(embedded_ladder_path()), load_ladder(on_free_ports(tmp_path))
    ports = [int(re.search(r":(\d+)/", step.base_url).group(1)) for step in copy.steps]
    assert [s.name for s in copy.steps] == [s.name for s in shipped.steps] == STEPS
    assert len(set(ports)) == 3 and not {8391, 8392, 8393} & set(ports)
    for step, port in zip(copy.steps, ports):
        assert step.launch is not None and f"--port {port}" in " ".join(step.launch.command)
        assert step.launch.health_url == f"http://127.0.0.1:{port}/v1/models"


@pytest.mark.slow
def test_embedded_ladder_runs_three_real_steps_then_reuses_them(db_path: str, tmp_path: Path) -> None:
    args = ["ladder", "run", str(on_free_ports(tmp_path)), "--task", "gsm8k", "--limit", "3",
            "--max-tokens", "192", "--concurrency", "1", "--data", GSM8K_TEST, "--db", db_path, "--json"]
    first = run_cli_process(*args, timeout=1500)
    assert first.returncode == 0, first.stderr[-3000:]
    out = json.loads(first.stdout)
    assert [s["step"] for s in out["steps"]] == STEPS
    assert all(s["error"] is None and len(s["run_ids"]) == 1 and not s["reused"] for s in out["steps"])
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("select status, count(*), count(completion_tokens), min(completion_tokens) "
                            "from items group by status").fetchall()
        fingerprints = [json.loads(f) for (f,) in conn.execute("select fingerprint from endpoints")]
    assert rows and rows[0][0] == "ok" and rows[0][1] == 9 and rows[0][2] == 9 and rows[0][3] > 0
    assert all(fp["models"] == ["smollm2-135m-instruct"] for fp in fingerprints)
    pairs = [(c["step_a"], c["step_b"]) for c in out["report"]["comparisons"]]
    assert ("q4_1", "q4_1+prompt-lookup") in pairs and ("q4_1+prompt-lookup", "q4_0-pure+prompt-lookup") in pairs
    assert all(c["n_paired"] == 3 for c in out["report"]["comparisons"])

    second = run_cli_process(*args, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)["steps"]
    assert all(s["reused"] == ["gsm8k"] for s in again)
    assert [s["run_ids"] for s in again] == [s["run_ids"] for s in out["steps"]]


@pytest.mark.slow
def test_the_demo_chat_probe_decides_chat_on_the_q4_1_steps_and_says_why_not_next_to_the_looping_one(
    db_path: str, tmp_path: Path
) -> None:
    """The demo's chat probe (its prompts and caps) on the real steps: on both Q4_1 steps SmolLM2 ends every answer
    below the cap, so that chat decision pairs real lengths (at the old cap of 128 every answer was cut and every chat
    decision read "can't tell yet"); the pure Q4_0 step's answers run to the cap, so its chat decision is refused
    for that reason and the demo's line says so, naming only that step."""
    ladder = prepare_ladder(load_ladder(on_free_ports(tmp_path)), LADDER_SETUPS)
    plan = replace(demo_plan(False, None, "process", DEMO_MAX_TOKENS), tasks=(), speed_workloads=("chat",))
    store = open_store(db_path)
    outcomes = run_ladder(store, ladder, plan, tmp_path / "logs", progress=False)
    assert [o.error for o in outcomes] == [None, None, None]
    with store.session() as session:
        finishes = {}
        for name in STEPS:
            run = queries.latest_speed_run(session, queries.get_endpoint(session, name).id, "chat")
            assert run is not None and run.max_tokens == DEMO_CHAT_MAX_TOKENS
            samples = [s for _, s in queries.speed_samples(session, run.id)]
            assert len(samples) == DEMO_SPEED_N and all(s.ok for s in samples)
            finishes[name] = [(s.output_tokens, s.finish_reason) for s in samples]
    assert all(f == "stop" and n < DEMO_CHAT_MAX_TOKENS for n, f in finishes[STEPS[0]] + finishes[STEPS[1]]), finishes
    assert any(f == "length" for _, f in finishes[STEPS[2]]), finishes
    first, second = [next(w for w in pair.workloads if w.workload == "chat") for pair in build_ladder(store, STEPS).decisions]
    assert first.truncated == (0, 0) and first.tokens is not None
    assert ReasonKind.TRUNCATED not in {r.kind for r in first.reasons}
    assert second.truncated is not None and second.truncated[0] == 0 and second.truncated[1] > 0
    assert second.choice is Choice.CANT_TELL and ReasonKind.TRUNCATED in {r.kind for r in second.reasons}
    line = chat_cut_line(store, STEPS)
    assert line is not None and line.startswith(f"chat: can't tell yet next to {STEPS[2]}: ")
    assert f"answers of {STEPS[2]} ran to the chat probe's {DEMO_CHAT_MAX_TOKENS}-token cap" in line
    assert STEPS[0] not in line.replace(STEPS[2], "") and "what would settle it" in line
    store.dispose()
