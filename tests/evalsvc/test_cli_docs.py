"""What the README and `--help` promise about the command line is what it does."""

from __future__ import annotations

import re

from harness.errors import EXIT_CODES
from tests.conftest import ROOT, run_cli


def test_exit_codes_are_documented_in_readme_and_help() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documented = dict(re.findall(r"^\| (\d+) \| (.+) \|$", readme, flags=re.M))
    assert {int(code): meaning for code, meaning in documented.items()} == EXIT_CODES
    shown = run_cli("--help").stdout
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", shown, flags=re.M), (code, shown)


def test_version() -> None:
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.exit_code == 0 and result.stdout == f"evalsvc {version('evalsvc')}\n"
