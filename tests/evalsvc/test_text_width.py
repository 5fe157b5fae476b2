"""`COLUMNS=80`: no line of compare, report or decide is wider than 80 characters unless --wide."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsvc.cli.text import fit
from tests.conftest import GSM8K_TEST, run_cli
from tests.fake_openai import FakeOpenAI, gsm8k_oracle

COMMANDS = [
    ["compare", "step3", "step4", "--disagreements"],
    ["report", "--endpoints", "step3,step4"],
    ["decide", "step3", "step4"],
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("width") / "evalsvc.db")
    for name, wrong in (("step3", 4), ("step4", 3)):
        with FakeOpenAI(gsm8k_oracle(lambda q, m=wrong: len(q) % m == 0)) as server:
            ran = run_cli("run", "--endpoint", name, "--url", server.base_url, "--model", "fake-model", "--data",
                          GSM8K_TEST, "--limit", "40", "--no-progress", "--db", db)
            assert ran.exit_code == 0, ran.output
        for workload in ("math", "chat"):
            run_cli("speed", "--endpoint", name, "--workload", workload, "--tokens-per-second", "200", "--source",
                    "vendor table", "--db", db)
    return db


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_no_line_wider_than_columns_unless_wide(store: str, command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    fitted = run_cli(*command, "--db", store)
    wide = run_cli(*command, "--db", store, "--wide")
    assert fitted.exit_code == 0 and wide.exit_code == 0
    too_long = [line for line in fitted.stdout.splitlines() if len(line) > 80]
    assert too_long == []
    assert max(len(line) for line in wide.stdout.splitlines()) > 80  # the same report, whole lines
    if command[0] == "decide":  # prose only: wrapping keeps every word, in order
        assert fitted.stdout.split() == wide.stdout.split()


def test_a_wide_table_becomes_one_block_per_row_with_every_cell() -> None:
    table = "\n".join([
        "task   A      verdict                      95% CI",
        "-----  -----  ---------------------------  --------------",
        "gsm8k  step3  no change beyond the margin  -14.7 to +11.3",
        "",
        "after the table",
    ])
    assert fit(table, 80) == table
    assert fit(table, 40).split("\n") == [
        "task gsm8k: A step3,",
        "  verdict no change beyond the margin,",
        "  95% CI -14.7 to +11.3",
        "",
        "after the table",
    ]
    assert fit(table, None) == table
