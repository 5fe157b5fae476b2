"""What every benchmark task provides to the runner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from harness.errors import UserError
from harness.types import Completion, ItemResult, Mode, Request, Sample


# Items in each task's test set (more items can never be asked for), and how many a run evaluates when no
# --limit is given: GSM8K's first 400 of 1,319 test questions, all 164 HumanEval problems.
TEST_SET_SIZE = {"gsm8k": 1319, "humaneval": 164}
DEFAULT_ITEMS = {"gsm8k": 400, "humaneval": 164}
TASK_TITLES = {"gsm8k": "GSM8K", "humaneval": "HumanEval"}  # how a sentence names the benchmark


def default_items_text() -> str:
    """'400 GSM8K, 164 HumanEval': what a run evaluates per task by default, for help texts."""
    return ", ".join(f"{n} {TASK_TITLES[task]}" for task, n in DEFAULT_ITEMS.items())


class TaskError(UserError):
    """A task cannot be set up (missing data file, unknown template)."""


@dataclass(frozen=True)
class PromptTemplate:
    """A named, versioned way to turn a sample into a request.

    The version is part of the run's config hash: changing a template's text
    means bumping its version, so old and new runs are never paired silently.
    """

    name: str
    version: int
    mode: Mode
    build: Callable[[Sample], Request]

    @property
    def key(self) -> str:
        return f"{self.name}@v{self.version}"


class Task(Protocol):
    name: str
    score_blocks: bool  # True when scoring waits on something (a sandbox): the runner then scores in a thread
    templates: dict[str, PromptTemplate]
    default_template: str
    isolation: str | None  # the sandbox scoring runs in, None when scoring runs no code

    def prepare(self) -> None:
        """Check, before the first item, that scoring works here; raise a TaskError-like domain error if not."""

    def load_samples(self, data: str | None = None, limit: int | None = None) -> list[Sample]: ...

    def score(self, sample: Sample, completion: Completion) -> ItemResult: ...


def pick_template(task: Task, name: str | None) -> PromptTemplate:
    """The template called `name` (with or without its version, as in `fewshot-completion@v1`), or the default."""
    key = name or task.default_template
    by_key = {template.key: template for template in task.templates.values()}
    found = task.templates.get(key) or by_key.get(key)
    if found is None:
        raise TaskError(
            f"task {task.name!r} has no prompt template {key!r}; choose one of: {', '.join(sorted(by_key))}"
        )
    return found
