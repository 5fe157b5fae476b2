"""`evalsvc dashboard`: the Streamlit app on a store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from db.engine import DB_ENV, to_url

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"


def streamlit_argv(app: Path, db_url: str, port: int, address: str, headless: bool) -> list[str]:
    """The `python -m streamlit run` command line for the app on `db_url`."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.address", address, "--server.port", str(port),
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",
        "--", "--db", db_url,
    ]


def find_app() -> Path:
    """The app script, from the source tree or the installed `dashboard` package."""
    if APP.is_file():
        return APP
    import dashboard

    return Path(dashboard.__file__).parent / "app.py"


@click.command("dashboard")
@click.option("--db", envvar=DB_ENV, help="SQLAlchemy URL or SQLite path (default: $EVALSVC_DB or ~/.local/share/evalsvc/evalsvc.db).")
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535))
@click.option("--address", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--open/--no-open", "open_browser", default=False, show_default=True, help="Open a browser tab.")
def dashboard_command(db: str | None, port: int, address: str, open_browser: bool) -> None:
    """Open the dashboard on the store: ladder, disagreements, significance, length and time, new runs."""
    url = to_url(db)
    argv = streamlit_argv(find_app(), url, port, address, headless=not open_browser)
    click.echo(f"dashboard on http://{address}:{port} for {url} (Ctrl-C stops it)")
    env = {**os.environ, DB_ENV: url}
    try:
        code = subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        code = 0
    raise SystemExit(code)


COMMANDS = [dashboard_command]
