"""The dashboard in a real browser: Debian's Chromium driven by Playwright.

A Streamlit server is started on a seeded store and on an empty one; the tests
click through every page, look for the figures a person would read, and save
screenshots under tests/artifacts/dashboard/ for a person to look at.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evalsvc.cli.dashboard import streamlit_argv
from evalsvc.doctor import CHROMIUM_ENV, chromium_path
from tests.conftest import GSM8K_TEST, free_port, needs_tool, run_cli_process
from tests.dashboard import seed
from tests.fake_openai import FakeOpenAI, StreamScript, gsm8k_oracle

pytest.importorskip("playwright.sync_api", reason="playwright is needed for the browser tests (pip install playwright)")
from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright  # noqa: E402
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

CHROMIUM = chromium_path()
CHROMIUM_INSTALL = f"apt-get install chromium, or set {CHROMIUM_ENV}"
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts" / "dashboard"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]
# The narrowest screen the dashboard is held to: every table's columns and every chart show at this width.
VIEWPORT = {"width": 1280, "height": 2400}
START_TIMEOUT_S = 120
expect.set_options(timeout=30_000)
RENDER_TIMEOUT_MS = 90_000

pytestmark = [pytest.mark.slow, needs_tool(CHROMIUM, CHROMIUM_INSTALL)]


def launch_streamlit(db: str, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the app on `db` in its own process group; returns the process and its base URL."""
    port = free_port()
    # The command line `evalsvc dashboard` runs (toolbar, error details), plus no file watcher and the store.
    argv = [*streamlit_argv(port, "127.0.0.1", headless=True), "--server.fileWatcherType", "none", "--",
            "--db", db]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(proc: subprocess.Popen[bytes], base: str, log_path: Path) -> None:
    """Until /_stcore/health answers ok; stops the process and raises if it never does."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/_stcore/health", timeout=2).text == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    stop(proc)
    raise RuntimeError(f"streamlit did not answer in {START_TIMEOUT_S} s: {log_path.read_text()[-2000:]}")


def start_streamlit(db: str, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The app on `db`, once it answers."""
    proc, base = launch_streamlit(db, log_path)
    wait_healthy(proc, base, log_path)
    return proc, base


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two servers started side by side: on the seeded store and on an empty one."""
    folder = tmp_path_factory.mktemp("browser")
    seed.seed_store(str(folder / "ladder.db")).dispose()
    started = {name: (launch_streamlit(str(folder / f"{name}.db"), folder / f"{name}.log"), folder / f"{name}.log")
               for name in ("ladder", "empty")}
    try:
        for (proc, base), log_path in started.values():
            wait_healthy(proc, base, log_path)
        yield {"seeded": started["ladder"][0][1], "empty": started["empty"][0][1]}
    finally:
        for (proc, _), _ in started.values():
            stop(proc)


@pytest.fixture(scope="module")
def seeded_app(apps: dict[str, str]) -> str:
    return apps["seeded"]


@pytest.fixture(scope="module")
def empty_app(apps: dict[str, str]) -> str:
    return apps["empty"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture()
def page(browser: Browser) -> Iterator[Page]:
    """A tab that fails the test if the page asks anything of a host other than this machine."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    outside: list[str] = []
    tab.on("request", lambda request: outside.append(request.url)
           if not re.match(r"(https?|wss?)://127\.0\.0\.1[:/]|data:|blob:|about:", request.url) else None)
    yield tab
    context.close()
    assert not outside, f"the page fetched from outside the machine: {outside[:5]}"


def choose(page: Page, box: Locator, option: str, exact: bool = False) -> None:
    """Open the select box `box` and pick `option`. A rerun that redraws the box (the one the previous pick
    started, still drawing on a busy machine) closes its list before the option shows: then open it again."""
    for attempt in range(3):
        box.click()
        try:
            page.get_by_role("option", name=option, exact=exact).click(timeout=10_000)
            return
        except PlaywrightTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
            wait_rendered(page)


