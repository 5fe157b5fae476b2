"""`evalsvc dashboard`: the store URL reaches Streamlit through the environment, and an open address warns."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from evalsvc.cli import main
from evalsvc.cli import dashboard as dashboard_cli
from evalsvc.cli.dashboard import is_loopback

URL = "postgresql+psycopg://team:dashboard-pw-123@db.internal/evals"


def start(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[Any, dict[str, Any]]:
    """Run the command with `subprocess.call` caught (and no database server needed); returns the result and
    what it would have started."""
    started: dict[str, Any] = {}
    monkeypatch.setattr(dashboard_cli, "open_store", lambda db, create: SimpleNamespace(url=db, dispose=lambda: None))

    def fake_call(argv: list[str], env: dict[str, str]) -> int:
        started.update(argv=argv, env=env)
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    return CliRunner().invoke(main, ["dashboard", "--db", URL, *args]), started


def test_store_url_goes_through_the_environment_and_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    result, started = start(monkeypatch)
    assert result.exit_code == 0
    assert not any("dashboard-pw-123" in arg for arg in started["argv"])
    assert started["env"]["EVALSVC_DB"] == URL
    assert "postgresql+psycopg://team:***@db.internal/evals" in result.output
    assert "dashboard-pw-123" not in result.output and "has no login" not in result.output
    assert "warning: the password or key given with --db can be read by every local user" in result.output


@pytest.mark.parametrize(("address", "warns"), [
    ("127.0.0.1", False), ("localhost", False), ("::1", False), ("127.0.0.2", False),
    ("0.0.0.0", True), ("::", True), ("10.1.2.3", True), ("myhost.example", True),
])
def test_open_address_warns(monkeypatch: pytest.MonkeyPatch, address: str, warns: bool) -> None:
    assert is_loopback(address) is not warns
    result, started = start(monkeypatch, "--address", address)
    assert result.exit_code == 0
    assert ("has no login of its own" in result.output) is warns
    details = started["argv"][started["argv"].index("--client.showErrorDetails") + 1]
    assert details == ("type" if warns else "full")


def test_a_missing_store_path_is_refused_unless_create(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "call", lambda argv, env: calls.append(argv) or 0)
    missing = tmp_path / "typo" / "evalsvc.db"
    refused = CliRunner().invoke(main, ["dashboard", "--db", str(missing)])
    assert refused.exit_code != 0 and not calls
    assert not missing.parent.exists()
    assert len(refused.output.strip().splitlines()) == 1 and "--create" in refused.output, refused.output
    (tmp_path / "new").mkdir()
    made = tmp_path / "new" / "evalsvc.db"
    created = CliRunner().invoke(main, ["dashboard", "--db", str(made), "--create"])
    assert created.exit_code == 0, created.output
    assert made.exists() and len(calls) == 1


def test_the_launch_hides_the_deploy_menu(monkeypatch: pytest.MonkeyPatch) -> None:
    _, started = start(monkeypatch)
    argv = started["argv"]
    assert argv[argv.index("--client.toolbarMode") + 1] == "viewer"


def test_the_dashboard_is_started_by_module_path_and_finds_its_own_app(monkeypatch: pytest.MonkeyPatch) -> None:
    from dashboard import serve  # the test may import the dashboard; evalsvc itself never does

    _, started = start(monkeypatch)
    argv = started["argv"]
    assert argv[1:3] == ["-m", "dashboard.serve"]
    assert not any(arg.endswith(".py") for arg in argv)
    assert serve.APP.is_file() and serve.APP.name == "app.py"
