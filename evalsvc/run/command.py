"""`evalsvc run` as a person types it and as another program drives it (the dashboard's background jobs).

What a run can evaluate and its defaults (the tasks, the prompt templates, how many items, the output cap, the
GSM8K data a run reads), how the API key reaches the command without showing on its command line, and the one
line the command ends with when it fails: the command line and the dashboard's Evaluate page both read them here.
"""

from __future__ import annotations

import os

from harness.client import API_KEY_ENV
from harness.errors import ERROR_LABEL
from harness.tasks import TASK_NAMES, default_items_text
from harness.tasks.gsm8k import DATA_ENV as GSM8K_DATA_ENV
from harness.types import DecodingSettings

__all__ = ["API_KEY_ENV", "DEFAULT_MAX_TOKENS", "GSM8K_DATA_ENV", "TASK_NAMES", "data_in_environment",
           "default_items_text", "error_line", "key_environment", "task_list", "template_choices"]

DEFAULT_MAX_TOKENS = DecodingSettings().max_tokens  # the output cap a run asks for unless told otherwise


def task_list(task: str) -> list[str]:
    """The tasks a `--task` value names: every task for "all", else the one given."""
    return list(TASK_NAMES) if task == "all" else [task]


def template_choices() -> dict[str, list[str]]:
    """Per task, the prompt templates `evalsvc run --template` accepts (name@version)."""
    from harness.tasks import get_task

    return {task: [t.key for t in get_task(task).templates.values()] for task in TASK_NAMES}


def data_in_environment() -> str:
    """Where a run reads GSM8K from when not given `--data`: the value of `GSM8K_DATA_ENV`, else ""."""
    return os.environ.get(GSM8K_DATA_ENV, "")


def key_environment(api_key: str | None) -> dict[str, str]:
    """The environment variable that hands a run its API key (a command line is visible to every local user)."""
    return {API_KEY_ENV: api_key} if api_key else {}


def error_line(log_text: str) -> str | None:
    """The command's own last `error:` line in its output (it says what went wrong and what to do), if any."""
    head = f"{ERROR_LABEL}: "
    found = [line for line in log_text.splitlines() if line.startswith(head)]
    return found[-1].removeprefix(head) if found else None
