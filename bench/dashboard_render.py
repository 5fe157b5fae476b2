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
  opens a link to that page first;
- load: a fresh page load of the page's URL (a new session: the browser loads
  Streamlit's scripts again), the first time (results not yet cached; imports
  already done by a warm-up page) and the median of later times;
- switch: a click on the page in the sidebar from another page, as a person
  moves around (median of --repeats), results cached.
The machine's load average is printed with the figures: on a busy machine the
browser's own work (Streamlit lazy-loads each widget's code) dominates.
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


def start_app(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    # The command line `evalsvc dashboard` runs, plus no file watcher and the store.
    argv = [*streamlit_argv(port, "127.0.0.1", headless=True),
            "--server.fileWatcherType", "none", "--", "--db", str(db)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/_stcore/health", timeout=2).text == "ok":
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("streamlit did not start")


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
        page = browser.new_context(viewport={"width": 1500, "height": 1500}).new_page()
        time_page(page, base + PAGES["Evaluate an endpoint"], "Evaluate an endpoint")  # imports, not figures
        for _ in range(repeats + 1):
            for title, path in PAGES.items():
                loads[title].append(time_page(page, base + path, title))
        for _ in range(repeats):
            for title in PAGES:
                switches[title].append(time_switch(page, title))
        browser.close()
    return loads, switches


def measure_cold(db: Path) -> dict[str, float]:
    """Per page: its first view on a server just started (one server per page)."""
    from playwright.sync_api import sync_playwright

    cold: dict[str, float] = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for title, path in PAGES.items():
            proc, base = start_app(db)
            try:
                page = browser.new_context(viewport={"width": 1500, "height": 1500}).new_page()
                cold[title] = time_page(page, base + path, title)
                page.context.close()
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
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
    load_before = os.getloadavg()[0]
    cold = measure_cold(db)
    proc, base = start_app(db)
    try:
        loads, switches = measure(base, args.repeats)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores")
    print(f"{'page':<22} {'cold':>7} {'first load':>10} {'later loads':>12} {'switch':>8}  "
          f"target {TARGET_S:.0f} s (all four)")
    for title in PAGES:
        first, later = loads[title][0], statistics.median(loads[title][1:])
        switch = statistics.median(switches[title])
        verdict = "ok" if max(cold[title], first, later, switch) < TARGET_S else "SLOW"
        print(f"{title:<22} {cold[title]:>6.2f}s {first:>9.2f}s {later:>11.2f}s {switch:>7.2f}s  {verdict}")


if __name__ == "__main__":
    main()
