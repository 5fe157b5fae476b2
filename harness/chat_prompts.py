"""Chat prompts for the chat workload of the speed probe.

Three sources, in the order they are tried:

1. a dataset name or directory given to `datasets.load_dataset` (a
   ShareGPT-style set: `conversations` of `{"from", "value"}` turns, or
   `messages`/`conversation` of `{"role", "content"}` turns);
2. a local JSONL file in any of those shapes (or `{"prompt": "..."}`);
3. the built-in set shipped in `harness/data/chat_prompts.jsonl`, everyday
   assistant requests written for this project, so the probe works offline.

Each record becomes a single-turn request: any leading system turns plus the
first user turn. Later turns are dropped because batch-1 speed is measured on
one exchange. Every prompt keeps its `origin`, so a report can say which
source was used, including when an unreachable dataset fell back to the
built-in set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from harness.errors import UserError

logger = logging.getLogger(__name__)

BUILTIN_ORIGIN = "builtin"
_ROLE_OF = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


class ChatPromptError(UserError):
    """A chat prompt source cannot be read."""


@dataclass(frozen=True)
class ChatPrompt:
    """One chat request: its messages and where it came from."""

    prompt_id: str
    messages: tuple[dict[str, str], ...]
    origin: str


def messages_from_record(record: Mapping[str, Any]) -> tuple[dict[str, str], ...] | None:
    """Leading system turns plus the first user turn of one record; None if it has no user turn."""
    if isinstance(record.get("prompt"), str) and record["prompt"].strip():
        return ({"role": "user", "content": record["prompt"]},)
    turns = record.get("messages") or record.get("conversations") or record.get("conversation") or []
    kept: list[dict[str, str]] = []
    for turn in turns:
        role = _ROLE_OF.get(str(turn.get("role", turn.get("from", ""))).lower())
        content = turn.get("content", turn.get("value"))
        if role == "system" and isinstance(content, str):
            kept.append({"role": "system", "content": content})
        elif role == "user" and isinstance(content, str) and content.strip():
            kept.append({"role": "user", "content": content})
            return tuple(kept)
        elif role is not None:
            break  # an assistant turn before any user turn: not a usable opening
    return None


def _prompts_from_records(
    records: Iterable[Mapping[str, Any]], origin: str, limit: int | None, max_chars: int | None
) -> list[ChatPrompt]:
    prompts: list[ChatPrompt] = []
    for position, record in enumerate(records):
        if limit is not None and len(prompts) >= limit:
            break
        messages = messages_from_record(record)
        if messages is None:
            continue
        if max_chars is not None and sum(len(m["content"]) for m in messages) > max_chars:
            continue
        prompt_id = str(record.get("id") or f"{Path(origin).name}-{position}")
        prompts.append(ChatPrompt(prompt_id=prompt_id, messages=messages, origin=origin))
    return prompts


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ChatPromptError(f"{path}:{number} is not valid JSON: {exc}") from exc


def builtin_prompts_path() -> Path:
    """Where the built-in chat prompt set lives."""
    return Path(str(resources.files("harness") / "data" / "chat_prompts.jsonl"))


def _load_builtin(limit: int | None, max_chars: int | None) -> list[ChatPrompt]:
    return _prompts_from_records(_read_jsonl(builtin_prompts_path()), BUILTIN_ORIGIN, limit, max_chars)


def _load_dataset_records(name: str, split: str, data_files: str | None) -> Iterable[Mapping[str, Any]]:
    """Stream records through `datasets` so a large set is not downloaded whole."""
    import datasets  # heavy import, only when a dataset is asked for

    return datasets.load_dataset(name, split=split, data_files=data_files, streaming=True)


def load_chat_prompts(
    source: str | None = None,
    limit: int | None = None,
    split: str = "train",
    data_files: str | None = None,
    max_chars: int | None = None,
    strict: bool = False,
) -> list[ChatPrompt]:
    """Chat prompts from `source`: a JSONL file, a `datasets` name or directory, or the built-in set.

    With no `source` the built-in set is used. A `datasets` source that cannot
    be loaded (offline, unknown name) falls back to the built-in set with a
    warning, or raises `ChatPromptError` when `strict`. `max_chars` skips
    prompts longer than that, so one huge paste does not dominate TTFT.
    """
    if source is None:
        return _load_builtin(limit, max_chars)
    path = Path(source)
    if path.is_file():
        return _prompts_from_records(_read_jsonl(path), str(path), limit, max_chars)
    if not path.exists() and (path.suffix in (".jsonl", ".json") or source.startswith((".", "/", "~"))):
        raise ChatPromptError(f"chat prompts file {source} does not exist; give a JSONL file of chat prompts, "
                              "a datasets name, or leave --chat-data out for the built-in set")
    try:
        records = _load_dataset_records(source, split, data_files)
        prompts = _prompts_from_records(records, source, limit, max_chars)
    except Exception as exc:  # datasets raises many unrelated types for "cannot load"
        if strict:
            raise ChatPromptError(f"cannot load chat prompts from dataset {source!r}: {exc}") from exc
        logger.warning("cannot load chat dataset %r (%s); using the built-in chat prompts", source, exc)
        return _load_builtin(limit, max_chars)
    if not prompts:
        raise ChatPromptError(f"dataset {source!r} (split {split!r}) has no record with a user turn")
    return prompts
