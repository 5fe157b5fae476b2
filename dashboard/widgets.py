"""Pieces every page uses: the empty-store guide, the ladder and pair pickers, evidence links.

Selections live in two places so they survive both page switches and reloads:
the session (a plain key, not only the widget's) and the URL's query
parameters, which is also how a link from the Ladder page preselects a pair.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dashboard import analysis, data, svg
from db.engine import StoreError
from evalsvc.decision import build, rule
from evalsvc.decision.workload import WorkloadDecision
from evalsvc.report import decision_report, token_counts
from evalsvc.report.masking import mask_url

PAGES = {
    "ladder": "views/ladder.py",
    "disagreements": "views/disagreements.py",
    "significance": "views/significance.py",
    "length_time": "views/length_time.py",
    "evaluate": "views/evaluate.py",
}
STEPS_KEY = "ladder_steps"
STEPS_PARAM = "steps"
MARGIN_PARAM = "margin_{task}"
MARGINS_OPEN_KEY = "margins_open"
MARGIN_FIELD_KEY = "margin_field_{task}"
# One colour per workload (and so per task) and per step position, on every chart.
WORKLOAD_COLORS = {"math": "#1f77b4", "code": "#ff7f0e", "chat": "#2ca02c"}
STEP_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d", "#eeca3b",
                "#ff9da6", "#bab0ac")
# One mark for a figure that is missing, in every table and line.
MISSING = "n/a"


class Pair(NamedTuple):
    """Two endpoints compared on one task; B is the candidate step."""

    task: str
    a: str
    b: str


def start_guide(url: str) -> None:
    """What to do when the store has no runs yet (the store's password, if any, masked)."""
    url = mask_url(url)
    st.info("No runs in this store yet. Evaluate an endpoint to fill it:")
    mono(f"evalsvc run --endpoint bf16 --url http://127.0.0.1:30000/v1 --model MODEL --task all --db '{url}'\n"
         f"evalsvc demo --db '{url}'   # a small local ladder, no GPU needed")
    st.page_link(PAGES["evaluate"], label="Or start a run from the Evaluate page", icon=":material/play_arrow:")


def runs_or_stop(url: str, need_complete: bool = True) -> pd.DataFrame:
    """The runs table; stops the page with a readable message if the store is unusable or empty."""
    try:
        runs = data.load_runs(url)
    except StoreError as exc:
        st.error(f"Cannot open the store: {exc}")
        st.stop()
    if runs.empty or (need_complete and not (runs["status"] == "complete").any()):
        start_guide(url)
        st.stop()
    return runs


def token_warnings(runs: pd.DataFrame) -> None:
    """At the top of every page: each run whose token counts are too often unknown to read its lengths plainly."""
    for row in runs.itertuples(index=False):
        warning = token_counts.token_warning(row)  # type: ignore[arg-type]  # a row has the summary's fields
        if warning is not None:
            st.warning(warning.describe(), icon=":material/warning:")


def ladder_sidebar(runs: pd.DataFrame) -> list[str]:
    """The steps of the ladder, in order: every endpoint by default, in the order first evaluated.

    The choice is kept in the URL (`steps=a,b,c`) so a shared link or a reload shows the same ladder.
    """
    order = analysis.ladder_order(runs)
    if not order:
        return []
    incoming = [s for s in (st.query_params.get(STEPS_PARAM) or "").split(",") if s in order]
    if incoming and incoming != st.session_state.get("seen_steps"):
        st.session_state[STEPS_KEY] = incoming
    elif any(step not in order for step in st.session_state.get(STEPS_KEY, [])):
        del st.session_state[STEPS_KEY]
    steps = st.sidebar.multiselect(
        "Ladder steps, in order", order, default=order, key=STEPS_KEY,
        help="The endpoints that form the ladder; the order picked is the order compared.",
    )
    st.session_state["seen_steps"] = steps
    keep_param(STEPS_PARAM, ",".join(steps) if steps and steps != order else None)
    return steps


def keep_param(name: str, value: str | None) -> None:
    """Write one query parameter (None removes it), only when it changes: each write costs a message."""
    if value is None:
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != value:
        st.query_params[name] = value


def margins_sidebar(runs: pd.DataFrame) -> rule.Margins:
    """The non-inferiority margin per task, in accuracy points, adjustable and kept in the URL.

    The fields are drawn only while their box is open (a rerun opens it): closed, as on a page's first view,
    the browser loads no number-field code, a tenth of a second of each cold view (bench/dashboard_render.py).
    The margins themselves are kept apart from the fields, which Streamlit forgets when they are not drawn.
    """
    tasks = analysis.tasks_in(runs)
    default_points = 100 * rule.DEFAULT_MARGIN
    box = st.sidebar.expander("Margins (how much worse is still fine)", key=MARGINS_OPEN_KEY, on_change="rerun")
    if box.open:
        box.caption("Step B counts as no worse than step A when the 95% interval of its accuracy change stays "
                    "above minus this many points, as `evalsvc report --margin TASK=POINTS`. A smaller margin "
                    "asks for more items to settle: 164 HumanEval problems cannot establish 2 points.")
    per_task = []
    for task in tasks:
        points = _margin_points(task, box if box.open else None, default_points)
        keep_param(MARGIN_PARAM.format(task=task), None if points == default_points else f"{points:g}")
        if points != default_points:
            per_task.append((task, points / 100))
    return rule.Margins(rule.DEFAULT_MARGIN, tuple(sorted(per_task)))


def _margin_points(task: str, box: DeltaGenerator | None, default_points: float) -> float:
    """One task's margin: a new one in the URL wins, then the field (if `box` is open), then the one kept
    (`data.MARGIN_KEY`, which the pages read)."""
    field, kept = MARGIN_FIELD_KEY.format(task=task), data.MARGIN_KEY.format(task=task)
    incoming = _points(st.query_params.get(MARGIN_PARAM.format(task=task)))
    # The URL holds the margin kept at the end of the last run: a different one there came from a link or an edit.
    if incoming is not None and incoming != st.session_state.get(kept):
        st.session_state[kept] = incoming
        st.session_state.pop(field, None)
    points = st.session_state.get(field, st.session_state.get(kept, default_points))
    if box is not None:
        st.session_state[field] = points
        points = box.number_input(f"{task} margin (points)", 0.1, 50.0, step=0.5, key=field, format="%.1f")
    st.session_state[kept] = points
    return points


def _points(value: str | None) -> float | None:
    try:
        points = float(value) if value else None
    except ValueError:
        return None
    return points if points is not None and 0.1 <= points <= 50 else None


def selected_steps(runs: pd.DataFrame) -> list[str]:
    """The ladder steps picked in the sidebar (every endpoint when nothing was picked)."""
    order = analysis.ladder_order(runs)
    picked = [step for step in st.session_state.get(STEPS_KEY, []) if step in order]
    return picked or order


def pick(label: str, options: Sequence[str], name: str, default: str | None = None, **kwargs: Any) -> str:
    """A selectbox kept in step with the query parameter `name` and the session.

    A query parameter that arrives new (from a link or a reload) wins; then
    the widget's own state; then what this page or another last chose.
    """
    options = list(options)
    widget, stored, seen = f"pick_{name}", f"chosen_{name}", f"seen_{name}"
    incoming = st.query_params.get(name)
    if incoming in options and incoming != st.session_state.get(seen):
        st.session_state[widget] = incoming
    elif st.session_state.get(widget) not in options:
        fallback = st.session_state.get(stored)
        st.session_state[widget] = fallback if fallback in options else (default if default in options else options[0])
    else:  # set again: a widget of the same key on another page would otherwise start from its default
        st.session_state[widget] = st.session_state[widget]
    value = st.selectbox(label, options, key=widget, **kwargs)
    st.session_state[stored] = st.session_state[seen] = value
    st.query_params[name] = value
    return value


def pair_picker(runs: pd.DataFrame, steps: Sequence[str]) -> Pair | None:
    """Task, step A and step B; defaults to the first two steps of the ladder."""
    per_task = data.step_runs(runs, steps, data.db_url())
    if not per_task:
        st.warning("No step of the ladder has a complete run yet.")
        return None
    cols = st.columns(3)
    with cols[0]:
        task = pick("Task", list(per_task), "task")
    candidates = [step for step in steps if step in per_task[task]]
    if len(candidates) < 2:
        st.warning(f"Only {len(candidates)} step has a complete {task} run; two are needed to compare.")
        return None
    with cols[1]:
        a = pick("Step A (current)", candidates, "a", default=candidates[0])
    with cols[2]:
        rest = [step for step in candidates if step != a]
        b = pick("Step B (candidate)", rest, "b", default=analysis.next_step(candidates, a))
    return Pair(task, a, b)


def evidence_links(pair: Pair) -> None:
    """Links to the three pages holding the evidence for one pair, under one line naming the pair
    (short labels: at 1,280 px three long ones are cut)."""
    params = {"task": pair.task, "a": pair.a, "b": pair.b}
    st.caption(f"The evidence, {esc(pair.b)} against {esc(pair.a)} on {esc(pair.task)}:")
    cols = st.columns(3)
    targets = (("disagreements", "Disagreements"), ("significance", "Significance"), ("length_time", "Length and time"))
    for col, (page, label) in zip(cols, targets):
        with col:
            st.page_link(PAGES[page], label=label, query_params=params, icon=":material/arrow_forward:",
                         help=f"{label}: {pair.b} against {pair.a} on {pair.task}")


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """'1 step', '2 steps'; `plural_noun` for irregular ones ('1 item was', '2 items were' need both)."""
    return f"{count} {noun if count == 1 else (plural_noun or noun + 's')}"


def task_colors() -> dict[str, str]:
    """Each task in its workload's colour (`WORKLOAD_COLORS`), the same on every chart."""
    return {task: WORKLOAD_COLORS[build.workload_of(task)] for task in build.TASK_NAMES}


def step_colors(order: Sequence[str]) -> dict[str, str]:
    """Each step in the colour of its place in the store's ladder order (`analysis.ladder_order`), so a step
    keeps its colour on every chart whichever steps are picked."""
    return {step: STEP_PALETTE[i % len(STEP_PALETTE)] for i, step in enumerate(order)}


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage, MISSING when absent."""
    return MISSING if value is None or pd.isna(value) else f"{100 * value:.{digits}f}%"


def num(value: float | None, digits: int = 1) -> str:
    """A number with fixed decimals, MISSING when absent."""
    return MISSING if value is None or pd.isna(value) else f"{value:.{digits}f}"


_MARKDOWN_SPECIAL = "\\`*_{}[]<>()#+-.!|~:$"


def esc(text: object) -> str:
    """Text from the store made inert for st.markdown: every Markdown character escaped."""
    return "".join(f"\\{ch}" if ch in _MARKDOWN_SPECIAL else ch for ch in str(text))


# A <pre> through st.html: the browser loads no code-highlighting script for it (st.code's costs a page's first
# view about 0.4 s on a busy machine). Colours are translucent so they read on a light and a dark theme.
MONO_STYLE = ("white-space: pre-wrap; overflow-wrap: anywhere; margin: 0; padding: 0.75rem 1rem; "
              "border-radius: 0.5rem; background: rgba(128, 128, 128, 0.1); font-size: 0.8125rem; "
              "line-height: 1.45; font-family: 'Source Code Pro', ui-monospace, SFMono-Regular, Menlo, monospace")
DIFF_STYLES = {"mono-head": "opacity: 0.6", "mono-add": "background: rgba(46, 160, 67, 0.22)",
               "mono-del": "background: rgba(248, 81, 73, 0.22)", "mono-same": ""}
HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def mono_html(text: str, diff: bool = False) -> str:
    """`text` as a monospace block that wraps its lines, every character of it HTML-escaped (model output is
    hostile: markup in it shows as text). With `diff` (a unified diff), each line in its own block: + lines
    green, - lines red, the ---, +++ and @@ header lines muted."""
    style = f'style="{MONO_STYLE}"'
    if not diff:
        return f'<pre class="mono" {style}>{html.escape(text)}</pre>'
    lines = text.splitlines()
    # A block per line (its newline inside, so the text reads back whole) lets a background span the width.
    body = "".join(f'<span class="{cls}" style="display: block; {DIFF_STYLES[cls]}">{html.escape(line)}\n</span>'
                   for cls, line in zip(diff_classes(lines), lines))
    return f'<pre class="mono mono-diff" {style}>{body}</pre>'


def diff_classes(lines: Sequence[str]) -> list[str]:
    """Each line's kind in a unified diff. Inside a hunk its header's line counts decide, so a removed line
    that itself starts "--" (shown "---") is not taken for a file header."""
    classes, left_a, left_b = [], 0, 0
    for line in lines:
        if left_a > 0 or left_b > 0:
            mark = line[:1]
            left_a -= mark != "+"
            left_b -= mark != "-"
            classes.append({"+": "mono-add", "-": "mono-del"}.get(mark, "mono-same"))
        elif (hunk := HUNK.match(line)) is not None:
            left_a, left_b = (int(n) if n is not None else 1 for n in hunk.groups())
            classes.append("mono-head")
        elif line.startswith(("---", "+++")):
            classes.append("mono-head")
        else:
            classes.append({"+": "mono-add", "-": "mono-del"}.get(line[:1], "mono-same"))
    return classes


def mono(text: str, diff: bool = False) -> None:
    """Show text from the store or a model verbatim in monospace (`mono_html`)."""
    st.html(mono_html(text, diff))


def table(frame: pd.DataFrame, max_rows: int = 15) -> None:
    """A table whose every column shows on a 1,280 px screen: long cells wrap instead of being cut.

    Written as a plain HTML table (`table_html`), not `st.table` nor Markdown: the browser then needs no
    Arrow code nor a Markdown parser to show it (on a cold first view the Markdown tables of a page took
    0.2 s of the browser's time, bench/dashboard_render.py). A table of more than `max_rows` rows scrolls
    inside a fixed height rather than pushing the rest of the page down.
    """
    box = st.container(height=38 + 36 * max_rows) if len(frame) > max_rows else st.container()
    box.html(table_html(frame))


def table_html(frame: pd.DataFrame) -> str:
    """`frame` as an HTML table of class "data" (styled by the app's `TABLE_STYLE`): every cell is text from
    the store or the statistics, HTML-escaped, its line breaks made spaces."""
    def cells(tag: str, values: Sequence[object]) -> str:
        return "".join(f"<{tag}>{svg.text(value)}</{tag}>" for value in values)

    rows = "".join(f"<tr>{cells('td', row)}</tr>" for row in frame.itertuples(index=False))
    return f'<table class="data"><thead><tr>{cells("th", frame.columns)}</tr></thead><tbody>{rows}</tbody></table>'


def decisions_frame(decisions: Sequence[WorkloadDecision], stop: WorkloadDecision | None = None,
                    workload: bool = True) -> pd.DataFrame:
    """Step N against N+1, one row per decision: what to do and why in full (`decision_report.explain`, as the CLI says it).

    With `stop` (the decision that ends the walk down the ladder) a column says which decisions lie past it.
    """
    rows, beyond = [], False
    for d in decisions:
        row = {"workload": d.workload} if workload else {}
        row |= {"step N": d.step_a, "step N+1": d.step_b, "decision": decision_report.choice_words(d)}
        if stop is not None:
            row["on the path"] = "no, after the stop" if beyond else "yes"
            beyond = beyond or d is stop
        # The accuracy verdict and the ratios are in the words of "why"; a column of their own would narrow it.
        row |= {"task time B/A": num(d.time.ratio if d.time else None, 3), "why": decision_report.explain(d)}
        rows.append(row)
    return pd.DataFrame(rows)


def chart(drawing: str) -> None:
    """Show a chart of `dashboard.svg` (its text from the store is escaped there) in the page itself."""
    st.markdown(drawing, unsafe_allow_html=True)
