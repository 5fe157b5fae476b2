"""No store password and no API key anywhere they can be read: issue 20, held end to end.

A PostgreSQL role with a random password owns a database made for this test;
an API key is random too, and the fake OpenAI servers refuse every request
without it (so the runs really use it). `run`, `ladder run` (one step already
up, one launched), `report`, `show`, `runs`, `speed` (debug logging on),
`dashboard` (every page read in Chromium) and a job started from its Evaluate
page all run as real processes. Then both
secrets are searched for in: every command's stdout and stderr, every file
under the test's folder (job files and logs, step logs, the dashboard's log),
the text and HTML of every page, the command line of every process seen while
the commands ran, and every row of every table of the store.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, make_url, text

from tests.conftest import GSM8K_TEST, ROOT, needs_tool, skip_or_fail, wrong_when
from tests.db.conftest import pg_problem, pg_url
from tests.fake_openai import KEY_ENV, FakeOpenAI, gsm8k_oracle

pytest.importorskip("playwright.sync_api", reason="playwright is needed for the browser part (pip install playwright)")
from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from tests.dashboard.test_browser import (  # noqa: E402
    CHROMIUM, CHROMIUM_ARGS, CHROMIUM_INSTALL, RENDER_TIMEOUT_MS, VIEWPORT, free_port, open_page, wait_rendered,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, needs_tool(CHROMIUM, CHROMIUM_INSTALL)]

LIMIT = 6
JOB_LIMIT = 4
COMMAND_TIMEOUT_S = 600
START_TIMEOUT_S = 180
PAGES = {"": "Ladder", "/disagreements": "Disagreements", "/significance": "Significance",
         "/length_time": "Length and time", "/evaluate": "Evaluate an endpoint"}


# --- the canaries ------------------------------------------------------------------------------


@pytest.fixture
def canary_store() -> Iterator[tuple[str, str]]:
    """(store URL, admin URL of the same database): a new role with a random password owning a new database,
    both dropped afterwards."""
    admin_url = make_url(pg_url()).set(drivername="postgresql+psycopg")
    problem = pg_problem(admin_url.render_as_string(hide_password=False))
    if problem is not None:
        skip_or_fail(f"PostgreSQL at {admin_url.host} is not reachable: {problem}")
    name = f"evalsvc_canary_{secrets.token_hex(4)}"
    password = f"pgcanary{secrets.token_hex(12)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
        conn.execute(text(f"CREATE DATABASE {name} OWNER {name}"))
    try:
        store = admin_url.set(username=name, password=password, database=name)
        yield store.render_as_string(hide_password=False), admin_url.set(database=name).render_as_string(
            hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"DROP ROLE IF EXISTS {name}"))
        admin.dispose()


# --- watching every process's command line --------------------------------------------------


class ProcessWatch(threading.Thread):
    """Reads /proc/<pid>/cmdline of every process, over and over, until stopped.

    All processes, not only this test's descendants: a detached job or a
    launched server is re-parented when its parent exits, and a secret on any
    command line is readable by every local user anyway. A child between fork
    and exec still shows its parent's command line, so every (pid, command
    line) pair seen is kept, not only a pid's first.
    """

    def __init__(self, needles: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self.needles = needles
        self.seen: set[str] = set()
        self.offenders: set[tuple[int, str]] = set()
        self.scans = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.scan()
            self._stop_event.wait(0.02)

    def scan(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                continue
            self.seen.add(cmdline)
            if any(needle in cmdline for needle in self.needles):
                self.offenders.add((int(entry.name), cmdline))
        self.scans += 1

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)

    def saw(self, fragment: str) -> bool:
        return any(fragment in cmdline for cmdline in self.seen)


# --- running the commands ------------------------------------------------------------------------


def evalsvc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalsvc.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=COMMAND_TIMEOUT_S)


def write_ladder(path: Path, up_url: str, port: int, env_report: Path) -> Path:
    command = [sys.executable, "-m", "tests.fake_openai", "--port", str(port), "--sglang",
               "--env-report", str(env_report)]
    path.write_text(f"""