def wait_rendered(page: Page) -> None:
    """Until the script has finished, the socket is up and no placeholder skeleton is left."""
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            return app && app.getAttribute('data-test-script-state') === 'notRunning'
                && app.getAttribute('data-test-connection-state') === 'CONNECTED'
                && !document.querySelector('[data-testid="stSkeleton"]');
        }""",
        timeout=RENDER_TIMEOUT_MS,
    )


def open_page(page: Page, title: str) -> None:
    """After a click or goto: wait for the page's own title, then for its script to finish.

    Waiting for the title first keeps the previous page's finished state from
    passing for the new page's.
    """
    expect(page.locator("h1").first).to_have_text(title, timeout=RENDER_TIMEOUT_MS)
    wait_rendered(page)


def main_text(page: Page) -> str:
    """The main area's text, one line per line of text (blank lines between elements removed)."""
    return re.sub(r"\n\s*\n+", "\n", page.locator('[data-testid="stMain"]').inner_text())


def grid_text(page: Page, at_least: int = 1) -> str:
    """Text of every dataframe on the page, from the grids' accessible tables (drawn after the script ends)."""
    tables = page.locator('[data-testid="stDataFrame"] table')
    expect(tables.nth(at_least - 1)).to_be_attached()
    return "\n".join(tables.nth(i).text_content() or "" for i in range(tables.count()))


