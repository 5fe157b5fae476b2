"""Benchmark tasks by name."""

from __future__ import annotations

from harness.tasks.base import PromptTemplate, Task, TaskError, pick_template

TASK_NAMES = ("gsm8k", "humaneval")


def get_task(name: str, isolation: str = "bwrap") -> Task:
    """The task called `name`; imports lazily so GSM8K never loads the sandbox.
    `isolation` is how HumanEval sandboxes programs (see `harness.sandbox`)."""
    if name == "gsm8k":
        from harness.tasks.gsm8k import GSM8K

        return GSM8K()
    if name == "humaneval":
        from harness.tasks.humaneval import HumanEval

        return HumanEval(isolation=isolation)  # type: ignore[arg-type]
    raise TaskError(f"unknown task {name!r}; choose one of: {', '.join(TASK_NAMES)}, all")


__all__ = ["TASK_NAMES", "PromptTemplate", "Task", "TaskError", "get_task", "pick_template"]