name: canary-ladder
steps:
  - name: bf16
    base_url: {up_url}
    model: fake-model
  - name: int4
    base_url: http://127.0.0.1:{port}/v1
    model: fake-model
    launch:
      command: {json.dumps(command)}
      health_url: http://127.0.0.1:{port}/health
      startup_timeout_s: 120
      env: {{{KEY_ENV}: "${{EVALSVC_API_KEY}}", PYTHONPATH: "{ROOT}"}}
""")
    return path


def dashboard_argv(store_url: str, port: int) -> list[str]:
    """`evalsvc dashboard --db URL`: the password on the command line the user typed (the only one allowed)."""
    return [sys.executable, "-m", "evalsvc.cli", "dashboard", "--db", store_url, "--port", str(port)]


def start_dashboard(env: dict[str, str], argv: list[str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The dashboard, once it answers."""
    port = argv[argv.index("--port") + 1]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            if httpx.get(f"{base}/_stcore/health", timeout=2).text == "ok":
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"dashboard did not answer in {START_TIMEOUT_S} s: {log_path.read_text()[-3000:]}")


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def page_text(page: Page) -> str:
    return page.locator("body").inner_text() + "\n" + page.content()


def read_every_page(page: Page, base: str) -> list[str]:
    texts = []
    for path, title in PAGES.items():
        page.goto(base + path)
        open_page(page, title)
        texts.append(page_text(page))
    return texts


