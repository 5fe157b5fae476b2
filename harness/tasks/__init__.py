"""Benchmark tasks by name."""

from __future__ import annotations

from harness.tasks.base import (
    DEFAULT_ITEMS, TASK_TITLES, TEST_SET_SIZE, PromptTemplate, Task, TaskError, default_items_text, pick_template,
)

# The speed workload whose batch-1 timing applies to each task's answers. Chat is a workload with no task of
# its own (its prompts are a chat set) whose accuracy stands in from a task; this map is the one place to say so.
TASK_WORKLOAD = {"gsm8k": "math", "humaneval": "code"}
TASK_NAMES = tuple(TASK_WORKLOAD)
WORKLOADS = ("math", "code", "chat")


def workload_of(task: str) -> str:
    """The speed workload (math, code, chat) a task's outputs are timed with; chat for a task not listed."""
    return TASK_WORKLOAD.get(task, "chat")


def task_of(workload: str) -> str | None:
    """The task whose prompts a workload's speed is measured on; None for chat (a chat prompt set)."""
    return next((task for task, w in TASK_WORKLOAD.items() if w == workload), None)


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


__all__ = [
    "DEFAULT_ITEMS", "TASK_NAMES", "TASK_TITLES", "TASK_WORKLOAD", "TEST_SET_SIZE", "WORKLOADS", "PromptTemplate", "Task",
    "TaskError", "default_items_text", "get_task", "pick_template", "task_of", "workload_of",
]
