"""Page logic of the dashboard with Streamlit's AppTest, on real SQLite stores.

Expected figures are worked out here from the seed's definitions (see
tests/dashboard/seed.py), not read back from the dashboard's own code.
"""

from __future__ import annotations

import html
import json
import re
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import analysis, data, job_manager, widgets
from db import queries
from db.engine import open_store
from db.models import Run
from tests.dashboard import seed
from tests.fake_openai import FakeOpenAI, Reply

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("seeded") / "ladder.db"
    seed.seed_store(str(path)).dispose()
    return str(path)


@pytest.fixture()
def empty_db(tmp_path: Path) -> str:
    return str(tmp_path / "empty.db")


def open_app(monkeypatch: pytest.MonkeyPatch, db: str, page: str | None = None, **params: str) -> AppTest:
    """The app on `db`, optionally on another page with query parameters, after one run."""
    monkeypatch.setenv("EVALSVC_DB", db)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT_S)
    at.query_params.update(params)
    at.run()
    if page is not None:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def grid_frame(at: AppTest, index: int) -> pd.DataFrame:
    return at.dataframe[index].value


class _TableReader(HTMLParser):
    """The rows of an HTML table as lists of cell texts (entities decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def shown_tables(at: AppTest) -> list[pd.DataFrame]:
    """Every `widgets.table` of the page (HTML tables), in order, as a person reads them."""
    found = []
    for element in at.get("html"):
        if element.proto.body.startswith('<table class="data">'):
            reader = _TableReader()
            reader.feed(element.proto.body)
            found.append(pd.DataFrame(reader.rows[1:], columns=reader.rows[0]))
    return found


def shown_table(at: AppTest, index: int, by: str | None = None) -> pd.DataFrame:
    """The page's `index`th `widgets.table`, indexed `by` a column if given."""
    frame = shown_tables(at)[index]
    return frame.set_index(by) if by is not None else frame


# --- ladder ----------------------------------------------------------------------------


def test_ladder_says_which_step_to_ship_per_workload(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db)
    headings = [m.value for m in at.markdown if m.value.startswith("####")][:3]
    assert headings == [
        r"#### math (gsm8k): ship **int4\-spec**, stop there (not **int4\-spec\-kernel**)",
        r"#### code (humaneval): ship **bf16**, stop there (not **int4**)",
        r"#### chat: ship **int4\-spec**, stop there (not **int4\-spec\-kernel**)",  # the seed's chat probes
    ]
    lines = [m.value for m in at.markdown]
    # The worked example: 21% more tokens at 252 against 226 tok/s, so code tasks finish 8.5% later.
    code_stop = lines.index(r":red[**stop at bf16 for code, tasks finish 8\.5% later on int4**]")
    expected_ratio = (242 / 252) / (200 / 226)
    figures = lines[code_stop + 1]
    for part in (r"accuracy\: no change beyond the margin", r"tokens B/A 1\.21", r"speed B/A 1\.12",
                 f"task time B/A {expected_ratio:.3f}x".replace(".", r"\.")):
        assert part in figures, (part, figures)
    code_chain = shown_table(at, 1)
    # The kernel step's 2 lost problems of 164: inconclusive at 2 points, but tasks finish sooner.
    assert list(code_chain["decision"]) == ["stop at bf16", "take int4-spec", "can't tell yet"]
    assert list(code_chain["on the path"]) == ["yes", "no, after the stop", "no, after the stop"]
    # Chat: the worst verdict of the pair's tasks stands in, the time comes from the chat probes.
    chat = lines[lines.index(r":red[**stop at int4\-spec for chat, tasks finish 15\.3% sooner on int4\-spec\-kernel but its accuracy is worse**]") + 1]
    assert r"accuracy\: worse \(from gsm8k\)" in chat
    chat_time = (sum(0.05 + (205 + p) / (280 + p % 5) for p in range(20))
                 / sum(0.05 + (210 + p) / (240 + p % 5) for p in range(20)))
    assert f"task time B/A {chat_time:.3f}x".replace(".", r"\.") in chat


def test_the_warm_up_computes_what_every_page_opens_on(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    """What `dashboard.serve` computes while the server starts is what each page's first view asks for, with
    the same cache keys: opening any page afterwards reads no items and computes no ladder, pair or flip rate."""
    import streamlit as st

    from evalsvc.decision import build
    from evalsvc.statistics import paired_tests, pairing

    st.cache_data.clear()
    st.cache_resource.clear()
    data.warm_up(data.db_url(["--db", seeded_db]))
    computed: list[str] = []
    for module, name in ((build, "build_ladder"), (build, "pair_tokens"), (queries, "items_frame"),
                         (queries, "items_frames"), (pairing, "pair_runs"), (paired_tests, "flip_rate")):
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=original, _n=name, **k: computed.append(_n) or _f(*a, **k))
    for page in (None, "views/disagreements.py", "views/significance.py", "views/length_time.py"):
        open_app(monkeypatch, seeded_db, page)
    assert computed == []
    # And the check can fail: another pair than the default one is computed on the spot.
    open_app(monkeypatch, seeded_db, "views/disagreements.py", task="humaneval", a="int4", b="int4-spec")
    assert "pair_runs" in computed


