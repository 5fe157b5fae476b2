"""A test that needs a program (bubblewrap, Chromium) skips without it locally and fails under CI=true, as a
missing PostgreSQL does: CI must never pass green on tests it did not run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, check_tools, needs_tool, skip_or_fail


class Marked:
    """Just enough of a pytest item for `check_tools`: the marks a test carries."""

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [mark.mark for mark in marks]

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [mark for mark in self.marks if mark.name == name]


MISSING = needs_tool("/nonexistent/no-such-tool", "apt-get install no-such-tool")


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("TRUE", pytest.fail.Exception),
                                             ("", pytest.skip.Exception), ("false", pytest.skip.Exception)])
def test_a_missing_tool_skips_locally_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str,
                                                     outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"/nonexistent/no-such-tool not found \(apt-get install no-such-tool\)"):
        check_tools(Marked(pytest.mark.slow, MISSING))
    with pytest.raises(outcome, match="PostgreSQL is not reachable"):
        skip_or_fail("PostgreSQL is not reachable")


def test_a_present_tool_lets_the_test_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    check_tools(Marked(needs_tool(sys.executable, "it runs this test"), pytest.mark.slow))


SANDBOX_TEST = "tests/harness/test_sandbox.py::test_writes_outside_the_sandbox_leave_no_file"


def run_without_bwrap(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    """pytest on one bubblewrap test, in a process whose PATH has no bwrap."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT), "CI": ci}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", SANDBOX_TEST],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_sandbox_tests_fail_in_ci_without_bubblewrap(tmp_path: Path) -> None:
    failed = run_without_bwrap(tmp_path, "true")
    assert failed.returncode == 1, failed.stdout
    assert "bwrap not found (apt-get install bubblewrap); CI=true runs every test" in failed.stdout
    skipped = run_without_bwrap(tmp_path, "")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    assert "bwrap not found (apt-get install bubblewrap)" in skipped.stdout
