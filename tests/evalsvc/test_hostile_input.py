"""Hostile and malformed input: bad dataset files, colliding item ids, SQL-looking
names and text, huge or broken endpoint responses. Each gives a clear error or a
marked, intact row; nothing stored is corrupted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from db.engine import open_store
from evalsvc.run.runner import BadItemId, RunSpec, run_evaluation
from harness.client import MAX_BODY_BYTES
from tests.conftest import run_cli
from tests.fake_openai import Fault, FakeOpenAI, Reply

pytestmark = pytest.mark.usefixtures("quick_backoff")  # retried items wait less; the same attempts

SQL_NAME = "step'); DROP TABLE runs; --"
SQL_QUESTION = "How many? '; DELETE FROM items WHERE '1'='1'; -- \" OR 1=1 /* %s :x */"


def write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def run_args(server: FakeOpenAI, db: str, data: str, endpoint: str = "step1") -> list[str]:
    return ["run", "--endpoint", endpoint, "--url", server.base_url, "--model", "fake-model", "--data", data,
            "--db", db, "--no-progress", "--json"]


def stored_runs(db: str) -> int:
    if not Path(db).exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("select count(*) from runs").fetchone()[0]


GOOD = {"question": "What is 3+4?", "answer": "3+4=7\n#### 7"}


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([GOOD, GOOD, '{"question": "broken', GOOD], "line 3 is not valid JSON"),
        ([GOOD, "[1, 2]"], "line 2 is not a JSON object"),
        ([GOOD, {"question": "no answer field"}], "row 2 lacks string fields 'question' and 'answer'"),
        ([GOOD, {"question": "Q?", "answer": "no marker here"}], "has no '#### N' answer"),
        ([{"question": 12, "answer": "#### 1"}], "row 1 lacks string fields"),
        ([GOOD, '{"question": "lone \\ud800 half", "answer": "#### 1"}'], "line 2 field 'question' holds an unpaired"),
    ],
)
def test_bad_dataset_lines_are_a_one_line_error_and_store_nothing(
    tmp_path: Path, db_path: str, rows: list[Any], message: str
) -> None:
    data = write_jsonl(tmp_path / "test.jsonl", rows)
    with FakeOpenAI() as server:
        result = run_cli(*run_args(server, db_path, data))
        assert server.requests == []
    assert result.exit_code == 2 and message in result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1
    assert stored_runs(db_path) == 0


def humaneval_row(task_id: str) -> dict[str, str]:
    return {"task_id": task_id, "prompt": "def f():\n", "canonical_solution": "    return 1\n",
            "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (["HumanEval/0", "HumanEval/1", "HumanEval/0"], "item id 'HumanEval/0' twice (rows 1 and 3)"),
        (["HumanEval/0", "x" * 101], "row 2 has an item id of 101 characters; at most 100 fit the store"),
    ],
)
def test_colliding_or_oversized_item_ids_are_refused_before_any_request(
    tmp_path: Path, db_path: str, ids: list[str], message: str
) -> None:
    data = write_jsonl(tmp_path / "HumanEval.jsonl", [humaneval_row(i) for i in ids])
    store = open_store(db_path)
    with FakeOpenAI() as server:
        spec = RunSpec(endpoint="e", base_url=server.base_url, model="fake-model", task="humaneval", data=data)
        with pytest.raises(BadItemId, match=message.replace("(", r"\(").replace(")", r"\)")):
            run_evaluation(store, spec, progress=False)
        assert server.requests == []
    assert stored_runs(db_path) == 0


def test_sql_looking_endpoint_name_and_question_are_stored_verbatim(tmp_path: Path, db_path: str) -> None:
    data = write_jsonl(tmp_path / "test.jsonl", [GOOD, {"question": SQL_QUESTION, "answer": "#### 7"}])
    with FakeOpenAI(lambda body: Reply(text="The answer is 7.")) as server:
        ran = run_cli(*run_args(server, db_path, data, endpoint=SQL_NAME))
        sent = [body["messages"][0]["content"] for body in server.requests]
    assert ran.exit_code == 0, ran.output
    assert any(content.endswith(SQL_QUESTION) for content in sent)
    runs = json.loads(run_cli("runs", "--db", db_path, "--json").stdout)["runs"]
    shown = json.loads(run_cli("show", SQL_NAME, "--db", db_path, "--json").stdout)
    assert [(r["endpoint"], r["n"], r["correct"]) for r in runs] == [(SQL_NAME, 2, 2)]
    assert shown["endpoint"] == SQL_NAME and shown["run_id"] == runs[0]["run_id"]
    with sqlite3.connect(db_path) as conn:
        requests = [json.loads(r[0]) for r in conn.execute("select request from items order by item_id")]
        assert conn.execute("select name from endpoints").fetchall() == [(SQL_NAME,)]
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    assert requests[1]["messages"][0]["content"].endswith(SQL_QUESTION)


MARKERS = ("HUGE", "BADUTF8", "SURROGATE", "NULBYTE")


def hostile_faults(_: int, body: dict[str, Any]) -> Fault | None:
    content = body["messages"][0]["content"]
    return Fault("huge") if "HUGE" in content else Fault("bad_utf8") if "BADUTF8" in content else None


def hostile_reply(body: dict[str, Any]) -> Reply:
    content = body["messages"][0]["content"]
    if "SURROGATE" in content:
        return Reply(text="The answer is 7. \ud800")
    if "NULBYTE" in content:
        return Reply(text="The answer is 7.\x00")
    return Reply(text="The answer is 7.")


def test_huge_and_broken_responses_become_marked_rows(tmp_path: Path, db_path: str) -> None:
    rows = [{"question": f"Plain question {k}?", "answer": "#### 7"} for k in range(12)]
    rows += [{"question": f"Question {m}?", "answer": "#### 7"} for m in MARKERS]
    data = write_jsonl(tmp_path / "test.jsonl", rows)
    with FakeOpenAI(hostile_reply, faults=hostile_faults) as server:
        result = run_cli(*run_args(server, db_path, data))
        huge_requests = sum("HUGE" in b["messages"][0]["content"] for b in server.requests)
    out = json.loads(result.stdout)["runs"][0]
    assert result.exit_code == 0, result.output
    assert (out["n"], out["errors"], out["correct"]) == (len(rows), 1, len(rows) - 1)
    with sqlite3.connect(db_path) as conn:
        by_marker = {m: conn.execute("select status, completion, error, attempts from items where request like ?",
                                     (f"%Question {m[:4]}%",)).fetchone() for m in MARKERS}
        assert conn.execute("pragma integrity_check").fetchone()[0] == "ok"
    status, completion, error, attempts = by_marker["HUGE"]
    assert status == "error" and completion == "" and attempts == 1 and huge_requests == 1
    assert f"{17 * 1024 * 1024 + 11} bytes is too large" in error and MAX_BODY_BYTES < 17 * 1024 * 1024
    assert by_marker["BADUTF8"][:2] == ("ok", "The answer is \ufffd\ufffd 7.")
    assert by_marker["SURROGATE"][:2] == ("ok", "The answer is 7. \ufffd")
    assert by_marker["NULBYTE"][:2] == ("ok", "The answer is 7.\ufffd")