def shoot(page: Page, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"))


CUT_OFF_JS = """() => {
    const main = document.querySelector('[data-testid="stMain"] [data-testid="stMainBlockContainer"]')
        .getBoundingClientRect();
    const cut = [];
    const tables = document.querySelectorAll('[data-testid="stHtml"] table.data');
    for (const table of tables) {
        const box = table.getBoundingClientRect();
        if (box.width === 0) continue;  // in a closed expander
        const holder = table.closest('[data-testid="stHtml"]');
        const heads = [...table.querySelectorAll('th')].map(th => th.innerText.trim());
        if (box.right > main.right + 1 || holder.scrollWidth > holder.clientWidth + 1)
            cut.push('table ' + heads.join('|') + ' ends at ' + Math.round(box.right) + ' px');
    }
    for (const chart of document.querySelectorAll('svg.chart')) {
        const box = chart.getBoundingClientRect();
        if (box.width > 0 && box.right > main.right + 1) cut.push('chart ends at ' + Math.round(box.right) + ' px');
    }
    return {cut: cut, right: main.right, tables: tables.length};
}"""


def assert_nothing_cut_off(page: Page, at_least_tables: int) -> None:
    """Every table (all its columns) and every chart ends inside the page's main column: nothing hides off-screen."""
    found = page.evaluate(CUT_OFF_JS)
    assert found["tables"] >= at_least_tables, found
    assert found["right"] <= page.viewport_size["width"], found
    assert not found["cut"], found["cut"]


# --- the seeded store ------------------------------------------------------------------------


def test_from_which_step_to_ship_to_the_evidence(page: Page, seeded_app: str, artifacts: Path) -> None:
    page.goto(seeded_app)
    open_page(page, "Ladder")
    expect(page.get_by_text("code (humaneval): ship bf16")).to_be_visible()
    expect(page.get_by_text("math (gsm8k): ship int4-spec")).to_be_visible()
    shoot(page, artifacts, "01_ladder")
    # Click 1: the stop decision's evidence link.
    math = page.locator('[class*="st-key-ship_math"]')
    expect(math.get_by_text("The evidence, int4-spec-kernel against int4-spec on gsm8k:")).to_be_visible()
    math.get_by_role("link", name="Disagreements").click()
    open_page(page, "Disagreements")
    expect(page).to_have_url(re.compile(r"/disagreements\?.*a=int4-spec.*b=int4-spec-kernel"))
    text = main_text(page)
    assert "only A right (int4-spec)\n20" in text and "only B right (int4-spec-kernel)\n0" in text
    # The first disagreement is open side by side, with the kernel's HTML shown as text.
    expect(page.get_by_text("Item gsm8k/test/0300")).to_be_visible()
    expect(page.get_by_text(seed.HTML_TEXT).first).to_be_visible()
    assert page.locator('[data-testid="stMain"] b', has_text="bold").count() == 0
    assert page.locator('[data-testid="stMain"] script').count() == 0
    assert page.locator('[data-testid="stMain"] img[src="x"]').count() == 0  # nor its error handler ran:
    assert page.evaluate("document.body.dataset.pwned") is None
    assert page.locator('[data-testid="stMain"] a', has_text="link").count() == 0  # Markdown stays text
    # The diff: the removed line on red, the added on green (their backgrounds differ and are not clear).
    removed = page.locator("pre.mono-diff .mono-del", has_text="-The answer is 300.")
    added = page.locator("pre.mono-diff .mono-add", has_text="+The answer is 301.")
    backgrounds = [line.evaluate("e => getComputedStyle(e).backgroundColor") for line in (removed, added)]
    assert len(set(backgrounds)) == 2 and "rgba(0, 0, 0, 0)" not in backgrounds, backgrounds
    shoot(page, artifacts, "02_disagreements")
    # Click 2: the same pair's significance.
    page.goto(seeded_app)
    open_page(page, "Ladder")
    page.locator('[class*="st-key-ship_math"]').get_by_role("link", name="Significance").click()
    open_page(page, "Significance")
    expect(page.get_by_text("Verdict: worse")).to_be_visible()
    shoot(page, artifacts, "03_significance")


TABLES = '[data-testid="stHtml"] table.data'
CHARTS = '[data-testid="stMarkdownContainer"] svg.chart'


def tables_text(page: Page) -> str:
    """Text of every table on the page (`widgets.table`, HTML: cells wrap, nothing is cut)."""
    return "\n".join(page.locator(TABLES).all_inner_texts())


def expect_charts(page: Page, kinds: tuple[str, ...]) -> None:
    """The page shows these charts (`dashboard.svg`), drawn: each has its marks and a size on screen."""
    for kind in kinds:
        chart = page.locator(f"{CHARTS}.{kind}")
        expect(chart).to_be_visible()
        assert chart.locator("circle, rect").count() > 0, kind


def test_every_page_from_the_sidebar(page: Page, seeded_app: str, artifacts: Path) -> None:
    page.goto(seeded_app)
    open_page(page, "Ladder")
    page.get_by_text("All 3 step-to-step decisions for code").click()
    expect(page.locator(f'[class*="st-key-ship_code"] {TABLES}')).to_be_visible()
    ladder = tables_text(page)
    for figure in ("80.0%", "75.2%", "61.0%", "59.8%", "174.5", "183.5"):
        assert figure in ladder, figure
    assert "stop at bf16" in ladder and "no, after the stop" in ladder
    # The chain's "why" in full, not cut at the cell's edge.
    assert "B decodes 1.12x as fast and writes 1.21x the tokens, so task time B/A is 1.085" in ladder
    expect_charts(page, ("accuracy-chart", "speed-chart"))
    assert_nothing_cut_off(page, at_least_tables=3)  # the open chain and the two task tables
    shoot(page, artifacts, "04_ladder_1280px")
    expected = {
        "Disagreements": ("only A right (bf16)\n2", "Item gsm8k/test/0318"),
        "Significance": ("Cochran's Q (gsm8k, 4 steps, 399 items", "no change beyond the margin (2.0 pts)", "Noise floor"),
        "Length and time": ("task time B/A\n0.584", "Step N or N+1, per workload",
                            "B decodes 1.80x as fast and writes 1.05x the tokens, so task time B/A is 0.584"),
        "Evaluate an endpoint": ("Start evaluation", "No evaluation started here yet."),
    }
    held_to_width = {"Significance": 2, "Length and time": 2}  # tables shown whole at 1,280 px
    for index, (title, figures) in enumerate(expected.items(), start=5):
        page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=title).click()
        open_page(page, title)
        text = main_text(page)
        for figure in figures:
            assert figure in text, (title, figure)
        if title == "Length and time":
            expect_charts(page, ("histogram-chart", "scatter-chart"))
        if title in held_to_width:
            assert_nothing_cut_off(page, at_least_tables=held_to_width[title])
        shoot(page, artifacts, f"{index:02d}_{title.lower().replace(' ', '_')}")


