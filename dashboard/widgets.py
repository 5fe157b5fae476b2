"""Pieces every page uses: the empty-store guide, the ladder and pair pickers, evidence links.

Selections live in two places so they survive both page switches and reloads:
the session (a plain key, not only the widget's) and the URL's query
parameters, which is also how a link from the Ladder page preselects a pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import analysis, data
from db.engine import StoreError
from evalsvc import token_counts
from evalsvc.decision import rule
from harness.redact import mask_url

PAGES = {
    "ladder": "views/ladder.py",
    "disagreements": "views/disagreements.py",
    "significance": "views/significance.py",
    "length_time": "views/length_time.py",
    "evaluate": "views/evaluate.py",
}
STEPS_KEY = "ladder_steps"
# st.table renders cells as Markdown, where a lone "-" would become a bullet; one mark everywhere.
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
    st.code(
        f"evalsvc run --endpoint bf16 --url http://127.0.0.1:30000/v1 --model MODEL --task all --db '{url}'\n"
        f"evalsvc demo --db '{url}'   # a small local ladder, no GPU needed",
        language="bash", wrap_lines=True,
    )
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
    """The steps of the ladder, in order: every endpoint by default, in the order first evaluated."""
    order = analysis.ladder_order(runs)
    if not order:
        return []
    if any(step not in order for step in st.session_state.get(STEPS_KEY, [])):
        del st.session_state[STEPS_KEY]
    return st.sidebar.multiselect(
        "Ladder steps, in order", order, default=order, key=STEPS_KEY,
        help="The endpoints that form the ladder; the order picked is the order compared.",
    )


def margins_sidebar(runs: pd.DataFrame) -> None:
    """Non-inferiority margin per task, in points: the verdicts and decisions of every page use them."""
    with st.sidebar.expander("Margins (accuracy points)"):
        for task in analysis.tasks_in(runs):
            st.number_input(task, min_value=0.1, max_value=100.0, value=100 * rule.DEFAULT_MARGIN, step=0.5,
                            key=data.MARGIN_KEY.format(task=task),
                            help=f"As `evalsvc report --margin {task}=POINTS`: a drop smaller than this is "
                                 "acceptable. 164 HumanEval problems cannot establish 2 points.")


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
        b = pick("Step B (candidate)", rest, "b", default=_next_step(candidates, a, rest))
    return Pair(task, a, b)


def _next_step(candidates: list[str], a: str, rest: list[str]) -> str:
    index = candidates.index(a)
    return candidates[index + 1] if index + 1 < len(candidates) else rest[0]


def evidence_links(pair: Pair) -> None:
    """Links to the three pages holding the evidence for one pair."""
    params = {"task": pair.task, "a": pair.a, "b": pair.b}
    cols = st.columns(3)
    targets = (("disagreements", "Disagreements"), ("significance", "Significance"), ("length_time", "Length and time"))
    for col, (page, label) in zip(cols, targets):
        with col:
            st.page_link(PAGES[page], label=f"{label}: {pair.b} vs {pair.a}", query_params=params,
                         icon=":material/arrow_forward:")


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


def chart(figure: alt.TopLevelMixin) -> None:
    """Show an Altair chart. Its spec comes from this code, not from users, so Altair's schema validation
    (tens of milliseconds the first time, per server) is skipped."""
    st.vega_lite_chart(figure.to_dict(validate=False))
