"""GSM8K: grade-school math word problems (Cobbe et al., 2021, "Training
Verifiers to Solve Math Word Problems").

Greedy decoding on the first 400 test questions by default. Gold answers are
the number after `####` in the reference solution. Two extractions are kept
for every completion: strict (`#### N`, "The answer is N", `\\boxed{N}`, the
forms our templates ask for) and flexible (the last number in the text, as
lm-evaluation-harness's flexible-extract filter does). Scoring uses strict
when it finds something and falls back to flexible otherwise; both are stored.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import IO

from harness.tasks.base import DEFAULT_ITEMS, PromptTemplate, TaskError
from harness.types import Completion, ItemResult, Request, Sample, stable_hash

HUB_DATASET = ("openai/gsm8k", "main")
HUB_SOURCE = "hub"  # `--data hub`: load HUB_DATASET through `datasets` instead of a file
DATA_ENV = "EVALSVC_GSM8K_DATA"
DEFAULT_LIMIT = DEFAULT_ITEMS["gsm8k"]
N_SHOT = 8

_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?"
_STRICT_PATTERNS = (
    re.compile(r"####\s*(" + _NUMBER + ")"),
    re.compile(r"[Tt]he (?:final )?answer is[:\s]*\**\s*(" + _NUMBER + ")"),
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"),
)
_ANY_NUMBER = re.compile(_NUMBER)
_CALCULATOR = re.compile(r"<<[^>]*>>")


class GSM8KDataError(TaskError):
    """The GSM8K data could not be found or read."""


def normalize_number(raw: str) -> str | None:
    """Canonical text of a number: no `$`, commas or spaces; `18.0` -> `18`, `-0` -> `0`."""
    cleaned = raw.replace("$", "").replace(",", "").replace(" ", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_strict(text: str) -> str | None:
    """The answer in one of the explicit forms; the last occurrence wins."""
    for pattern in _STRICT_PATTERNS:
        matches = pattern.findall(text)
        if matches:
            return normalize_number(matches[-1])
    return None


def extract_flexible(text: str) -> str | None:
    """The last number anywhere in the text."""
    for match in reversed(_ANY_NUMBER.findall(text)):
        number = normalize_number(match)
        if number is not None:
            return number
    return None


def extract_answer(text: str) -> tuple[str | None, str | None, str | None]:
    """(designated, strict, flexible): strict when present, otherwise flexible."""
    strict = extract_strict(text)
    flexible = extract_flexible(text)
    return (strict if strict is not None else flexible), strict, flexible


def gold_answer(solution: str) -> str:
    """The number after `####` in a GSM8K reference solution."""
    _, sep, tail = solution.rpartition("####")
    number = normalize_number(tail.strip()) if sep else None
    if number is None:
        raise GSM8KDataError(f"reference solution has no '#### N' answer: {solution[-80:]!r}")
    return number


# -- prompt templates -------------------------------------------------------

_ZERO_SHOT_INSTRUCTION = (
    "Solve the following math problem. Think step by step, then give the final "
    "answer on its own last line in the form \"The answer is N.\" where N is a number.\n\n"
)


def _zero_shot_chat(sample: Sample) -> Request:
    return Request(mode="chat", messages=({"role": "user", "content": _ZERO_SHOT_INSTRUCTION + sample.prompt},))


def _few_shot_prefix(exemplars: list[dict[str, str]]) -> str:
    blocks = [f"Question: {ex['question']}\nAnswer: {_CALCULATOR.sub('', ex['answer'])}" for ex in exemplars]
    return "\n\n".join(blocks) + "\n\n"


class GSM8K:
    """The GSM8K task: loading, prompting and scoring."""

    name = "gsm8k"
    score_blocks = False  # a regex: cheaper inline than a thread hop
    isolation = None  # scoring runs no code
    default_template = "zeroshot-chat"

    def __init__(self) -> None:
        self._data: str | None = None
        self._exemplars: list[dict[str, str]] | None = None
        self.templates = {
            "zeroshot-chat": PromptTemplate("zeroshot-chat", 1, "chat", _zero_shot_chat),
            "fewshot-completion": PromptTemplate("fewshot-completion", 1, "completions", self._few_shot_completion),
        }

    def prepare(self) -> None:
        """Nothing to check: scoring is a regex."""

    def load_samples(self, data: str | None = None, limit: int | None = None) -> list[Sample]:
        """The first `limit` test questions (400 when None), from `data`, else $EVALSVC_GSM8K_DATA,
        else the copy shipped in this package (see `load_split`)."""
        self._data = data or os.environ.get(DATA_ENV)
        rows = load_split("test", self._data, DEFAULT_LIMIT if limit is None else limit)
        return [self._to_sample(i, row) for i, row in enumerate(rows)]

    def score(self, sample: Sample, completion: Completion) -> ItemResult:
        designated, strict, flexible = extract_answer(completion.text)
        return ItemResult(
            passed=designated is not None and designated == sample.reference,
            extracted=designated,
            extracted_strict=strict,
            extracted_flexible=flexible,
            detail={"extraction": "strict" if strict is not None else "flexible"},
        )

    def _to_sample(self, index: int, row: dict[str, str]) -> Sample:
        question, solution = row["question"], row["answer"]
        return Sample(
            task=self.name,
            item_id=f"gsm8k/test/{index:04d}",
            item_hash=stable_hash(question, solution),
            prompt=question,
            reference=gold_answer(solution),
            metadata={"solution": solution},
        )

    def _few_shot_completion(self, sample: Sample) -> Request:
        if self._exemplars is None:
            # Exemplars come from the train split only, so no test item can leak into a prompt.
            self._exemplars = load_split("train", self._data, N_SHOT)
        prompt = _few_shot_prefix(self._exemplars) + f"Question: {sample.prompt}\nAnswer:"
        return Request(mode="completions", prompt=prompt, stop=("\n\nQuestion:", "\n\n\n"))


# -- data loading -----------------------------------------------------------


def packaged_data_dir() -> Path:
    """The GSM8K copy shipped in this package (test and train splits, gzip JSONL, with LICENSE and NOTICE)."""
    return Path(str(resources.files("harness") / "data" / "gsm8k"))


def load_split(split: str, data: str | None, limit: int | None = None) -> list[dict[str, str]]:
    """The first `limit` rows (all when None) of `split`.

    Sources: `data` when given, which is either `hub` (the hub's openai/gsm8k
    `main` through `datasets`) or a local file or folder; otherwise the
    packaged copy, which holds the same rows as the hub, so item ids and
    hashes do not depend on where the rows came from. A file may be the test
    file itself (its sibling `train.*` is used for the train split); a folder
    holds `test`/`train` as .jsonl, .jsonl.gz or .parquet.
    """
    if data == HUB_SOURCE:
        return _load_from_hub(split)[:limit]
    return _read_rows(_resolve_split_file(Path(data) if data else packaged_data_dir(), split), limit)


def _resolve_split_file(path: Path, split: str) -> Path:
    folder = path if path.is_dir() else path.parent
    if path.is_file() and (split == "test" or split in path.name):
        return path
    for suffix in (".jsonl", ".jsonl.gz", ".parquet", ".json"):
        for candidate in folder.glob(f"{split}*{suffix}"):
            return candidate
    if not path.exists():
        raise GSM8KDataError(f"GSM8K data file {path} does not exist; pass --data PATH to a GSM8K test.jsonl "
                             f"or parquet, or --data {HUB_SOURCE}")
    raise GSM8KDataError(f"no GSM8K {split} file next to {path}; put {split}.jsonl in {folder}")


def _read_rows(path: Path, limit: int | None) -> list[dict[str, str]]:
    if path.suffix == ".parquet":
        import pandas as pd

        rows = pd.read_parquet(path).to_dict("records")[:limit]
    else:
        rows = _read_jsonl(path, limit)
    for i, row in enumerate(rows):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("answer"), str):
            raise GSM8KDataError(f"{path} row {i + 1} lacks string fields 'question' and 'answer'")
    return rows


def _read_jsonl(path: Path, limit: int | None) -> list[dict[str, str]]:
    try:
        with _open_text(path) as handle:
            return _parse_jsonl(handle, path, limit)
    except (OSError, EOFError, UnicodeDecodeError) as exc:  # a truncated or non-gzip .gz, or bytes that are not UTF-8
        raise GSM8KDataError(f"cannot read {path} ({type(exc).__name__}: {exc}); pass a UTF-8 JSONL file, "
                             "gzip-compressed or not") from None


def _parse_jsonl(handle: IO[str], path: Path, limit: int | None) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for lineno, line in enumerate(handle, start=1):
        if limit is not None and len(rows) >= limit:
            break  # rows past the subset are neither needed nor parsed
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise GSM8KDataError(f"{path} line {lineno} is not valid JSON; fix or remove that line") from None
        if not isinstance(row, dict):
            raise GSM8KDataError(f"{path} line {lineno} is not a JSON object")
        _check_unicode(row, path, lineno)
        rows.append(row)
    return rows


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _check_unicode(row: dict[str, object], path: Path, lineno: int) -> None:
    # A lone surrogate escape (e.g. "\\ud800") parses as JSON but is not text: it cannot be hashed, sent or stored.
    for key, value in row.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise GSM8KDataError(
                    f"{path} line {lineno} field {key!r} holds an unpaired surrogate escape, which is not valid text"
                ) from None


def _load_from_hub(split: str) -> list[dict[str, str]]:
    try:
        import datasets

        ds = datasets.load_dataset(*HUB_DATASET, split=split)
    except Exception as exc:  # datasets raises many types for "offline"
        raise GSM8KDataError(
            f"could not load {HUB_DATASET[0]} from the hub ({type(exc).__name__}); "
            f"leave out --data {HUB_SOURCE} to use the copy shipped with evalsvc, or pass --data PATH"
        ) from exc
    return [{"question": r["question"], "answer": r["answer"]} for r in ds]
