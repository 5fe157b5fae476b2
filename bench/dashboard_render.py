"""Time each dashboard page in a real browser on a store of 50 runs of 564 items.

    python bench/dashboard_render.py [--db PATH] [--steps 25] [--items 564] [--repeats 3]

Builds the store (25 ladder steps x GSM8K and HumanEval, 564 items each,
random correctness and token counts with a fixed seed) unless --db points at
an existing one, starts the app with `python -m streamlit run`, and loads each
page in headless Chromium. A page counts as rendered when its title is shown,
the script has finished, the socket is connected and no skeleton is left.

Three ways in, per page:
- cold: the first view of the page right after the server starts (a new
  server per page: nothing imported, nothing cached), as a person sees it who
  opens a link to that page first; timed from the moment the server answers
  its health check, twice: in a new browser profile (every Streamlit script
  fetched and compiled again) and in a browser that has shown the dashboard
  before (its cache holds Streamlit's scripts, as a person's who uses the
  dashboard does). The dashboard answers once it has computed every page's
  first view, so the server's start (launch to answering), printed beside,
  includes that work;
- load: a fresh page load of the page's URL (a new session: the browser loads
  Streamlit's scripts again), the first time (results not yet cached; imports
  already done by a warm-up page) and the median of later times;
- switch: a click on the page in the sidebar from another page, as a person
  moves around (median of --repeats), results cached.
The machine's load average is printed with the figures: on a busy machine the
browser's own work (Streamlit lazy-loads each widget's code) dominates. So the
peer, measured the same way at the same time, is a Streamlit page with nothing
on it but its title: the floor Streamlit itself sets on that machine at that
load; the ratio of a page's cold view to the peer's is steadier than either.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from db.engine import open_store  # noqa: E402
from evalsvc.cli.dashboard import streamlit_argv  # noqa: E402
from evalsvc.doctor import chromium_path  # noqa: E402
from tests.dashboard import seed  # noqa: E402

TARGET_S = 2.0
CHROMIUM = chromium_path()
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]
PAGES = {
    "Ladder": "",
    "Disagreements": "/disagreements",
    "Significance": "/significance",
    "Length and time": "/length_time",
    "Evaluate an endpoint": "/evaluate",
}
VIEWPORT = {"width": 1280, "height": 1500}  # the narrowest screen the dashboard is held to
RENDERED_JS = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    return app && app.getAttribute('data-test-script-state') === 'notRunning'
        && app.getAttribute('data-test-connection-state') === 'CONNECTED'
        && !document.querySelector('[data-testid="stSkeleton"]');
}"""


def build_store(path: Path, n_steps: int, n_items: int) -> None:
    """n_steps endpoints, each with a GSM8K and a HumanEval run of n_items items."""
    rng = random.Random(20250101)
    store = open_store(str(path))
    samples = {"gsm8k": [seed.gsm8k_sample(i) for i in range(n_items)],
               "humaneval": [seed.humaneval_sample(i) for i in range(n_items)]}
    skill = {"gsm8k": 0.8, "humaneval": 0.6}
    for step in range(n_steps):
        name = f"step{step:02d}"
        for task, task_samples in samples.items():
            p_right = skill[task] - 0.004 * step
            outcomes = [_outcome(rng, i, p_right, task) for i in range(n_items)]
            seed.add_run(store, name, task, task_samples, outcomes)
        seed.add_speeds(store, name, {"math": 100.0 + 10 * step, "code": 120.0 + 9 * step}, source="bench")
    store.dispose()


def _outcome(rng: random.Random, i: int, p_right: float, task: str) -> seed.Outcome:
    right = rng.random() < p_right
    tokens = max(20, int(rng.gauss(250, 60)))
    if task == "humaneval":
        return seed.code_outcome(i, right, tokens)
    return seed.math_outcome(i, right, tokens)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PEER_APP = "import streamlit as st\n\nst.title('Empty')\n"
PEER_TITLE = "Empty"


