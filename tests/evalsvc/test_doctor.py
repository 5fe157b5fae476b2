"""`evalsvc doctor`: one row per thing a run needs, the fix for each, exit 1 when a run could not go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from db.engine import MIGRATIONS, open_store
from evalsvc.doctor import check_engine, check_gsm8k, check_store
from tests.conftest import ROOT, run_cli

ROWS = ["sandbox self-check", "bubblewrap", "embedded engine", "GSM8K data", "HumanEval data", "store", "Chromium",
        "launched servers"]


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head() -> str:
    (only,) = ScriptDirectory.from_config(alembic_config()).get_heads()
    return only


def store_at(path: Path, revision: str) -> Path:
    """A store made by the real migrations, stopped at `revision`."""
    store = open_store(str(path), migrate=False)  # a new file: no tables yet
    cfg = alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    store.dispose()
    return path


def test_store_that_does_not_exist_is_reported_and_not_made(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.db"
    row = check_store(str(path))
    assert (row.ok, row.status) == (True, "none yet")
    assert str(path) in row.detail and "first run creates it" in row.detail
    assert not path.exists()


def test_store_at_head(tmp_path: Path) -> None:
    path = store_at(tmp_path / "current.db", "head")
    row = check_store(str(path))
    assert (row.ok, row.status, row.fix) == (True, "ok", "")
    assert f"schema {head()}, this evalsvc's head {head()}" in row.detail


def test_old_store_is_flagged_and_its_fix_upgrades_it(tmp_path: Path) -> None:
    revisions = [r.revision for r in ScriptDirectory.from_config(alembic_config()).walk_revisions()]
    older = revisions[1]  # walk_revisions goes from the head down
    path = store_at(tmp_path / "old.db", older)
    row = check_store(str(path))
    assert (row.ok, row.status) == (True, "old")
    assert f"schema {older}, this evalsvc's head {head()}" in row.detail
    assert check_store(str(path)).status == "old"  # looking did not migrate it
    fix = row.fix.split()
    assert fix[:2] == ["evalsvc", "runs"]
    assert run_cli(*fix[1:]).exit_code == 0
    assert check_store(str(path)).status == "ok"


def test_store_from_a_newer_evalsvc_blocks_runs(tmp_path: Path) -> None:
    path = store_at(tmp_path / "newer.db", "head")
    store = open_store(str(path))
    with store.engine.begin() as conn:
        conn.exec_driver_sql("update alembic_version set version_num = '9999'")
    store.dispose()
    row = check_store(str(path))
    assert (row.ok, row.status, row.blocks_runs) == (False, "TOO NEW", True)
    assert "a newer evalsvc wrote it" in row.detail and row.fix


def test_a_file_that_is_not_a_store_blocks_runs(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("not a database at all, just text " * 100)
    row = check_store(str(path))
    assert (row.ok, row.status, row.blocks_runs) == (False, "UNUSABLE", True)
    assert str(path) in row.detail


def test_engine_not_built_is_not_a_blocker_and_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))
    row = check_engine()
    assert (row.ok, row.status, row.required) == (False, "not built", False)
    assert "compiles llama.cpp" in row.detail and "ensure_engine()" in row.fix
    assert not (tmp_path / "home").exists()  # looking built nothing


def test_gsm8k_from_the_package_or_from_a_broken_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVALSVC_GSM8K_DATA", raising=False)
    row = check_gsm8k()
    assert (row.ok, row.status) == (True, "ok") and "1319 test questions" in row.detail
    monkeypatch.setenv("EVALSVC_GSM8K_DATA", str(tmp_path / "gone.jsonl"))
    row = check_gsm8k()
    assert (row.ok, row.blocks_runs, row.fix) == (False, True, "unset EVALSVC_GSM8K_DATA")
    monkeypatch.setenv("EVALSVC_GSM8K_DATA", "hub")
    row = check_gsm8k()
    assert (row.ok, row.status, row.blocks_runs) == (False, "online only", False)


def test_json_has_every_row_and_the_verdict(tmp_path: Path) -> None:
    result = run_cli("doctor", "--db", str(tmp_path / "s.db"), "--json")
    report = json.loads(result.stdout)
    assert [c["name"] for c in report["checks"]] == ROWS
    blocked = [c["name"] for c in report["checks"] if c["blocks_runs"]]
    assert report["ok"] == (not blocked)
    assert result.exit_code == (1 if blocked else 0)
    assert all(c["fix"] for c in report["checks"] if not c["ok"])


@pytest.mark.slow
def test_without_bwrap_on_path_doctor_says_so_with_the_fix_and_exits_1(tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {**os.environ, "PATH": str(empty_bin), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "evalsvc.cli", "doctor", "--db", str(tmp_path / "s.db")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    (row,) = [i for i, line in enumerate(lines) if line.startswith("bubblewrap ")]
    assert "MISSING" in lines[row] and "not on PATH" in lines[row]
    assert lines[row + 1].strip() == "fix: sudo apt-get install bubblewrap  (Fedora: sudo dnf install bubblewrap)"
    (sandbox,) = [line for line in lines if line.startswith("sandbox self-check ")]
    assert "FAILED" in sandbox and "bubblewrap" in sandbox  # the self-check a HumanEval run makes fails too
    assert done.stderr.startswith("error: missing for runs: ") and "bubblewrap" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "everything a run needs" not in done.stdout
    assert not (tmp_path / "s.db").exists()
