"""HumanEval end to end: the real problems, the real sandbox."""

from __future__ import annotations

import ast
import gzip
import json
import sys
from pathlib import Path

import pytest

from harness.code_extract import Extracted, build_program
from harness.sandbox import Program, run_many
from harness.tasks import get_task, pick_template, workload_of
from harness.tasks import humaneval as humaneval_module
from harness.tasks.humaneval import SOLUTION_IMPORTS, STOP_SEQUENCES, TEST_IMPORTS, HumanEval, HumanEvalDataError
from harness.types import Completion, stable_hash
from tests.conftest import needs_bwrap


@pytest.fixture(scope="module")
def samples() -> list:
    return HumanEval().load_samples()


def _programs(samples: list, body: str | None) -> list[Program]:
    """Each problem with its canonical body, or with `body` in its place."""
    programs = []
    for s in samples:
        code = build_program(
            s.prompt, Extracted(body if body is not None else s.reference, "body"), s.metadata["entry_point"]
        )
        programs.append(Program(code, s.metadata["test"], s.metadata["entry_point"], s.prompt))
    return programs


def test_loads_the_164_packaged_problems(samples: list) -> None:
    assert len(samples) == 164
    first = samples[0]
    assert (first.task, first.item_id) == ("humaneval", "HumanEval/0")
    assert first.item_hash == stable_hash(first.prompt, first.metadata["test"], "has_close_elements")
    assert first.metadata["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in first.metadata["test"]
    assert len({s.item_hash for s in samples}) == 164


# 'process' starts an interpreter per program: slow on two cores.
ISOLATIONS = [pytest.param("bwrap", marks=needs_bwrap), pytest.param("process", marks=pytest.mark.slow)]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_canonical_solutions_all_pass(samples: list, isolation: str) -> None:
    results = run_many(_programs(samples, None), isolation=isolation)
    failures = {s.item_id: r for s, r in zip(samples, results) if not r.passed}
    assert failures == {}
    assert {r.isolation for r in results} == {isolation}


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("body", ["    pass\n", ""], ids=["pass", "prompt-only"])
def test_every_problem_fails_against_an_empty_body(samples: list, body: str, isolation: str) -> None:
    results = run_many(_programs(samples, body), isolation=isolation)
    passes = [s.item_id for s, r in zip(samples, results) if r.passed]
    assert passes == []
    # An empty body must fail in the test, not crash the sandbox.
    assert {r.outcome for r in results} <= {"failed", "error", "syntax_error"}


def test_loads_a_local_jsonl_gz_with_limit(tmp_path: Path, samples: list) -> None:
    rows = [
        {"task_id": s.item_id, "prompt": s.prompt, "canonical_solution": s.reference,
         "test": s.metadata["test"], "entry_point": s.metadata["entry_point"]}
        for s in samples[:3]
    ]  # fmt: skip
    path = tmp_path / "mini.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(json.dumps(r) for r in rows) + "\n")
    loaded = HumanEval().load_samples(str(path), limit=2)
    assert [s.item_id for s in loaded] == ["HumanEval/0", "HumanEval/1"]
    assert [s.item_hash for s in loaded] == [s.item_hash for s in samples[:2]]


def test_bad_data_files_raise_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(HumanEvalDataError, match="does not exist"):
        HumanEval().load_samples(str(tmp_path / "missing.jsonl"))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"task_id": "x", "prompt": "p"}\n')
    with pytest.raises(HumanEvalDataError, match=r"line 1 lacks string fields: canonical_solution, test, entry_point"):
        HumanEval().load_samples(str(broken))


def test_templates(samples: list) -> None:
    task = get_task("humaneval")
    assert (task.name, workload_of(task.name), task.default_template) == ("humaneval", "code", "chat-codeblock")
    chat = pick_template(task, None)
    assert chat.key == "chat-codeblock@v1"
    request = chat.build(samples[0])
    assert request.mode == "chat"
    assert "```python\n" + samples[0].prompt + "```" in request.messages[0]["content"]
    raw = pick_template(task, "completion-raw")
    assert raw.key == "completion-raw@v1"
    request = raw.build(samples[0])
    assert (request.mode, request.prompt, request.stop) == ("completions", samples[0].prompt, STOP_SEQUENCES)


def test_score_end_to_end(samples: list) -> None:
    task = HumanEval()
    add = next(s for s in samples if s.metadata["entry_point"] == "add")
    chat = "Sure!\n\n```python\ndef add(x: int, y: int):\n    return x + y\n```\n\nThis adds the numbers."
    raw = "    return x + y\n\n\ndef main():\n    pass\n"
    wrong = "```python\ndef add(x, y):\n    return x - y\n```"
    hostile = "```python\nimport sys\ndef add(x, y):\n    sys.exit(0)\n```"
    texts = {"chat": chat, "raw": raw, "wrong": wrong, "hostile": hostile, "prose": "I cannot help."}
    results = {name: task.score(add, Completion(text=text)) for name, text in texts.items()}
    assert {k: r.passed for k, r in results.items()} == {
        "chat": True, "raw": True, "wrong": False, "hostile": False, "prose": False
    }  # fmt: skip
    assert results["chat"].detail["outcome"] == "passed"
    assert results["chat"].extracted.startswith(add.prompt.rstrip())
    assert results["wrong"].detail["outcome"] == "failed"
    assert results["wrong"].detail["error_type"] == "AssertionError"
    assert results["hostile"].detail["outcome"] == "exited"
    assert (results["prose"].detail["outcome"], results["prose"].extracted) == ("no_code", None)


def _imported_modules(sources: list[str]) -> set[str]:
    found = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_the_self_check_imports_every_module_solutions_and_tests_import(samples: list) -> None:
    """The hard-coded lists the sandbox self-check imports are what the data imports (prompts + canonical bodies; tests)."""
    assert set(SOLUTION_IMPORTS) == _imported_modules([s.prompt + s.reference for s in samples])
    assert set(TEST_IMPORTS) == _imported_modules([s.metadata["test"] for s in samples])
    assert set(SOLUTION_IMPORTS) | set(TEST_IMPORTS) <= set(sys.stdlib_module_names)


@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_self_check_passes_here(isolation: str) -> None:
    """On this machine (root, interpreter under a 0700 home) both isolations import what solutions need."""
    task = HumanEval(isolation=isolation)
    humaneval_module._checked.discard(isolation)
    task.prepare()
    assert isolation in humaneval_module._checked