def test_the_width_check_finds_a_table_cut_off(page: Page, seeded_app: str) -> None:
    """The check above can fail: on a phone-sized screen the Significance table no longer fits."""
    page.set_viewport_size({"width": 420, "height": 2400})
    page.goto(f"{seeded_app}/significance")
    open_page(page, "Significance")
    with pytest.raises(AssertionError, match="table verdict"):
        assert_nothing_cut_off(page, at_least_tables=2)


def test_length_page_for_the_worked_example(page: Page, seeded_app: str, artifacts: Path) -> None:
    page.goto(f"{seeded_app}/length_time?task=humaneval&a=bf16&b=int4")
    open_page(page, "Length and time")
    text = main_text(page)
    assert f"task time B/A\n{(242 / 252) / (200 / 226):.3f}" in text
    assert "output tokens B/A\n1.21x" in text
    expect_charts(page, ("histogram-chart", "scatter-chart"))
    shoot(page, artifacts, "08_length_time_worked_example")


def test_picking_a_pair_in_the_selectboxes(page: Page, seeded_app: str) -> None:
    page.goto(f"{seeded_app}/significance")
    open_page(page, "Significance")
    choose(page, page.get_by_role("combobox", name="Step B (candidate)"), "int4-spec-kernel")
    wait_rendered(page)
    expect(page.get_by_text("Verdict: worse")).to_be_visible()
    expect(page).to_have_url(re.compile(r"b=int4-spec-kernel"))


def test_a_margin_set_in_the_sidebar_decides_and_stays(page: Page, seeded_app: str) -> None:
    """The margins box draws its fields once opened (a rerun); a margin set there changes the decision, stays
    in the URL, and survives the box closing and a reload."""
    page.goto(f"{seeded_app}/?a=int4-spec&b=int4-spec-kernel")
    open_page(page, "Ladder")
    code = page.locator('[class*="st-key-pair_code"]')
    expect(code.get_by_text("code: can't tell yet")).to_be_visible()
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_label("humaneval margin (points)").count() == 0  # closed: no fields drawn
    sidebar.get_by_text("Margins (how much worse is still fine)").click()
    field = sidebar.get_by_label("humaneval margin (points)")
    expect(field).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    field.fill("5")
    field.press("Enter")
    expect(code.get_by_text("code: take int4-spec-kernel")).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    expect(page).to_have_url(re.compile(r"margin_humaneval=5"))
    sidebar.get_by_text("Margins (how much worse is still fine)").click()
    expect(field).to_have_count(0, timeout=RENDER_TIMEOUT_MS)
    wait_rendered(page)
    expect(code.get_by_text("code: take int4-spec-kernel")).to_be_visible()
    page.reload()
    open_page(page, "Ladder")
    expect(code.get_by_text("code: take int4-spec-kernel")).to_be_visible()


def test_decide_step_3_against_step_4_for_math_code_and_chat(page: Page, seeded_app: str, artifacts: Path) -> None:
    page.set_viewport_size({"width": 1280, "height": 2400})
    page.goto(seeded_app)
    open_page(page, "Ladder")
    assert page.get_by_role("button", name="Deploy").count() == 0
    choose(page, page.get_by_role("combobox", name="Step A (current)"), "int4-spec", exact=True)
    wait_rendered(page)
    choose(page, page.get_by_role("combobox", name="Step B (candidate)"), "int4-spec-kernel")
    wait_rendered(page)
    expect(page).to_have_url(re.compile(r"a=int4-spec&b=int4-spec-kernel|b=int4-spec-kernel.*a=int4-spec"))
    for workload, words in (("math", "stop at int4-spec"), ("code", "can't tell yet"), ("chat", "stop at int4-spec")):
        expect(page.locator(f'[class*="st-key-pair_{workload}"]').get_by_text(f"{workload}: {words}")).to_be_visible()
    # Waited for, not read at once: while the rerun draws, the box may still hold the previous pair's lines.
    code = page.locator('[class*="st-key-pair_code"]')
    expect(code).to_contain_text("What would settle it: these 164 items establish a margin of")
    expect(code).to_contain_text("task time B/A 0.905x")
    wait_rendered(page)
    shoot(page, artifacts, "12_step3_vs_step4_1280px")
    # The view survives a reload: the pair is in the URL.
    page.reload()
    open_page(page, "Ladder")
    expect(page.locator('[class*="st-key-pair_code"]').get_by_text("code: can't tell yet")).to_be_visible()
    # Swapped, the page says why the answer differs.
    page.goto(f"{seeded_app}/?a=int4-spec-kernel&b=int4-spec")
    open_page(page, "Ladder")
    expect(page.get_by_text("B (int4-spec) comes before A (int4-spec-kernel) in the ladder.")).to_be_visible()
    shoot(page, artifacts, "13_swapped_pair")