def test_ladder_without_chat_speeds_says_how_to_measure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "nochat.db"))
    for step in ("s1", "s2"):
        seed.add_run(store, step, "gsm8k", [seed.gsm8k_sample(i) for i in range(40)],
                     [seed.math_outcome(i, i < 30, 100) for i in range(40)])
    store.dispose()
    at = open_app(monkeypatch, str(tmp_path / "nochat.db"))
    headings = [m.value for m in at.markdown if m.value.startswith("####")]
    assert not any("chat" in h for h in headings), headings
    assert any(c.value.startswith("chat: no step has a chat speed yet") for c in at.caption)
    # One step, one item set: words in the singular.
    lines = [m.value for m in at.markdown]
    assert any("no math speed for s1" in line for line in lines), lines
    assert "The step-to-step decision for math" in [e.label for e in at.expander]
    # Code has no runs here: its "can't tell yet" links to no HumanEval evidence.
    links = [link.proto.query_string for link in at.page_link]
    assert links and all("task=gsm8k" in query for query in links), links


def test_any_two_steps_answer_stop_at_a_or_take_b(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, a="int4-spec", b="int4-spec-kernel")
    pair = {m.value for m in at.markdown if m.value.startswith("#### ") and ":" in m.value and "ship" not in m.value}
    assert pair == {r"#### math: stop at int4\-spec", "#### code: can't tell yet", r"#### chat: stop at int4\-spec"}
    lines = [m.value for m in at.markdown]
    settle = [line for line in lines if line.startswith("What would settle it")]
    # 164 items, 2 lost: the interval reaches past -2 points; what would settle it is said.
    assert any("these 164 items establish a margin of" in line for line in settle), settle
    assert at.query_params["a"] == "int4-spec" and at.query_params["b"] == "int4-spec-kernel"
    swapped = open_app(monkeypatch, seeded_db, a="int4-spec-kernel", b="int4-spec")
    assert any(i.value.startswith("B (int4-spec) comes before A (int4-spec-kernel) in the ladder. A and B are not "
                                  "interchangeable") for i in swapped.info)


def open_margins(at: AppTest) -> AppTest:
    """Open the sidebar's margins box, as a click does (it reruns the page)."""
    at.session_state["margins_open"] = True
    at.run()
    assert at.sidebar.number_input, "the margins box drew no fields when open"
    return at


def test_margin_per_task_changes_the_verdict_and_stays_in_the_url(monkeypatch: pytest.MonkeyPatch,
                                                                 seeded_db: str) -> None:
    # The kernel's code step: 2 of 164 lost, interval about -3.9 to +0.4 points: inconclusive at 2, fine at 5.
    at = open_app(monkeypatch, seeded_db, a="int4-spec", b="int4-spec-kernel")
    assert "#### code: can't tell yet" in [m.value for m in at.markdown]
    # Closed, the box draws no fields (the browser loads no number-field code on a first view).
    assert not at.sidebar.number_input
    open_margins(at).sidebar.number_input(key="margin_field_humaneval").set_value(5.0).run()
    assert not at.exception
    pair = [m.value for m in at.markdown if m.value.startswith("#### code:")]
    assert pair == [r"#### code: take int4\-spec\-kernel"], pair
    assert at.query_params["margin_humaneval"] == "5"
    # Closing the box keeps the margin: the verdict and the URL stay.
    at.session_state["margins_open"] = False
    at.run()
    assert not at.sidebar.number_input
    assert [m.value for m in at.markdown if m.value.startswith("#### code:")] == pair
    assert at.query_params["margin_humaneval"] == "5"
    # Opened again, the field shows the margin in use.
    assert open_margins(at).sidebar.number_input(key="margin_field_humaneval").value == 5.0
    again = open_app(monkeypatch, seeded_db, a="int4-spec", b="int4-spec-kernel", margin_humaneval="5")
    assert r"#### code: take int4\-spec\-kernel" in [m.value for m in again.markdown]


SVG = "{http://www.w3.org/2000/svg}"


def shown_charts(at: AppTest) -> dict[str, ET.Element]:
    """The page's charts (`dashboard.svg`, shown as Markdown) by their kind, each parsed as XML: a chart
    that is not well-formed fails here."""
    found = {}
    for element in at.markdown:
        if element.value.startswith("<svg"):
            assert "\n\n" not in element.value  # a blank line would end the HTML block: the rest read as Markdown
            chart = ET.fromstring(element.value)
            found[chart.get("class").split()[1]] = chart
    return found


def chart_texts(chart: ET.Element, cls: str) -> list[str]:
    return [t.text or "" for t in chart.iter(f"{SVG}text") if t.get("class") == cls]


def groups(chart: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in chart.iter(f"{SVG}g") if g.get("class") == cls]