def start_job_in_the_browser(page: Page, base: str, up_url: str, key: str) -> str:
    """Fill the Evaluate form (the key in its password field), wait until the job has finished; the page text."""
    page.goto(base + "/evaluate")
    open_page(page, "Evaluate an endpoint")
    page.get_by_role("textbox", name="Name for this step").fill("job-step")
    page.get_by_label("Server address (OpenAI-compatible)").fill(up_url)
    page.get_by_label("Model name, as the server lists it at /v1/models").fill("fake-model")
    page.get_by_role("spinbutton", name="Questions per task (0 = all: 400 GSM8K, 164 HumanEval)").fill(str(JOB_LIMIT))
    page.get_by_role("textbox", name="GSM8K questions file or folder on this machine (optional)").fill(GSM8K_TEST)
    page.get_by_label("API key (optional; not stored)").fill(key)
    page.get_by_role("button", name="Start evaluation").click()
    expect(page.get_by_text("Started: evalsvc run --endpoint job-step")).to_be_visible()
    page.reload()
    open_page(page, "Evaluate an endpoint")
    expect(page.get_by_text("job-step: finished")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    page.get_by_text("log", exact=True).first.click()
    wait_rendered(page)
    return page_text(page)


# --- reading everything back ---------------------------------------------------------------------


def files_holding(folder: Path, needles: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes().decode("utf-8", "replace")
            hits = [needle for needle in needles if needle in data]
            if hits:
                found[str(path)] = hits
    return found


def dump_store(admin_url: str) -> dict[str, list[str]]:
    """Every row of every table, as text, by table."""
    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            tables = inspect(conn).get_table_names()
            return {table: [repr(tuple(row)) for row in conn.execute(text(f'SELECT * FROM "{table}"'))]
                    for table in tables}
    finally:
        engine.dispose()


def test_no_secret_on_a_page_in_a_log_in_a_process_list_or_in_the_store(
    canary_store: tuple[str, str], tmp_path: Path
) -> None:
    store_url, admin_url = canary_store
    password = make_url(store_url).password
    key = f"sk-canary-{secrets.token_hex(16)}"
    needles = (str(password), key)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSVC_")}
    env.update(PYTHONPATH=str(ROOT), XDG_DATA_HOME=str(tmp_path / "xdg"), EVALSVC_HOME=str(tmp_path / "home"))
    secret_env = {**env, "EVALSVC_DB": store_url, "EVALSVC_API_KEY": key}
    outputs: dict[str, str] = {}
    watch = ProcessWatch(needles)
    watch.start()
    dashboard: subprocess.Popen[bytes] | None = None
    try:
        with FakeOpenAI(gsm8k_oracle(wrong_when), sglang=True, api_key=key) as up:
            def record(name: str, done: subprocess.CompletedProcess[str], code: int = 0) -> str:
                outputs[name] = done.stdout + done.stderr
                assert done.returncode == code, (name, outputs[name][-3000:])
                return done.stdout

            run_out = record("run", evalsvc(secret_env, "-v", "run", "--endpoint", "bf16", "--url", up.base_url,
                                            "--model", "fake-model", "--limit", str(LIMIT), "--data", GSM8K_TEST,
                                            "--no-progress"))
            assert f"stored in {make_url(store_url).render_as_string(hide_password=True)}" in run_out
            wrong_db = make_url(store_url).set(database="no_such_db").render_as_string(hide_password=False)
            refused = record("runs on a missing database", evalsvc({**secret_env, "EVALSVC_DB": wrong_db}, "runs"), 2)
            assert "cannot open database postgresql+psycopg://" in outputs["runs on a missing database"], refused

            port = free_port()
            env_report = tmp_path / "step-env.json"
            ladder = write_ladder(tmp_path / "ladder.yaml", up.base_url, port, env_report)
            record("ladder run", evalsvc(secret_env, "-v", "ladder", "run", str(ladder), "--task", "gsm8k", "--limit",
                                         str(LIMIT), "--data", GSM8K_TEST, "--speed", "2", "--no-progress"))
            record("report", evalsvc(secret_env, "report", "--endpoints", "bf16,int4"))
            record("report --json", evalsvc(secret_env, "report", "--endpoints", "bf16,int4", "--json"))
            shown = record("show", evalsvc(secret_env, "show", "bf16", "--json"))
            assert json.loads(shown)["base_url"] == up.base_url
            record("runs", evalsvc(secret_env, "runs", "--json"))
            record("speed -vv", evalsvc(secret_env, "-vv", "speed", "--endpoint", "bf16", "--n", "2"))

            typed = dashboard_argv(store_url, free_port())
            dashboard, base = start_dashboard(env, typed, tmp_path / "dashboard.log")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
                tab = browser.new_context(viewport=VIEWPORT).new_page()
                pages = read_every_page(tab, base)
                pages.append(start_job_in_the_browser(tab, base, up.base_url, key))
                browser.close()
            assert up.authorized > 0
    finally:
        if dashboard is not None:
            stop_group(dashboard)
        watch.stop()

    # The watch really saw every kind of child while it ran.
    assert watch.scans > 10
    for fragment in ("-m dashboard.serve", "dashboard.job_manager", "tests.fake_openai --port"):
        assert watch.saw(fragment), fragment
    # Only the command this test itself typed with the password may show it (`evalsvc dashboard --db URL`; also its
    # children between fork and exec).
    assert [cmd for _, cmd in watch.offenders if cmd != " ".join(typed) + " "] == []
    assert watch.offenders, "the watch never saw the command line typed with the password: it is not looking"

    for text in pages:
        assert not [needle for needle in needles if needle in text]
    masked_store = make_url(store_url).render_as_string(hide_password=True)
    assert any(f"Store: {masked_store}" in text for text in pages)
    assert {name: [n for n in needles if n in out] for name, out in outputs.items()} == {n: [] for n in outputs}
    assert files_holding(tmp_path, needles) == {}
    # The one password typed on a command line was called out.
    assert "--db can be read by every local user in the process list" in (tmp_path / "dashboard.log").read_text()
    assert len(list((tmp_path / "xdg").rglob("*.json"))) == 1 and len(list((tmp_path / "home").rglob("*.log"))) >= 1
    step_env = json.loads(env_report.read_text())
    assert KEY_ENV in step_env and "EVALSVC_DB" not in step_env and "EVALSVC_API_KEY" not in step_env

    rows = dump_store(admin_url)
    assert {table: [row for row in table_rows if any(n in row for n in needles) or "Bearer" in row]
            for table, table_rows in rows.items()} == {table: [] for table in rows}
    endpoints = {row for row in rows["endpoints"]}
    assert len(endpoints) == 3 and all("'api_key': '***'" in row for row in endpoints), endpoints
    assert len(rows["items"]) == 2 * LIMIT + JOB_LIMIT
    assert all("'complete'" in row for row in rows["runs"]) and len(rows["runs"]) == 3