def click_grid_row(page: Page, row: int) -> None:
    """Click the row marker of row `row` (0-based) of the first dataframe: the grid is a canvas."""
    grid = page.locator('[data-testid="stDataFrame"]').first
    box = grid.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + 12, box["y"] + 35 + 35 * row + 17)


def test_inspect_code_disagreements_row_click_errors_and_links(page: Page, seeded_app: str, artifacts: Path) -> None:
    page.set_viewport_size({"width": 1280, "height": 2400})
    page.goto(f"{seeded_app}/disagreements?task=humaneval&a=int4-spec&b=int4-spec-kernel")
    open_page(page, "Disagreements")
    expect(page.get_by_text("Item HumanEval/98")).to_be_visible()
    click_grid_row(page, 1)
    wait_rendered(page)
    expect(page.get_by_text("Item HumanEval/99")).to_be_visible()
    expect(page).to_have_url(re.compile(r"item=HumanEval%2F99"))
    # The programs side by side in monospace, each once.
    codes = page.locator("pre.mono")
    expect(codes.filter(has_text="return x + 99").first).to_be_visible()
    expect(codes.filter(has_text="return x - 99").first).to_be_visible()
    assert "monospace" in codes.first.evaluate("e => getComputedStyle(e).fontFamily")
    assert page.locator('[data-testid="stText"]', has_text="return x").count() == 0
    shoot(page, artifacts, "14_code_disagreement_row_clicked")
    # Failed and cut items are listed and labelled.
    page.goto(f"{seeded_app}/disagreements?task=gsm8k&a=int4-spec&b=int4-spec-kernel&show=errors+and+cut+answers")
    open_page(page, "Disagreements")
    expect(page.get_by_text("1 item was left out of the comparison (1 error in B)")).to_be_visible()
    grid = grid_text(page)
    assert "gsm8k/test/0399" in grid and "error" in grid and "wrong, cut at the token limit" in grid
    expect(page.get_by_text("Item gsm8k/test/0399")).to_be_visible()  # failed items first
    expect(page.get_by_text("HTTP 500 after 3 attempts")).to_be_visible()
    shoot(page, artifacts, "15_failed_item")
    click_grid_row(page, 3)
    wait_rendered(page)
    expect(page.get_by_text("Item gsm8k/test/0382")).to_be_visible()
    expect(page.get_by_text("the answer was cut at the token limit after 2048 tokens")).to_be_visible()
    # A link to an item the runs do not have opens none.
    page.goto(f"{seeded_app}/disagreements?task=gsm8k&a=int4-spec&b=int4-spec-kernel&item=gsm8k%2Ftest%2F9999")
    open_page(page, "Disagreements")
    expect(page.get_by_text("No item 'gsm8k/test/9999' in the gsm8k runs")).to_be_visible()
    expect(page.get_by_text(re.compile(r"^Item gsm8k/test/\d+$"))).to_have_count(0)


def test_chosen_steps_survive_a_reload(page: Page, seeded_app: str) -> None:
    page.goto(f"{seeded_app}/?steps=bf16,int4-spec-kernel")
    open_page(page, "Ladder")
    expect(page.get_by_text("2 steps: bf16 → int4-spec-kernel.")).to_be_visible()
    page.reload()
    open_page(page, "Ladder")
    expect(page.get_by_text("2 steps: bf16 → int4-spec-kernel.")).to_be_visible()