def test_charts_read_correctly(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    from dashboard import charts, widgets

    at = open_app(monkeypatch, seeded_db)
    ladder = shown_charts(at)
    accuracy = ladder["accuracy-chart"]
    # The axis runs from 0 to 100%; dots with intervals, nothing joins the steps (they may score different items).
    assert chart_texts(accuracy, "tick") == ["0%", "20%", "40%", "60%", "80%", "100%"]
    assert not list(accuracy.iter(f"{SVG}polyline")) and not list(accuracy.iter(f"{SVG}path"))
    points = groups(accuracy, "point")
    assert {(p.get("data-task"), p.get("data-step")) for p in points} == {
        (task, step) for task in ("gsm8k", "humaneval") for step in seed.STEPS}
    for point in points:
        (rule,) = point.iter(f"{SVG}line")
        assert rule.get("x1") == rule.get("x2")  # the interval is vertical, at the dot
        colour = widgets.WORKLOAD_COLORS[analysis.workload_of(point.get("data-task"))]
        assert point.find(f"{SVG}circle").get("fill") == rule.get("stroke") == colour
    # A dot sits at its accuracy between the 0% and 100% grid lines (the table's figure, checked against the seed).
    grid = [float(line.get("y1")) for line in accuracy.iter(f"{SVG}line") if line.get("class") == "grid"]
    shown = float(shown_table(at, 3, by="step").loc["bf16", "accuracy (95% CI)"].split("%")[0]) / 100
    dot = next(p for p in points if p.get("data-step") == "bf16" and p.get("data-task") == "gsm8k")
    assert float(dot.find(f"{SVG}circle").get("cy")) == pytest.approx(grid[0] + (grid[-1] - grid[0]) * shown, abs=0.6)
    speed = ladder["speed-chart"]
    series = {g.get("data-workload"): g for g in groups(speed, "series")}
    assert list(series) == ["math", "code", "chat"]
    for workload, g in series.items():
        assert {c.get("fill") for c in g.iter(f"{SVG}circle")} == {widgets.WORKLOAD_COLORS[workload]}
        assert len(list(g.iter(f"{SVG}circle"))) == len(seed.STEPS)
    length = shown_charts(open_app(monkeypatch, seeded_db, "views/length_time.py", task="humaneval", a="int4",
                                   b="int4-spec-kernel"))
    histogram = length["histogram-chart"]
    # Each step keeps the colour of its place in the ladder: int4 is the 2nd step, the kernel the 4th.
    bars = {g.get("data-step"): g for g in groups(histogram, "bars")}
    assert {r.get("fill") for r in bars["int4"]} == {widgets.STEP_PALETTE[1]}
    assert {r.get("fill") for r in bars["int4-spec-kernel"]} == {widgets.STEP_PALETTE[3]}
    # Every item with a token count is in one bar: 164 HumanEval items on each step.
    for g in bars.values():
        assert sum(int(r.find(f"{SVG}title").text.split(": ")[1].split()[0]) for r in g) == 164
    assert "items" in [t.text for t in histogram.iter(f"{SVG}text")]
    scatter = length["scatter-chart"]
    outcomes = [g.get("data-outcome") for g in groups(scatter, "outcome")]
    # Agreement is drawn first, the disagreements last, on top; they are larger, and "both right" is not red.
    assert outcomes.index("both right") < outcomes.index("A only right")
    assert outcomes.index("both wrong") < outcomes.index("B only right")
    radius = {g.get("data-outcome"): {float(c.get("r")) for c in g} for g in groups(scatter, "outcome")}
    assert len(radius["A only right"]) == 1 and min(radius["A only right"]) > max(radius["both right"])
    assert charts.OUTCOME_STYLE["B only right"][1] > charts.OUTCOME_STYLE["both wrong"][1]
    fills = {g.get("data-outcome"): g.get("fill") for g in groups(scatter, "outcome")}
    assert fills["both right"] not in ("#d62728", "red")
    assert sum(len(g) for g in groups(scatter, "outcome")) == 164


def test_ladder_table_figures_match_the_seed(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db)
    gsm8k = shown_table(at, 3, by="step")
    assert list(gsm8k.index) == list(seed.STEPS)
    kernel = [seed.kernel_math(i) for i in range(seed.GSM8K_N)]
    scored = [o for o in kernel if o.error is None]
    assert gsm8k.loc["int4-spec-kernel", "accuracy (95% CI)"].startswith(
        f"{100 * sum(o.correct for o in scored) / len(scored):.1f}% (")
    truncated = sum(o.finish_reason == "length" for o in kernel)
    assert gsm8k.loc["int4-spec-kernel", "errors / truncated"] == f"1 / {truncated}"
    bf16_tokens = pd.Series([seed.bf16_math(i).tokens for i in range(seed.GSM8K_N)])
    assert gsm8k.loc["bf16", "tokens mean / median"] == f"{bf16_tokens.mean():.1f} / {bf16_tokens.median():.1f}"
    assert gsm8k.loc["int4", "math tok/s"] == "180"
    assert gsm8k.loc["int4-spec", "task time vs prev"].startswith(f"{180 / 270:.3f}x")
    humaneval = shown_table(at, 4, by="step")
    assert [cell.split(" ")[0] for cell in humaneval["accuracy (95% CI)"]] == [
        "61.0%", "61.0%", "61.0%", f"{100 * 98 / 164:.1f}%"]
    assert humaneval.loc["int4", "tokens vs prev"] == "1.21x"


def test_ladder_links_each_decision_to_its_evidence(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db)
    links = [(link.proto.page, link.proto.query_string) for link in at.page_link]
    for page in ("disagreements", "significance", "length_time"):
        assert (page, "task=humaneval&a=bf16&b=int4") in links
        assert (page, "task=gsm8k&a=int4-spec&b=int4-spec-kernel") in links


def test_ladder_steps_follow_the_sidebar_choice(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db)
    at.sidebar.multiselect(key=data_steps_key()).set_value(["bf16", "int4-spec-kernel"]).run()
    headings = [m.value for m in at.markdown if m.value.startswith("####") and "ship" in m.value]
    assert headings == [r"#### math (gsm8k): ship **bf16**, stop there (not **int4\-spec\-kernel**)",
                        r"#### code (humaneval): ship **bf16**, can't tell yet about **int4\-spec\-kernel**",
                        r"#### chat: ship **bf16**, stop there (not **int4\-spec\-kernel**)"]
    assert list(shown_table(at, 3)["step"]) == ["bf16", "int4-spec-kernel"]
    # The choice is in the URL, and a reload (a new session with that URL) shows the same ladder.
    assert at.query_params["steps"] == "bf16,int4-spec-kernel"
    again = open_app(monkeypatch, seeded_db, steps="bf16,int4-spec-kernel")
    assert list(shown_table(again, 3)["step"]) == ["bf16", "int4-spec-kernel"]


def test_sidebar_margins_change_verdicts_as_the_cli_option_does(
    monkeypatch: pytest.MonkeyPatch, seeded_db: str
) -> None:
    at = open_app(monkeypatch, seeded_db)
    assert list(shown_table(at, 1)["decision"])[2] == "can't tell yet"  # kernel: 2 of 164 lost, CI -3.3 to +0.9
    open_margins(at).sidebar.number_input(key="margin_field_humaneval").set_value(5.0).run()
    assert not at.exception
    code_chain = shown_table(at, 1)
    assert list(code_chain["decision"]) == ["stop at bf16", "take int4-spec", "take int4-spec-kernel"]
    assert "accuracy no change beyond the margin (5.0 pts)" in list(code_chain["why"])[2]
    from tests.conftest import run_cli

    cli = json.loads(run_cli("compare", "int4-spec", "int4-spec-kernel", "--task", "humaneval", "--margin",
                             "humaneval=5", "--db", seeded_db, "--json").stdout)["comparisons"][0]
    assert cli["verdict"] == "no change beyond the margin" and cli["margin"] == pytest.approx(0.05)


def data_steps_key() -> str:
    from dashboard import widgets

    return widgets.STEPS_KEY


# --- disagreements -----------------------------------------------------------------------


def test_disagreements_lists_the_items_only_a_got_right(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="gsm8k", a="int4-spec", b="int4-spec-kernel")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["only A right (int4-spec)"] == "20"
    assert metrics["only B right (int4-spec-kernel)"] == "0"
    expected = [f"gsm8k/test/{i:04d}" for i in [*range(300, 318), 330, 331]]
    assert list(at.dataframe[0].value["item"]) == expected
    # The override for differing settings is offered only beside a refusal, or while it is on: these runs agree.
    assert not at.toggle
    at.session_state["force"] = True
    at.run()
    assert [t.label for t in at.toggle] == ["Compare even if prompt or decoding settings differ"]
    assert list(at.dataframe[0].value["item"]) == expected  # settings that agree: forcing changes nothing


def mono_bodies(at: AppTest) -> list[str]:
    """The HTML of each monospace block (`widgets.mono`) on the page."""
    return [h.proto.body for h in at.get("html") if h.proto.body.startswith('<pre class="mono')]


def shown_text(body: str) -> str:
    """A block's text as the browser shows it: its own tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", body))


def diff_lines(body: str) -> list[tuple[str, str, str]]:
    """(class, style, text) of each line of a diff block."""
    return [(cls, style, html.unescape(text)) for cls, style, text
            in re.findall(r'<span class="(mono-[a-z]+)" style="([^"]*)">([^<]*)\n</span>', body)]


def test_disagreement_detail_shows_model_text_as_text(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py",
                  task="gsm8k", a="int4-spec", b="int4-spec-kernel", item="gsm8k/test/0300")
    bodies = mono_bodies(at)
    texts = [shown_text(b) for b in bodies]
    assert seed.gsm8k_sample(300).prompt in texts
    hostile = seed.kernel_math(300).text
    assert hostile in texts  # verbatim, HTML and Markdown included, in a monospace block
    body = bodies[texts.index(hostile)]
    inner = body[body.index(">") + 1:body.rindex("</pre>")]
    assert "<" not in inner and ">" not in inner and '"' not in inner  # no markup of the model's survives
    assert "&lt;script&gt;" in body and "&lt;/pre&gt;&lt;img src=x onerror=&quot;" in body
    assert not any("<script>" in m.value for m in at.markdown)
    assert not at.code and not at.json  # their browser code makes the page's first view slow
    diff = next(b for b in bodies if 'class="mono mono-diff"' in b)
    lines = diff_lines(diff)
    assert shown_text(diff).startswith("--- int4-spec\n+++ int4-spec-kernel\n@@ ")
    assert [cls for cls, _, _ in lines[:3]] == ["mono-head"] * 3
    kinds = {text: (cls, style) for cls, style, text in lines}
    assert kinds["-The answer is 300."] == ("mono-del", f"display: block; {widgets.DIFF_STYLES['mono-del']}")
    assert kinds["+The answer is 301."] == ("mono-add", f"display: block; {widgets.DIFF_STYLES['mono-add']}")
    assert kinds[" We count the sheep."][0] == "mono-same"
    sides = [t.value for t in at.text if t.value.startswith("outcome:")]
    assert sides == [
        "outcome: right\nextracted: 300\ntokens: 159  finish: stop",
        "outcome: wrong\nextracted: 301\ntokens: 200  finish: stop",
    ]


def test_a_diff_line_is_coloured_by_its_hunk_not_by_how_its_text_starts() -> None:
    # A removed line "--x" and an added "++y" show as "---x" and "+++y": file headers only outside a hunk.
    diff = analysis.completion_diff("a\n--x\nb\nc", "a\n++y\nb\nd", "A & <A>", "B")
    body = widgets.mono_html(diff, diff=True)
    assert [(cls, text) for cls, _, text in diff_lines(body)] == [
        ("mono-head", "--- A & <A>"), ("mono-head", "+++ B"), ("mono-head", "@@ -1,4 +1,4 @@"), ("mono-same", " a"),
        ("mono-del", "---x"), ("mono-add", "+++y"), ("mono-same", " b"), ("mono-del", "-c"), ("mono-add", "+d")]
    assert "--- A &amp; &lt;A&gt;" in body
    assert "background" in widgets.DIFF_STYLES["mono-add"] and "background" in widgets.DIFF_STYLES["mono-del"]
    assert widgets.DIFF_STYLES["mono-add"] != widgets.DIFF_STYLES["mono-del"]


def test_errored_and_cut_items_are_listed_and_labelled(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="gsm8k", a="int4-spec", b="int4-spec-kernel")
    assert any(c.value.startswith("1 item was left out of the comparison (1 error in B)") for c in at.caption), [
        c.value for c in at.caption]
    at.radio(key="filter").set_value("errors and cut answers").run()
    rows = at.dataframe[0].value.set_index("item")
    assert list(rows.index) == [f"gsm8k/test/{i:04d}" for i in [399, *range(380, 390)]]  # failed first
    assert rows.loc["gsm8k/test/0399", "B"] == "error"
    assert rows.loc["gsm8k/test/0385", "B"] == "wrong, cut at the token limit"
    assert rows.loc["gsm8k/test/0385", "A"] == "wrong"  # int4 is right only below 318
    assert at.query_params["show"] == "errors and cut answers"


def test_a_link_to_a_failed_item_opens_it_with_its_error(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="gsm8k", a="int4-spec",
                  b="int4-spec-kernel", item="gsm8k/test/0399")
    assert "Item gsm8k/test/0399" in [h.value for h in at.subheader]
    assert "HTTP 500 after 3 attempts" in [shown_text(b) for b in mono_bodies(at)]
    assert any(t.value.startswith("outcome: error") for t in at.text)


def test_a_link_to_a_missing_item_says_so(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="gsm8k", a="int4-spec",
                  b="int4-spec-kernel", item="gsm8k/test/9999")
    assert [w.value for w in at.warning] == [
        "No item 'gsm8k/test/9999' in the gsm8k runs of int4-spec and int4-spec-kernel: the link names an item "
        "these runs do not have, so none is opened."]
    assert not [h.value for h in at.subheader if h.value.startswith("Item ")]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # Truncated kernel answers have no extracted number, so they differ from int4-spec's wrong one.
        (analysis.FILTER_BOTH_WRONG, [f"gsm8k/test/{i:04d}" for i in range(380, 390)]),
        # 2048 truncated tokens against 159 + i % 50: far above 1.5x; no other item changes that much.
        (analysis.FILTER_LENGTH, [f"gsm8k/test/{i:04d}" for i in range(380, 390)]),
    ],
)
def test_disagreement_filters(monkeypatch: pytest.MonkeyPatch, seeded_db: str, kind: str, expected: list[str]) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="gsm8k", a="int4-spec", b="int4-spec-kernel")
    at.radio(key="filter").set_value(kind).run()
    assert list(at.dataframe[0].value["item"]) == expected


def test_humaneval_detail_shows_the_test_outcome(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/disagreements.py", task="humaneval", a="int4-spec",
                  b="int4-spec-kernel")
    assert list(at.dataframe[0].value["item"]) == ["HumanEval/98", "HumanEval/99"]
    outcomes = [json.loads(t) for t in map(shown_text, mono_bodies(at)) if t.startswith("{")]
    assert {"result": "passed"} in outcomes
    assert {"result": "failed: AssertionError", "failed_test": "assert f_98(1) == 99"} in outcomes


# --- significance -------------------------------------------------------------------------


def test_significance_shows_the_2x2_table_and_verdict(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/significance.py", task="gsm8k", a="int4-spec", b="int4-spec-kernel")
    two_by_two = shown_table(at, 0, by="")
    # Paired on 399 items (the kernel's error dropped): 300 both right, 20 only A, 0 only B, 79 neither.
    assert list(two_by_two.columns) == ["int4-spec-kernel right", "int4-spec-kernel wrong"]
    assert two_by_two.loc["int4-spec right"].tolist() == ["300", "20"]
    assert two_by_two.loc["int4-spec wrong"].tolist() == ["0", "79"]
    assert any(m.value == "**Verdict: worse**" for m in at.markdown)
    report = shown_table(at, 1)
    previous = report[report["vs"] == "previous"]
    same = "no change beyond the margin (2.0 pts)"
    assert list(previous["verdict"]) == [same, same, "worse", same, same, "inconclusive"]
    assert list(report.columns[:4]) == ["verdict", "task", "step A", "step B"]  # seen first at 1,280 px
    counts = shown_table(at, 2)
    kernel = counts[(counts["step A"] == "int4-spec") & (counts["step B"] == "int4-spec-kernel")
                    & (counts["task"] == "gsm8k")].iloc[0]
    assert [kernel["both"], kernel["A only"], kernel["B only"], kernel["neither"]] == ["300", "20", "0", "79"]


def test_significance_noise_floor_from_the_repeat_run(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/significance.py")
    floor = shown_table(at, 3, by="endpoint")
    flips = sum(seed.bf16_math(i).correct != seed.bf16_math(i, repeat=1).correct for i in range(seed.GSM8K_N))
    assert floor.loc["bf16", "flips"] == str(flips) == "4"
    assert floor.loc["bf16", "flip rate"] == f"{100 * flips / seed.GSM8K_N:.1f}%"


# --- length and time -------------------------------------------------------------------------


def test_length_and_time_for_the_worked_example(monkeypatch: pytest.MonkeyPatch, seeded_db: str) -> None:
    at = open_app(monkeypatch, seeded_db, "views/length_time.py", task="humaneval", a="bf16", b="int4")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["task time B/A"] == f"{(242 / 252) / (200 / 226):.3f}"
    assert metrics["output tokens B/A"] == "1.21x"
    assert metrics["decode speed B/A"] == f"{252 / 226:.2f}x"
    length = shown_table(at, 0, by="items")
    assert length.loc["all paired items", "B/A (ratio of means)"] == f"{242 / 200:.3f}"
    decisions = shown_table(at, 1)
    code = decisions[decisions["workload"] == "code"].set_index("step N")
    assert code.loc["bf16", "decision"] == "stop at bf16"
    math = decisions[decisions["workload"] == "math"].set_index("step N")
    assert list(math["decision"]) == ["take int4", "take int4-spec", "stop at int4-spec"]


# --- empty store ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "page", ["views/ladder.py", "views/disagreements.py", "views/significance.py", "views/length_time.py"]
)
def test_empty_store_shows_how_to_start(monkeypatch: pytest.MonkeyPatch, empty_db: str, page: str) -> None:
    at = open_app(monkeypatch, empty_db, page)
    assert [i.value for i in at.info] == ["No runs in this store yet. Evaluate an endpoint to fill it:"]
    guide = shown_text(mono_bodies(at)[0])
    assert "evalsvc run --endpoint" in guide and "evalsvc demo" in guide and empty_db in guide


def test_unusable_store_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    at = open_app(monkeypatch, str(blocker / "store.db"))
    assert at.error and at.error[0].value.startswith("Cannot open the store:")


# --- evaluate ---------------------------------------------------------------------------------

GOLD = [7, 8, 7, 8, 7]


def write_gsm8k(folder: Path) -> Path:
    """A five-question GSM8K file whose gold answers are GOLD."""
    rows = [{"question": f"What is {g - 1} + 1? (item {i})", "answer": f"{g - 1} + 1 = {g}\n#### {g}"}
            for i, g in enumerate(GOLD)]
    path = folder / "test.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture()
def fake_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(responder=lambda body: Reply(text="One more makes it.\nThe answer is 7.")) as server:
        yield server


def wait_for_jobs(db: str, timeout_s: float = 90.0) -> list[job_manager.Job]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = job_manager.list_jobs(db)
        if jobs and all(job.state not in ("starting", "running") for job in jobs):
            return jobs
        time.sleep(0.5)
    raise AssertionError(f"background job did not finish in {timeout_s} s: {job_manager.list_jobs(db)}")


@pytest.mark.slow
def test_evaluate_form_runs_through_the_cli_in_the_background(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_server: FakeOpenAI
) -> None:
    db = str(tmp_path / "eval.db")
    data_file = write_gsm8k(tmp_path)
    at = open_app(monkeypatch, db, "views/evaluate.py")
    at.text_input(key="ev_name").input("fake-step")
    at.text_input(key="ev_url").input(fake_server.base_url)
    at.text_input(key="ev_model").input("fake-model")
    at.text_input(key="ev_data").input(str(data_file))
    at.form_submit_button[0].click().run()
    assert [s.value for s in at.success][0].startswith("Started: evalsvc run --endpoint fake-step")
    jobs = wait_for_jobs(db)
    assert [job.state for job in jobs] == ["finished"], job_manager.log_tail(jobs[0])
    with open_store(db).session() as session:
        run = queries.resolve_run(session, "fake-step", "gsm8k")
        summary = queries.summarize_runs(session, [run.id])[0]
    assert (summary.n, summary.correct) == (5, GOLD.count(7))
    assert len(fake_server.requests) == 5
    # A fresh session (a reloaded browser tab) still sees the job and its finished run. The run list
    # is cached for RUNS_TTL_S across sessions of one server, so a reload may lag that long: wait it out.
    time.sleep(data.RUNS_TTL_S)
    again = open_app(monkeypatch, db, "views/evaluate.py")
    assert any(m.value.startswith("**fake\\-step**: finished") for m in again.markdown)
    assert [p.proto.text for p in again.get("progress")] == [f"run {run.id} gsm8k: 5/5 items, 0 errors, complete"]
    # Done: its accuracy, and a link to where it stands.
    assert f"gsm8k: accuracy **{100 * GOLD.count(7) / 5:.1f}%** ({GOLD.count(7)} of 5 scored)" in [
        m.value for m in again.markdown]
    links = [(link.proto.page, link.proto.query_string) for link in again.page_link]
    assert ("", "task=gsm8k&b=fake-step") in links  # the Ladder is the default page: no path


def test_evaluate_page_shows_a_run_whose_runner_died_as_stalled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = str(tmp_path / "stalled.db")
    store = open_store(db)
    samples = [seed.gsm8k_sample(i) for i in range(3)]
    run_id = seed.add_run(store, "killed-step", "gsm8k", samples, [seed.math_outcome(i, True, 50) for i in range(3)])
    code = [seed.humaneval_sample(i) for i in range(3)]
    code_id = seed.add_run(store, "killed-step", "humaneval", code, [seed.code_outcome(i, True, 50) for i in range(3)])
    with store.session() as session:  # as a runner killed with kill -9 leaves it: running, its beat long gone
        for stalled in (run_id, code_id):
            run = session.get(Run, stalled)
            run.status, run.finished_at = "running", None
            run.heartbeat_at = datetime.now(timezone.utc) - timedelta(seconds=queries.STALLED_AFTER_S + 5)
        session.get(Run, code_id).isolation = "process"
        session.commit()
    store.dispose()
    at = open_app(monkeypatch, db, "views/evaluate.py")
    assert "Stalled runs" in [h.value for h in at.subheader]
    assert "Runs being written" not in [h.value for h in at.subheader]
    listed = shown_table(at, 0)
    assert list(listed["endpoint"]) == ["killed-step", "killed-step"]
    # the sandbox each run's code ran in; a GSM8K run runs none
    assert dict(zip(listed["task"], listed["isolation"])) == {"gsm8k": "n/a", "humaneval": "process"}


def test_evaluate_form_refuses_a_bad_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = str(tmp_path / "eval.db")
    at = open_app(monkeypatch, db, "views/evaluate.py")
    at.text_input(key="ev_name").input("x")
    at.text_input(key="ev_url").input("127.0.0.1:30000")
    at.text_input(key="ev_model").input("m")
    at.form_submit_button[0].click().run()
    assert [e.value for e in at.error] == [
        "The server address must start with http:// or https://, got '127.0.0.1:30000' (e.g. http://127.0.0.1:30000/v1)."]
    at.text_input(key="ev_url").input("http://not a url")
    at.form_submit_button[0].click().run()
    assert [e.value for e in at.error] == [
        "The server address 'http://not a url' is not a valid address (e.g. http://127.0.0.1:30000/v1)."]
    at.text_input(key="ev_name").input("")
    at.form_submit_button[0].click().run()
    assert [e.value for e in at.error] == ["Fill in a name for this step."]
    assert job_manager.list_jobs(db) == []


def test_max_tokens_and_template_reach_the_command() -> None:
    request = job_manager.EvalRequest("s", "http://127.0.0.1:1/v1", "m", ("gsm8k",), max_tokens=512,
                                     template="fewshot-completion@v1")
    argv = job_manager.run_argv(request)
    assert argv[argv.index("--max-tokens") + 1] == "512"
    assert argv[argv.index("--template") + 1] == "fewshot-completion@v1"


@pytest.mark.parametrize(
    ("tps", "source", "refusal"),
    [
        (250.0, " ", "Fill in where the figure of 250 tok/s comes from (e.g. vendor table, 2026-11)."),
        (None, "vendor table", "A source ('vendor table') was entered without its tokens per second: enter the "
                               "figure, or clear the source to measure the server."),
        (-5.0, "vendor table", "A decode speed entered by hand must be above 0 tok/s, got -5."),
    ],
)
def test_the_speed_form_refuses_a_figure_without_its_source_and_a_source_without_its_figure(
    tps: float | None, source: str, refusal: str
) -> None:
    with pytest.raises(job_manager.JobError) as refused:
        job_manager.speed_argv(job_manager.SpeedRequest("s", "math", 20, tps, source))
    assert str(refused.value) == refusal


@pytest.mark.slow
def test_measure_speed_from_the_form_probes_the_stored_endpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_server: FakeOpenAI
) -> None:
    db = str(tmp_path / "measure.db")
    store = open_store(db)
    seed.add_run(store, "probe-step", "gsm8k", [seed.gsm8k_sample(i) for i in range(4)],
                 [seed.math_outcome(i, True, 100) for i in range(4)])
    with store.session() as session:
        endpoint = queries.get_endpoint(session, "probe-step")
        endpoint.base_url, endpoint.model = fake_server.base_url, "fake-model"
        session.commit()
    store.dispose()
    at = open_app(monkeypatch, db, "views/evaluate.py")
    at.selectbox(key="sp_workload").select("chat")
    at.number_input(key="sp_limit").set_value(3)
    at.form_submit_button[1].click().run()
    assert [s.value for s in at.success] == [
        "Started: evalsvc speed --endpoint probe-step --workload chat --limit 3"]
    jobs = wait_for_jobs(db)
    assert [job.state for job in jobs] == ["finished"], job_manager.log_tail(jobs[0])
    from evalsvc.decision import build

    with open_store(db).session() as session:
        speed = build.endpoint_speed(session, queries.get_endpoint(session, "probe-step"), "chat")
    assert not isinstance(speed, str), speed
    assert speed.measured and len(speed.decode_tps) == 3


@pytest.mark.slow
def test_a_failed_job_shows_its_error_line_above_the_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = str(tmp_path / "fail.db")
    store = open_store(db)
    seed.add_run(store, "gone-step", "gsm8k", [seed.gsm8k_sample(i) for i in range(2)],
                 [seed.math_outcome(i, True, 100) for i in range(2)])  # its stored URL has nothing listening
    store.dispose()
    at = open_app(monkeypatch, db, "views/evaluate.py")
    at.number_input(key="sp_limit").set_value(2)
    at.form_submit_button[1].click().run()
    jobs = wait_for_jobs(db)
    assert [job.state for job in jobs] == ["failed"], job_manager.log_tail(jobs[0])
    again = open_app(monkeypatch, db, "views/evaluate.py")
    errors = [e.value for e in again.error]
    assert len(errors) == 1 and "http://127.0.0.1:1/v1" in errors[0], errors
    assert errors[0] in job_manager.log_tail(jobs[0]) and not errors[0].startswith("error:")
    assert (jobs[0].workload, jobs[0].tasks) == ("math", ())  # a speed job says so as data, not as a task name
    assert any(m.value.startswith(r"**speed of gone\-step \(math\)**: failed") for m in again.markdown)


@pytest.mark.slow
def test_a_vendor_speed_from_the_form_is_stored_with_its_source(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    db = str(tmp_path / "speed.db")
    store = open_store(db)
    seed.add_run(store, "vendor-step", "gsm8k", [seed.gsm8k_sample(i) for i in range(4)],
                 [seed.math_outcome(i, True, 100) for i in range(4)])
    store.dispose()
    at = open_app(monkeypatch, db, "views/evaluate.py")
    at.selectbox(key="sp_workload").select("code")
    at.number_input(key="sp_tps").set_value(321.0)
    at.text_input(key="sp_source").input("vendor table 2026-11")
    at.form_submit_button[1].click().run()
    assert [s.value for s in at.success] == [
        "Started: evalsvc speed --endpoint vendor-step --workload code --tokens-per-second 321 "
        "--source vendor table 2026-11"]
    jobs = wait_for_jobs(db)
    assert [job.state for job in jobs] == ["finished"], job_manager.log_tail(jobs[0])
    from evalsvc.decision import build

    with open_store(db).session() as session:  # not the page's cache, which holds for a few seconds
        speed = build.endpoint_speed(session, queries.get_endpoint(session, "vendor-step"), "code")
    assert not isinstance(speed, str), speed
    assert speed.effective_tps == 321.0 and speed.source == "vendor table 2026-11" and not speed.measured


# --- helpers without a page -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--db", "/tmp/x.db"], "sqlite:////tmp/x.db"),
        (["--db=postgresql://u@h/db"], "postgresql://u@h/db"),
        ([], "sqlite:////env/store.db"),
    ],
)
def test_db_url_from_argv_then_env(monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: str) -> None:
    monkeypatch.setenv("EVALSVC_DB", "sqlite:////env/store.db")
    assert data.db_url(argv) == expected


def test_run_argv_is_the_cli_command() -> None:
    request = job_manager.EvalRequest("s1", "http://h:1/v1", "m", ("gsm8k", "humaneval"), limit=20, repeat=True)
    assert job_manager.run_argv(request) == [
        "run", "--endpoint", "s1", "--url", "http://h:1/v1", "--model", "m", "--task", "all", "--no-progress",
        "--limit", "20", "--concurrency", "8", "--repeat",
    ]


@pytest.mark.parametrize("url", ["http://user:pw-in-url@h:1/v1", "http://h:1/v1?api_key=k-in-query"])
def test_a_url_with_credentials_is_refused(url: str) -> None:
    request = job_manager.EvalRequest("s1", url, "m", ("gsm8k",))
    with pytest.raises(job_manager.JobError, match="carries a password or key") as caught:
        job_manager.run_argv(request)
    assert "pw-in-url" not in str(caught.value) and "k-in-query" not in str(caught.value)


def test_measured_speeds_are_read_from_the_speed_store(tmp_path: Path) -> None:
    from db.queries import add_speed_run
    from harness.types import SpeedSample

    db = str(tmp_path / "speed.db")
    store = seed.seed_store(db)
    samples = [("p0", SpeedSample(0, ttft_s=0.1, decode_tps=100.0)), ("p1", SpeedSample(1, ttft_s=0.3, decode_tps=200.0)),
               ("p2", SpeedSample(2, error="HTTP 500"))]
    with store.session() as session:
        add_speed_run(session, queries.get_endpoint(session, "int4"), "chat", samples, "probe", 256, None)
    speeds = data.endpoint_speeds(data.db_url(["--db", db]), ("bf16", "int4"))
    assert set(speeds["bf16"]) == {"math", "code", "chat"} and set(speeds["int4"]) == {"math", "code", "chat"}
    assert speeds["bf16"]["code"].effective_tps == 226.0
    # The seed's chat probe of bf16: 90 + prompt % 5 tok/s, a harmonic mean.
    assert speeds["bf16"]["chat"].effective_tps == pytest.approx(1 / (sum(1 / (90 + p % 5) for p in range(20)) / 20))
    chat = speeds["int4"]["chat"]
    assert chat.measured and chat.effective_tps == pytest.approx(1 / ((1 / 100 + 1 / 200) / 2))
    assert chat.mean_ttft_s == pytest.approx(0.2)


# --- unknown token counts ------------------------------------------------------------------


def test_a_run_with_many_unknown_token_counts_is_named_above_every_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from harness.types import Completion, ItemResult
    from tests.db.test_store import make_run, sample, save

    db = str(tmp_path / "unknown.db")
    store = open_store(db)
    leaky, sound = make_run(store, "leaky"), make_run(store, "sound")
    for k in range(20):  # leaky: 2 of 20 counts unknown (10%); sound: 1 of 20 (5%, not above the line)
        for run_id, unknown in ((leaky, k < 2), (sound, k < 1)):
            done = Completion(text="4", completion_tokens=None if unknown else 10,
                              issue="completion_tokens nan is not a number" if unknown else None)
            save(store, run_id, sample(item_id=f"gsm8k/test/{k:04d}"), done, ItemResult(passed=True, extracted="4"))
    store.dispose()
    expected = (f"warning: run {leaky} (leaky gsm8k): 2 of 20 answered items (10%) have no valid token count from "
                f"the endpoint; they are left out of output-length and task-time figures (`evalsvc show {leaky}` "
                "says why)")
    for page in (None, "views/length_time.py", "views/evaluate.py"):
        at = open_app(monkeypatch, db, page)
        assert [w.value for w in at.warning if "token count" in w.value] == [expected], page
