"""The documented JSON schema (docs/json-output.schema.json) holds for real --json outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import GSM8K_TEST, ROOT, run_cli
from tests.fake_openai import FakeOpenAI, gsm8k_oracle

SCHEMA = json.loads((ROOT / "docs" / "json-output.schema.json").read_text(encoding="utf-8"))


def check(name: str, document: dict) -> None:
    Draft202012Validator.check_schema(SCHEMA)
    validator = Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{name}"})
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    db = str(tmp_path_factory.mktemp("schema") / "evalsvc.db")
    found = {}
    for name, wrong in (("step3", 4), ("step4", 3)):
        with FakeOpenAI(gsm8k_oracle(lambda q, m=wrong: len(q) % m == 0)) as server:
            found["run"] = json.loads(run_cli("run", "--endpoint", name, "--url", server.base_url, "--model",
                                              "fake-model", "--data", GSM8K_TEST, "--limit", "20", "--no-progress",
                                              "--json", "--db", db).stdout)
        found["speed"] = json.loads(run_cli("speed", "--endpoint", name, "--workload", "math", "--tokens-per-second",
                                            "200", "--source", "vendor", "--json", "--db", db).stdout)
    for name, args in {"runs": ["runs"], "show": ["show", "1"], "compare": ["compare", "step3", "step4"],
                       "decide": ["decide", "step3", "step4"], "report": ["report", "--endpoints", "step3,step4"]}.items():
        result = run_cli(*args, "--json", "--db", db)
        assert result.exit_code == 0, result.output
        found[name] = json.loads(result.stdout)
    out = Path(db).parent / "export"
    assert run_cli("export", "1", "--out", str(out), "--db", db).exit_code == 0
    found["export_summary"] = json.loads((out / "run-1-summary.json").read_text())
    return found


@pytest.mark.parametrize("name", ["run", "runs", "show", "compare", "decide", "report", "speed", "export_summary"])
def test_real_output_matches_the_documented_schema(outputs: dict[str, dict], name: str) -> None:
    check(name, outputs[name])


def test_the_schema_can_fail() -> None:
    with pytest.raises(AssertionError, match="'run_id' is a required property"):
        check("runs", {"runs": [{"endpoint": "x"}]})