# --- the empty store -------------------------------------------------------------------------


def test_empty_store_shows_how_to_start(page: Page, empty_app: str, artifacts: Path) -> None:
    pages = {"": "Ladder", "/disagreements": "Disagreements", "/significance": "Significance",
             "/length_time": "Length and time"}
    for path, title in pages.items():
        page.goto(empty_app + path)
        open_page(page, title)
        text = main_text(page)
        assert "No runs in this store yet" in text, path
        assert "evalsvc run --endpoint" in text and "evalsvc demo" in text, path
        assert page.locator('[data-testid="stException"]').count() == 0, path
    shoot(page, artifacts, "09_empty_store")
    page.goto(empty_app + "/evaluate")
    open_page(page, "Evaluate an endpoint")
    expect(page.get_by_role("button", name="Start evaluation")).to_be_visible()
    shoot(page, artifacts, "10_empty_evaluate")


def job_boxes(page: Page, what: str) -> Locator:
    """The boxes of the job started from the page for `what` (a step, or e.g. 'speed of int4 (math)')."""
    return page.locator('[class*="st-key-job_"]', has_text=what)


def wait_job(page: Page, what: str, *says: str | re.Pattern[str]) -> Locator:
    """The box of the job for `what` once it says each of `says`. While a rerun redraws the job, its old box (same
    key, an earlier state) can stay in the page for a moment beside the new one: the box is picked by what it says,
    and the old one must then go."""
    box = job_boxes(page, what)
    for text in says:
        box = box.filter(has_text=text)
    expect(box.first).to_be_visible(timeout=RENDER_TIMEOUT_MS)
    expect(job_boxes(page, what)).to_have_count(1, timeout=RENDER_TIMEOUT_MS)
    return box.first


# --- a run started from the page (last: it fills the empty store) ----------------------------


def test_evaluate_starts_a_run_and_shows_progress_after_reload(
    page: Page, empty_app: str, artifacts: Path, tmp_path: Path
) -> None:
    from tests.dashboard.test_app import GOLD, write_gsm8k
    from tests.fake_openai import FakeOpenAI, Reply

    data_file = write_gsm8k(tmp_path)
    # Slow answers: the run is still going when the Ladder opens, so its arrival there is seen without a reload.
    with FakeOpenAI(responder=lambda body: Reply(text="The answer is 7."), latency_s=5.0) as server:
        page.goto(empty_app + "/evaluate")
        open_page(page, "Evaluate an endpoint")
        page.get_by_role("textbox", name="Name for this step").fill("browser-step")
        page.get_by_label("Server address (OpenAI-compatible)").fill("http://not a url")
        page.get_by_label("Model name, as the server lists it at /v1/models").fill("fake-model")
        page.get_by_role("button", name="Start evaluation").click()
        expect(page.get_by_text("The server address 'http://not a url' is not a valid address")).to_be_visible()
        shoot(page, artifacts, "10b_evaluate_bad_address")
        page.get_by_label("Server address (OpenAI-compatible)").fill(server.base_url)
        page.get_by_role("textbox", name="GSM8K questions file or folder on this machine (optional)").fill(str(data_file))
        page.get_by_role("button", name="Start evaluation").click()
        expect(page.get_by_text("Started: evalsvc run --endpoint browser-step")).to_be_visible()
        page.goto(empty_app)
        open_page(page, "Ladder")
        expect(page.get_by_text("No runs in this store yet")).to_be_visible()
        # No reload: the page notices the finished run by itself.
        expect(page.get_by_text("No runs in this store yet")).to_have_count(0, timeout=RENDER_TIMEOUT_MS)
        expect(page.locator("h1").first).to_have_text("Ladder")
        # A reload opens a new session that still finds the job, done, with its accuracy and a link.
        page.goto(empty_app + "/evaluate")
        open_page(page, "Evaluate an endpoint")
        wait_job(page, "browser-step", "browser-step: finished",
                 f"gsm8k: {len(GOLD)}/{len(GOLD)} items, 0 errors, complete",
                 f"gsm8k: accuracy {100 * GOLD.count(7) / len(GOLD):.1f}%")
        shoot(page, artifacts, "11_evaluate_after_run")
        assert len(server.requests) == len(GOLD)
    page.get_by_role("link", name="Where browser-step stands on the ladder").click()
    open_page(page, "Ladder")
    expect(page.get_by_text("No runs in this store yet")).to_have_count(0)


