"""GSM8K loading, templates and answer extraction."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from evalsvc.run.runner import dataset_hash
from harness.tasks import TaskError, get_task, pick_template
from harness.tasks.gsm8k import DATA_ENV, GSM8KDataError, extract_answer, gold_answer, normalize_number
from harness.types import Completion
from tests.fake_openai import GSM8K_DIR, GSM8K_TEST_FILE, gsm8k_rows

TEST_FILE = GSM8K_TEST_FILE

# Read from the upstream files (openai/grade-school-math, also the hub's openai/gsm8k `main`) on 2026-12-03
# with this loader before the copy was packaged: runs stored then must pair with runs made from the packaged copy.
UPSTREAM_SHA256 = {
    "test": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    "train": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
}
UPSTREAM_ROWS = {"test": 1319, "train": 7473}
DATASET_HASH_FIRST_400 = "cbb2f4a48ac3b934"
DATASET_HASH_ALL_TEST = "a001197742114ae2"

# (completion text, designated, strict, flexible)
EXTRACTION_TABLE = [
    ("So she has 18 eggs.\n#### 18", "18", "18", "18"),
    ("The answer is 1,234.", "1234", "1234", "1234"),
    ("The answer is $1,234.50", "1234.5", "1234.5", "1234.5"),
    ("Total: \\boxed{42}", "42", "42", "42"),
    ("The answer is -7.", "-7", "-7", "-7"),
    ("He pays $18.00 in all.", "18", None, "18"),
    ("First 3 apples, then 5 more: 8", "8", None, "8"),
    ("The answer is 12. Checking: 12 + 3 = 15", "12", "12", "15"),
    ("The final answer is: **70000**", "70000", "70000", "70000"),
    ("#### 5\nThe answer is 6", "5", "5", "6"),
    ("0.5 of 10 is 5.0", "5", None, "5"),
    ("I cannot solve this.", None, None, None),
    ("", None, None, None),
    ("The answer is 3.14159", "3.14159", "3.14159", "3.14159"),
    ("Costs went from 1,000 to 2,500", "2500", None, "2500"),
]


@pytest.mark.parametrize(("text", "designated", "strict", "flexible"), EXTRACTION_TABLE)
def test_extract_answer(text: str, designated: str | None, strict: str | None, flexible: str | None) -> None:
    assert extract_answer(text) == (designated, strict, flexible)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1,000", "1000"), ("$5", "5"), ("18.0", "18"), ("-0", "0"), ("2.50", "2.5"), ("7.", "7"), ("abc", None)],
)
def test_normalize_number(raw: str, expected: str | None) -> None:
    assert normalize_number(raw) == expected


def test_gold_answer_reads_the_number_after_hashes() -> None:
    assert gold_answer("Step <<2*3=6>>6\n#### 1,250") == "1250"
    with pytest.raises(GSM8KDataError):
        gold_answer("no marker here")


def test_default_subset_is_first_400_with_stable_ids_and_hashes() -> None:
    task = get_task("gsm8k")
    samples = task.load_samples(str(TEST_FILE))
    rows = gsm8k_rows(TEST_FILE)
    assert len(samples) == 400
    assert samples[0].item_id == "gsm8k/test/0000" and samples[399].item_id == "gsm8k/test/0399"
    assert samples[7].prompt == rows[7]["question"]
    assert samples[7].reference == rows[7]["answer"].rpartition("####")[2].strip().replace(",", "")
    again = task.load_samples(str(TEST_FILE.parent), limit=10)
    assert [s.item_hash for s in again] == [s.item_hash for s in samples[:10]]
    assert len({s.item_hash for s in samples}) == 400


def test_scoring_designates_strict_then_flexible() -> None:
    task = get_task("gsm8k")
    sample = task.load_samples(str(TEST_FILE), limit=1)[0]  # gold 18
    right = task.score(sample, Completion(text="... The answer is 18."))
    wrong_strict = task.score(sample, Completion(text="The answer is 17. Or maybe 18"))
    fallback = task.score(sample, Completion(text="she makes 18 dollars"))
    assert (right.passed, right.detail["extraction"]) == (True, "strict")
    assert (wrong_strict.passed, wrong_strict.extracted, wrong_strict.extracted_flexible) == (False, "17", "18")
    assert (fallback.passed, fallback.detail["extraction"]) == (True, "flexible")


def test_fewshot_template_uses_train_exemplars_never_test() -> None:
    task = get_task("gsm8k")
    samples = task.load_samples(str(TEST_FILE), limit=3)
    request = pick_template(task, "fewshot-completion").build(samples[2])
    train = gsm8k_rows(GSM8K_DIR / "train.jsonl.gz")[:8]
    test_questions = [row["question"] for row in gsm8k_rows(TEST_FILE)]
    assert request.mode == "completions" and request.stop
    assert request.prompt.count("Question: ") == 9
    assert all(ex["question"] in request.prompt for ex in train)
    assert "<<" not in request.prompt  # calculator annotations stripped
    assert sum(q in request.prompt for q in test_questions) == 1  # only the item itself
    assert request.prompt.endswith(samples[2].prompt + "\nAnswer:")


def test_zero_shot_chat_template_is_default() -> None:
    task = get_task("gsm8k")
    sample = task.load_samples(str(TEST_FILE), limit=1)[0]
    request = pick_template(task, None).build(sample)
    assert request.mode == "chat"
    assert request.messages[-1]["content"].endswith(sample.prompt)
    assert "The answer is" in request.messages[-1]["content"]


def test_bad_data_inputs_are_clear(tmp_path: Path) -> None:
    task = get_task("gsm8k")
    with pytest.raises(GSM8KDataError, match="does not exist"):
        task.load_samples(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "test.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(GSM8KDataError, match="line 2 is not valid JSON"):
        task.load_samples(str(bad))
    with pytest.raises(TaskError, match="no prompt template 'nope'"):
        pick_template(task, "nope")
    with pytest.raises(TaskError, match="unknown task"):
        get_task("mmlu")


def test_parquet_file_loads(tmp_path: Path) -> None:
    import pandas as pd

    rows = gsm8k_rows(TEST_FILE)[:5]
    pd.DataFrame(rows).to_parquet(tmp_path / "test.parquet")
    samples = get_task("gsm8k").load_samples(str(tmp_path / "test.parquet"))
    assert [s.prompt for s in samples] == [r["question"] for r in rows]


# -- the copy shipped in the package ---------------------------------------------


@pytest.mark.parametrize("split", ["test", "train"])
def test_packaged_copy_is_the_upstream_file_byte_for_byte(split: str) -> None:
    raw = gzip.decompress((GSM8K_DIR / f"{split}.jsonl.gz").read_bytes())
    assert hashlib.sha256(raw).hexdigest() == UPSTREAM_SHA256[split]
    assert raw.count(b"\n") == UPSTREAM_ROWS[split]


def test_packaged_copy_keeps_its_licence_and_attribution() -> None:
    assert "Copyright (c) 2021 OpenAI" in (GSM8K_DIR / "LICENSE").read_text()
    notice = (GSM8K_DIR / "NOTICE").read_text()
    assert "github.com/openai/grade-school-math" in notice and "arXiv:2110.14168" in notice
    assert UPSTREAM_SHA256["test"] in notice and UPSTREAM_SHA256["train"] in notice


def test_default_source_is_the_packaged_copy_with_the_same_item_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)
    import datasets  # the hub must not be asked: loading from it would raise here

    monkeypatch.setattr(datasets, "load_dataset", _hub_must_not_be_called)
    task = get_task("gsm8k")
    first_400 = task.load_samples()
    everything = task.load_samples(limit=UPSTREAM_ROWS["test"])
    assert dataset_hash(first_400) == DATASET_HASH_FIRST_400
    assert dataset_hash(everything) == DATASET_HASH_ALL_TEST
    assert everything[1318].item_id == "gsm8k/test/1318"
    request = pick_template(task, "fewshot-completion").build(first_400[0])
    assert gsm8k_rows(GSM8K_DIR / "train.jsonl.gz")[0]["question"] in request.prompt


def test_env_var_is_read_when_no_data_is_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "What is 2+2?", "answer": "#### 4"}) + "\n")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert [s.reference for s in get_task("gsm8k").load_samples()] == ["4"]
    explicit = get_task("gsm8k").load_samples(str(TEST_FILE), limit=2)
    assert [s.item_id for s in explicit] == ["gsm8k/test/0000", "gsm8k/test/0001"]  # --data wins over the variable


def test_hub_is_chosen_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    hub_rows = gsm8k_rows(TEST_FILE)[:3]

    def load_dataset(*args: str, split: str) -> list[dict[str, str]]:
        calls.append((*args, split))
        return [{**row, "extra": 1} for row in hub_rows]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    samples = get_task("gsm8k").load_samples("hub", limit=2)
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [s.item_hash for s in samples] == [s.item_hash for s in get_task("gsm8k").load_samples(limit=2)]


def test_hub_failure_names_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=_hub_must_not_be_called))
    with pytest.raises(GSM8KDataError, match="could not load openai/gsm8k from the hub .*leave out --data hub"):
        get_task("gsm8k").load_samples("hub")


def test_broken_gzip_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "test.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"question": "q", "answer": "#### 1"}\n' * 50)[:-30])
    with pytest.raises(GSM8KDataError, match="cannot read .*test.jsonl.gz"):
        get_task("gsm8k").load_samples(str(broken), limit=1000)


def _hub_must_not_be_called(*args: object, **kwargs: object) -> None:
    raise ConnectionError("no network in this test")
