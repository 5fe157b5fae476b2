"""The evalsvc dashboard: `evalsvc dashboard [--db URL]`, or
`streamlit run dashboard/app.py -- --db URL` (else $EVALSVC_DB)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.navigation.page import StreamlitPage

from dashboard import data, widgets
from db.engine import StoreError
from evalsvc.report.masking import mask_from_now_on, mask_url

# A local file: an emoji or Material icon as page icon makes the browser fetch it from an outside host.
ICON = Path(__file__).resolve().parent / "static" / "icon.png"
NEW_RUNS_S = 5.0
# Tables (`widgets.table`, HTML) as compact as Streamlit's own: smaller type and padding, so a ladder table's
# ten to twelve columns all fit the main column at 1,280 px. Borders are translucent: they read on either theme.
TABLE_STYLE = """<style>
table.data { border-collapse: collapse; font-size: 0.875rem; line-height: 1.4; overflow-wrap: break-word; }
table.data th, table.data td { padding: 0.25rem 0.375rem; border: 1px solid rgba(128, 128, 128, 0.3);
  text-align: left; vertical-align: top; }
table.data th { font-weight: 600; }
</style>"""


def build_navigation() -> StreamlitPage:
    """The five pages; the Ladder opens first."""
    pages = [
        st.Page(widgets.PAGES["ladder"], title="Ladder", icon=":material/stairs:", default=True),
        st.Page(widgets.PAGES["disagreements"], title="Disagreements", icon=":material/compare_arrows:"),
        st.Page(widgets.PAGES["significance"], title="Significance", icon=":material/functions:"),
        st.Page(widgets.PAGES["length_time"], title="Length and time", icon=":material/timer:"),
        st.Page(widgets.PAGES["evaluate"], title="Evaluate an endpoint", icon=":material/play_arrow:"),
    ]
    return st.navigation(pages)


def render_sidebar(url: str) -> None:
    """The store in use and the ladder's steps, on every page; above each page, runs with many unknown token counts."""
    st.sidebar.caption(f"Store: `{mask_url(url)}`")
    try:
        runs = data.load_runs(url)
    except StoreError:
        return  # each page explains the failure
    widgets.token_warnings(runs)
    widgets.ladder_sidebar(runs)
    widgets.margins_sidebar(runs)
    with st.sidebar:
        watch_runs(url)


def _runs_seen(url: str) -> tuple[tuple[tuple[int, str], ...], tuple[int, ...]] | None:
    try:
        runs = data.load_runs(url)
        speeds = data.speed_runs(url, tuple(sorted(set(runs["endpoint"]))))
    except StoreError:
        return None
    return tuple(zip(runs["run_id"].astype(int), runs["status"].astype(str))), speeds


@st.fragment(run_every=NEW_RUNS_S)
def watch_runs(url: str) -> None:
    """Reruns the page when a run is added or changes state, or a speed is stored, so they appear without a
    reload."""
    seen = _runs_seen(url)
    before = st.session_state.get("runs_seen")
    st.session_state["runs_seen"] = seen
    if before is not None and seen is not None and seen != before:
        st.rerun(scope="app")


def main() -> None:
    st.set_page_config(page_title="evalsvc", page_icon=str(ICON), layout="wide")
    navigation = build_navigation()
    url = data.db_url()
    st.html(TABLE_STYLE)
    mask_from_now_on(url)  # the server's log lines and tracebacks are masked like the CLI's
    render_sidebar(url)
    navigation.run()


main()
