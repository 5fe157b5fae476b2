"""`evalsvc dashboard`: the Streamlit app on a store."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys

import click

from db.engine import DB_ENV, DEFAULT_DB_SHOWN, StoreError, open_store, to_url
from evalsvc.cli.runs import secret_url
from evalsvc.report.masking import mask_url

OPEN_ADDRESS_WARNING = (
    "warning: the dashboard listens on {address}, beyond this machine. Anyone who reaches it can read every "
    "stored item and start evaluation jobs; it has no login of its own. Listen on 127.0.0.1 and put a reverse "
    "proxy that authenticates in front of it (README: \"The dashboard on a shared machine\")."
)


# No "Deploy" button or developer menu: the page is a read-only tool, not an app being written.
STREAMLIT_CLIENT_FLAGS = ("--client.toolbarMode", "viewer")


def streamlit_argv(port: int, address: str, headless: bool) -> list[str]:
    """The command line that serves the dashboard; the store goes in the environment, never here.

    The dashboard is started by module path (`python -m dashboard.serve`, which knows where its app
    script is), so evalsvc never imports it: the dashboard builds on evalsvc, not the other way round.

    Beyond loopback, an unexpected error shows its type only: its message and traceback go to the server's
    log (masked there), not to whoever reaches the page.
    """
    return [
        sys.executable, "-m", "dashboard.serve",  # streamlit run on the app, its imports done before it listens
        "--server.address", address, "--server.port", str(port),
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",
        "--client.showErrorDetails", "full" if is_loopback(address) else "type",
        *STREAMLIT_CLIENT_FLAGS,
    ]


def is_loopback(address: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


@click.command("dashboard")
@click.option("--db", envvar=DB_ENV, callback=secret_url,
              help=f"SQLAlchemy URL or SQLite path (default: ${DB_ENV} or {DEFAULT_DB_SHOWN}).")
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535))
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Interface to listen on. Anything but loopback exposes the page, which has no login.")
@click.option("--open/--no-open", "open_browser", default=False, show_default=True, help="Open a browser tab.")
@click.option("--create", is_flag=True, help="Make a new empty store when the --db file does not exist yet "
              "(without it, a path that does not exist is refused: it is usually a typo).")
def dashboard_command(db: str | None, port: int, address: str, open_browser: bool, create: bool) -> None:
    """Open the dashboard on the store: ladder, disagreements, significance, length and time, new runs.

    Example: EVALSVC_DB=postgresql://user:password@host/db evalsvc dashboard --port 8501
    """
    url = to_url(db)
    if url.startswith("sqlite"):  # a mistyped path is refused here, not shown as a new empty store
        try:
            open_store(url, create=create).dispose()
        except StoreError as exc:
            raise StoreError(f"{exc}; `evalsvc dashboard --create` opens a new empty one") from exc
    argv = streamlit_argv(port, address, headless=not open_browser)
    if not is_loopback(address):
        click.echo(OPEN_ADDRESS_WARNING.format(address=address), err=True)
    click.echo(f"dashboard on http://{address}:{port} for {mask_url(url)} (Ctrl-C stops it)")
    # The URL may hold a password: the child gets it in its environment, which only this user can read.
    env = {**os.environ, DB_ENV: url}
    try:
        code = subprocess.call(argv, env=env)
    except KeyboardInterrupt:
        code = 0
    raise SystemExit(code)