def start_app(db: Path, port: int | None = None, peer: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The dashboard on `db` (or the `peer` app), answering on `port`; returns once /_stcore/health says ok."""
    port = port or free_port()
    # The command line `evalsvc dashboard` runs, plus no file watcher and the store.
    argv = [*streamlit_argv(port, "127.0.0.1", headless=True),
            "--server.fileWatcherType", "none", "--", "--db", str(db)]
    if peer is not None:  # the same options, plain `streamlit run` on the empty app
        argv = [sys.executable, "-m", "streamlit", "run", str(peer), *argv[3:argv.index("--")]]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if httpx.get(f"{base}/_stcore/health", timeout=2).text == "ok":
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("streamlit did not start")


def stop_app(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's group; SIGKILL if it has not gone 30 s later (once, at 21:33 on 2026-12-04, the
    empty peer's `streamlit run` stayed, and the whole bench ended on the timeout)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def time_page(page, url: str, title: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds from navigation to a finished render of the page titled `title`."""
    start = time.perf_counter()
    page.goto(url)
    page.locator("h1", has_text=title).first.wait_for(timeout=300_000)
    page.wait_for_function(RENDERED_JS, timeout=300_000)
    return time.perf_counter() - start


def time_switch(page, title: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds from a sidebar click to a finished render of the page titled `title`."""
    start = time.perf_counter()
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
    page.locator("h1", has_text=title).first.wait_for(timeout=300_000)
    page.wait_for_function(RENDERED_JS, timeout=300_000)
    return time.perf_counter() - start


def measure(base: str, repeats: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per page: fresh-load times (first one cold) and sidebar-switch times."""
    from playwright.sync_api import sync_playwright

    loads: dict[str, list[float]] = {title: [] for title in PAGES}
    switches: dict[str, list[float]] = {title: [] for title in PAGES}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport=VIEWPORT).new_page()
        time_page(page, base + PAGES["Evaluate an endpoint"], "Evaluate an endpoint")  # imports, not figures
        for _ in range(repeats + 1):
            for title, path in PAGES.items():
                loads[title].append(time_page(page, base + path, title))
        for _ in range(repeats):
            for title in PAGES:
                switches[title].append(time_switch(page, title))
        browser.close()
    return loads, switches


class Cold(NamedTuple):
    """One page's first views on servers just started, one per repeat."""

    start: list[float]  # launch to answering
    fresh: list[float]  # first view, new browser profile
    cached: list[float]  # first view, a browser that has Streamlit's scripts in its cache


def cold_view(context, db: Path, port: int, app: Path | None, path: str, title: str) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """A new server on `port`, then one page opened in a new tab of `context`: (launch to answering, view)."""
    started = time.perf_counter()
    proc, base = start_app(db, port, app)
    start = time.perf_counter() - started
    try:
        page = context.new_page()
        view = time_page(page, base + path, title)
        page.close()
    finally:
        stop_app(proc)
    return start, view


def measure_cold(db: Path, peer: Path, repeats: int) -> dict[str, Cold]:
    """Per page, and for the peer: its first view on a server just started (one server per view).

    All servers listen on one port, so the browser that has shown every page before (on a server started for
    that) finds Streamlit's scripts in its cache, as a person's browser does.
    """
    from playwright.sync_api import sync_playwright

    port = free_port()
    targets = [(PEER_TITLE, "", peer), *((title, path, None) for title, path in PAGES.items())]
    cold = {title: Cold([], [], []) for title, _, _ in targets}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        used = browser.new_context(viewport=VIEWPORT)
        proc, base = start_app(db, port)
        try:
            for title, path in PAGES.items():
                time_page(used.new_page(), base + path, title)
        finally:
            stop_app(proc)
        for _ in range(repeats):
            for title, path, app in targets:
                fresh_context = browser.new_context(viewport=VIEWPORT)
                start, fresh = cold_view(fresh_context, db, port, app, path, title)
                fresh_context.close()
                _, cached = cold_view(used, db, port, app, path, title)
                for figures, figure in zip(cold[title], (start, fresh, cached)):
                    figures.append(figure)
        browser.close()
    return cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="existing store to use (default: build one in a temp folder)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--items", type=int, default=564)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    db = args.db
    if db is None or not db.exists():
        db = db or Path(tempfile.mkdtemp()) / "bench.db"
        started = time.perf_counter()
        build_store(db, args.steps, args.items)
        print(f"built {db}: {2 * args.steps} runs of {args.items} items in {time.perf_counter() - started:.1f} s")
    peer = Path(tempfile.mkdtemp()) / "empty_app.py"
    peer.write_text(PEER_APP)
    load_before = os.getloadavg()[0]
    cold = measure_cold(db, peer, args.repeats)
    load_cold = os.getloadavg()[0]
    proc, base = start_app(db)
    try:
        loads, switches = measure(base, args.repeats)
    finally:
        stop_app(proc)
    print(f"load average {load_before:.1f} before, {load_cold:.1f} after the cold views, "
          f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores")
    report(cold, loads, switches)


def report(cold: dict[str, Cold], loads: dict[str, list[float]], switches: dict[str, list[float]]) -> None:
    """One line per page: its start and cold views (medians of the repeats, the worst beside them, and the
    ratio to the peer's), then loads and switches on a running server."""
    peer = cold[PEER_TITLE]
    median = statistics.median
    print(f"peer (an empty Streamlit page): server start {median(peer.start):.2f}s, cold view "
          f"{median(peer.fresh):.2f}s in a new browser profile, {median(peer.cached):.2f}s in a browser that has "
          f"been here before (medians of {len(peer.start)})")
    print(f"{'page':<21} {'start':>6} {'cold, new browser':>18} {'cold, used browser':>19} {'x peer':>7} "
          f"{'first load':>10} {'later loads':>11} {'switch':>7}  target {TARGET_S:.0f} s (views)")
    for title in PAGES:
        c = cold[title]
        first, later, switch = loads[title][0], median(loads[title][1:]), median(switches[title])
        verdict = "ok" if max(*c.fresh, *c.cached, first, later, switch) < TARGET_S else "SLOW"
        print(f"{title:<21} {median(c.start):>5.2f}s {median(c.fresh):>6.2f}s (max {max(c.fresh):>5.2f}s) "
              f"{median(c.cached):>6.2f}s (max {max(c.cached):>5.2f}s) {median(c.cached) / median(peer.cached):>6.2f}x "
              f"{first:>9.2f}s {later:>10.2f}s {switch:>6.2f}s  {verdict}")


if __name__ == "__main__":
    main()
