"""Every bad input a new user tried ends in one line on stderr, the documented exit code, no traceback,
and a store left exactly as it was (the SQLite file hashed before and after)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Iterator

import pytest

from harness.errors import EXIT_FAILED, EXIT_UNREACHABLE, EXIT_USAGE
from tests.conftest import GSM8K_TEST, run_cli
from tests.evalsvc.ladder_yaml import crashing_step
from tests.fake_openai import FakeOpenAI, gsm8k_oracle


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(gsm8k_oracle(lambda q: len(q) % 4 == 0)) as s:
        yield s


@pytest.fixture(scope="module")
def store(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two steps with 10 GSM8K items each and a hand-entered math speed."""
    db = tmp_path_factory.mktemp("bad-input") / "evalsvc.db"
    for name in ("step3", "step4"):
        ran = run_cli("run", "--endpoint", name, "--url", server.base_url, "--model", "fake-model", "--data",
                      GSM8K_TEST, "--limit", "10", "--no-progress", "--db", str(db))
        assert ran.exit_code == 0, ran.output
        entered = run_cli("speed", "--endpoint", name, "--workload", "math", "--tokens-per-second", "200",
                          "--source", "vendor table", "--db", str(db))
        assert entered.exit_code == 0, entered.output
    return db


def fingerprint(db: Path) -> str:
    """Hash of the store's content: the main file and its write-ahead log, after a checkpoint."""
    with sqlite3.connect(db) as conn:
        conn.execute("pragma wal_checkpoint(truncate)")
    wal = db.with_name(db.name + "-wal")
    return hashlib.sha256(db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")).hexdigest()


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def no_step_starts(path: Path) -> str:
    return write(path, f"name: dead\nsteps:{crashing_step('bf16')}{crashing_step('int4')}")


RUN = ["run", "--endpoint", "step3", "--model", "fake-model", "--no-progress"]
SPEED = ["speed", "--endpoint", "step3", "--workload", "math"]

# (id, arguments with {url} and {tmp} to fill in, exit code, words the error line must hold)
CASES = [
    ("report-baseline-unknown", ["report", "--endpoints", "step3,step4", "--baseline", "nope"], EXIT_USAGE,
     "--baseline 'nope' is not one of the steps: step3, step4"),
    ("report-repeated-step", ["report", "--endpoints", "step3,step3"], EXIT_USAGE, "'step3' is named twice"),
    ("report-all-unknown", ["report", "--endpoints", "nosuch,nothere"], EXIT_USAGE,
     "no endpoint named 'nosuch'; known endpoints: step3, step4"),
    ("report-one-unknown", ["report", "--endpoints", "step3,nosuch"], EXIT_USAGE, "no endpoint named 'nosuch'"),
    ("ladder-no-step-starts", ["ladder", "run", "{ladder}", "--task", "gsm8k", "--limit", "2", "--no-progress"],
     EXIT_FAILED, "no step of the ladder started"),
    ("speed-nan", [*SPEED, "--tokens-per-second", "nan", "--source", "x"], EXIT_USAGE, "a finite number above 0"),
    ("speed-inf", [*SPEED, "--tokens-per-second", "inf", "--source", "x"], EXIT_USAGE, "a finite number above 0"),
    ("speed-zero", [*SPEED, "--tokens-per-second", "0", "--source", "x"], EXIT_USAGE, "a finite number above 0"),
    ("speed-negative", [*SPEED, "--tokens-per-second", "-1", "--source", "x"], EXIT_USAGE,
     "a finite number above 0"),
    ("speed-ttft-nan", [*SPEED, "--tokens-per-second", "200", "--ttft", "nan", "--source", "x"], EXIT_USAGE,
     "--ttft"),
    ("speed-ttft-alone", [*SPEED, "--ttft", "0.2"], EXIT_USAGE, "--ttft and --source go with --tokens-per-second"),
    ("speed-source-alone", [*SPEED, "--source", "vendor"], EXIT_USAGE,
     "--ttft and --source go with --tokens-per-second"),
    ("speed-missing-chat-data", ["speed", "--endpoint", "step3", "--workload", "chat", "--chat-data",
                                 "{tmp}/nope.jsonl"], EXIT_USAGE, "nope.jsonl"),
    ("run-timeout-zero", [*RUN, "--url", "{url}", "--timeout", "0"], EXIT_USAGE, "--timeout"),
    ("run-timeout-negative", [*RUN, "--url", "{url}", "--timeout", "-1"], EXIT_USAGE, "--timeout"),
    ("run-empty-data", [*RUN, "--url", "{url}", "--data", "{empty}"], EXIT_USAGE, "no items"),
    ("run-limit-beyond-data", [*RUN, "--url", "{url}", "--data", GSM8K_TEST, "--limit", "100000"], EXIT_USAGE,
     "--limit 100000"),
    ("ladder-limit-beyond-data", ["ladder", "run", "{ladder}", "--task", "all", "--limit", "200", "--no-progress"],
     EXIT_USAGE, "--limit 200 is more than the 164 items the humaneval data holds"),
    ("run-all-limit-beyond-humaneval", [*RUN, "--url", "{url}", "--task", "all", "--limit", "200"], EXIT_USAGE,
     "--limit 200 is more than the 164 items the humaneval data holds"),
    ("run-unreachable", [*RUN, "--url", "http://127.0.0.1:9/v1"], EXIT_UNREACHABLE, "is unreachable"),
    ("compare-same", ["compare", "step3", "step3"], EXIT_USAGE, "compare two different"),
    ("decide-same", ["decide", "step3", "step3"], EXIT_USAGE, "compare two different"),
    ("show-unknown", ["show", "nosuch"], EXIT_USAGE, "no endpoint named 'nosuch'"),
    ("run-digit-name", ["run", "--endpoint", "12", "--model", "fake-model", "--url", "{url}"], EXIT_USAGE,
     "looks like a run id"),
]


@pytest.mark.parametrize(("args", "code", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_a_documented_code_and_no_change(store: Path, server: FakeOpenAI, tmp_path: Path,
                                                                args: list[str], code: int, words: str) -> None:
    fill = {"url": server.base_url, "tmp": str(tmp_path), "empty": write(tmp_path / "empty.jsonl", ""),
            "ladder": no_step_starts(tmp_path / "dead.yaml")}
    before, requests = fingerprint(store), len(server.requests)
    result = run_cli(*[a.format(**fill) for a in args], "--db", str(store))
    assert result.exit_code == code, result.output
    # `ladder run` announces each long part ("evalsvc: starting step ..."); the error is the one other line.
    lines = [line for line in result.stderr.splitlines() if not line.startswith("evalsvc: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert words in lines[0]
    assert "Traceback" not in result.output
    assert fingerprint(store) == before
    if code != EXIT_FAILED:
        assert len(server.requests) == requests  # refused before asking the endpoint anything