# --- decode speeds from the Evaluate page (its own store: it measures and stores speeds) ------


def evaluate(db: str, step: str, base_url: str) -> None:
    """Store a run of 20 GSM8K questions for `step`, answered by the server at `base_url`, through the CLI."""
    result = run_cli_process("run", "--endpoint", step, "--url", base_url, "--model", "fake-model", "--data",
                             GSM8K_TEST, "--db", db, "--limit", "20", "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture()
def speed_app(tmp_path: Path) -> Iterator[tuple[str, FakeOpenAI]]:
    """bf16 and int4 evaluated on 20 GSM8K questions through the CLI (bf16 answers right, int4 streams "t0 t1 ..."
    from a scripted server that keeps running at its stored address); the app on that store. Yields the app and the
    server."""
    db = str(tmp_path / "speeds.db")
    # In a process of its own: Playwright's event loop runs in this thread, and the CLI runs one too.
    with FakeOpenAI(gsm8k_oracle(lambda q: False, lambda q: 40)) as oracle:
        evaluate(db, "bf16", oracle.base_url)
    with StreamScript(ttft_s=0.02, interval_s=0.005, n_tokens=40).server() as server:
        evaluate(db, "int4", server.base_url)
        proc, base = start_streamlit(db, tmp_path / "speeds.log")
        try:
            yield base, server
        finally:
            stop(proc)


def fill_speed_form(page: Page, step: str, workload: str, tps: str = "0", source: str = "", limit: str = "") -> None:
    form = page.locator('[data-testid="stForm"]', has_text="Measure speed (or store the figure entered)")
    choose(page, form.get_by_role("combobox", name="Step", exact=True), step, exact=True)
    choose(page, form.get_by_role("combobox", name="Workload", exact=True), workload, exact=True)
    if limit:
        form.get_by_label("Prompts to time").fill(limit)
    form.get_by_label("Or: decode tokens per second from a vendor table (0 = measure)").fill(tps)
    form.get_by_label("Where that figure comes from").fill(source)
    form.get_by_role("button", name="Measure speed (or store the figure entered)").click()


COLUMN_BY_STEP_JS = """column => {
    for (const table of document.querySelectorAll('[data-testid="stHtml"] table.data')) {
        const rows = [...table.rows].map(r => [...r.cells].map(c => c.innerText.trim()));
        const at = rows[0].indexOf(column), step = rows[0].indexOf('step');
        if (at >= 0 && step >= 0) return Object.fromEntries(rows.slice(1).map(r => [r[step], r[at]]));
    }
    return null;
}"""


def column_by_step(page: Page, column: str) -> dict[str, str]:
    """One column of the first table that has it, by the row's step."""
    return page.evaluate(COLUMN_BY_STEP_JS, column)


def wait_column(page: Page, column: str, expected: dict[str, str]) -> None:
    """Until the first table with `column` reads `expected` by step (the page redraws it by itself)."""
    page.wait_for_function(f"([column, expected]) => JSON.stringify(({COLUMN_BY_STEP_JS})(column)) "
                           "=== JSON.stringify(expected)", arg=[column, expected], timeout=RENDER_TIMEOUT_MS)


def test_decode_speeds_measured_and_entered_from_the_evaluate_page(
    page: Page, speed_app: tuple[str, FakeOpenAI], artifacts: Path
) -> None:
    base, server = speed_app
    before = len(server.requests)  # the evaluation's requests
    # No speeds yet: the ladder's math table has no tok/s and the pair has no task time.
    page.goto(f"{base}/length_time?task=gsm8k&a=bf16&b=int4")
    open_page(page, "Length and time")
    expect(page.get_by_text("No math decode speed stored for both steps")).to_be_visible()
    # A second tab stays on the Ladder, never reloaded: the speeds stored below must appear there by themselves.
    ladder_tab = page.context.new_page()
    ladder_tab.goto(base)
    open_page(ladder_tab, "Ladder")
    assert column_by_step(ladder_tab, "math tok/s") == {"bf16": "n/a", "int4": "n/a"}
    assert column_by_step(ladder_tab, "task time vs prev") == {"bf16": "n/a", "int4": "n/a"}
    # 1. Measure int4's math speed against its running server.
    page.goto(f"{base}/evaluate")
    open_page(page, "Evaluate an endpoint")
    fill_speed_form(page, "int4", "math", limit="3")
    expect(page.get_by_text("Started: evalsvc speed --endpoint int4 --workload math --limit 3")).to_be_visible()
    measured = wait_job(page, "speed of int4 (math)", "speed of int4 (math): finished",
                        re.compile(r"int4 math speed now stored: \d+ tok/s measured over 3 requests"))
    shoot(page, artifacts, "16_speed_measured")
    probes = server.requests[before:]
    assert len(probes) == 4 and all(body["stream"] for body in probes), probes  # a warm-up, then 3 timed, streamed
    measured_tps = int(re.search(r"math speed now stored: (\d+) tok/s", measured.inner_text()).group(1))
    # 2. A vendor figure for bf16, with its source.
    fill_speed_form(page, "bf16", "math", tps="300", source="vendor table 2026-11")
    expect(page.get_by_text("Started: evalsvc speed --endpoint bf16 --workload math --tokens-per-second 300 "
                            "--source vendor table 2026-11")).to_be_visible()
    wait_job(page, "speed of bf16 (math)",
             "bf16 math speed now stored: 300 tok/s entered by hand (vendor table 2026-11)")
    shoot(page, artifacts, "17_speed_entered_by_hand")
    # 3. A figure without its source is refused in one line, and nothing is started.
    fill_speed_form(page, "int4", "code", tps="250")
    refusal = page.locator('[data-testid="stAlertContentError"]')
    expect(refusal).to_have_count(1)
    expect(refusal).to_have_text(re.compile(r"^[^\n]*where the figure of 250 tok/s comes from[^\n]*$"))
    shoot(page, artifacts, "18_speed_without_source")
    # A source without its figure is refused too, not measured with the source dropped.
    fill_speed_form(page, "int4", "code", source="vendor table 2026-11")
    expect(refusal).to_have_text("A source ('vendor table 2026-11') was entered without its tokens per second: "
                                 "enter the figure, or clear the source to measure the server.")
    wait_rendered(page)
    expect(page.get_by_text("Started: evalsvc speed --endpoint int4 --workload code")).to_have_count(0)
    expect(job_boxes(page, "speed of int4 (code)")).to_have_count(0)
    # The ladder and the pair now use both: tok/s in the math table, a task time with each speed's origin.
    speeds = {"bf16": "300", "int4": str(measured_tps)}
    try:
        wait_column(ladder_tab, "math tok/s", speeds)
    except PlaywrightTimeout:
        pytest.fail(f"the Ladder tab still reads {column_by_step(ladder_tab, 'math tok/s')}, not {speeds}")
    task_time = column_by_step(ladder_tab, "task time vs prev")
    assert task_time["bf16"] == "n/a" and re.fullmatch(r"\d\.\d{3}x \(\d\.\d{3} to \d\.\d{3}\)", task_time["int4"]), task_time
    shoot(ladder_tab, artifacts, "19_ladder_with_speeds")
    page.goto(f"{base}/length_time?task=gsm8k&a=bf16&b=int4")
    open_page(page, "Length and time")
    text = main_text(page)
    assert "No math decode speed stored" not in text
    assert "A: 300 tok/s entered by hand (vendor table 2026-11)" in text, text
    assert f"B: {measured_tps} tok/s measured over 3 requests (int4 math probe)" in text, text
    assert re.search(r"task time B/A\n\d\.\d{3}", text), text
    shoot(page, artifacts, "20_length_time_with_speeds")
