"""Evaluate an endpoint: start `evalsvc run` in the background and watch its progress in the store."""

from __future__ import annotations

import os
from datetime import datetime

import pandas as pd
import streamlit as st

from dashboard import background, data, widgets
from db.engine import StoreError
from harness.tasks import TASK_NAMES

GSM8K_DATA_ENV = "EVALSVC_GSM8K_DATA"
REFRESH_S = 2.0


def render_form(url: str) -> None:
    """The form; on submit, starts the job and says so."""
    with st.form("evaluate", border=True):
        left, right = st.columns(2)
        name = left.text_input("Endpoint name (a ladder step)", key="ev_name", placeholder="int4-spec")
        base_url = right.text_input("Base URL", key="ev_url", placeholder="http://127.0.0.1:30000/v1")
        model = left.text_input("Model (as /v1/models lists it)", key="ev_model")
        tasks = right.multiselect("Tasks", list(TASK_NAMES), default=[TASK_NAMES[0]], key="ev_tasks")
        limit = left.number_input("Limit (first N items; 0 = the task's default)", 0, 10_000, 0, key="ev_limit")
        data_path = right.text_input("GSM8K data file or folder (optional)", key="ev_data",
                                     value=os.environ.get(GSM8K_DATA_ENV, ""))
        concurrency = left.number_input("Concurrency", 1, 256, 8, key="ev_concurrency")
        api_key = right.text_input("API key (optional; not stored)", type="password", key="ev_key")
        repeat = st.checkbox("Repeat run (same settings again, for the noise floor)", key="ev_repeat")
        submitted = st.form_submit_button("Start evaluation", type="primary")
    if submitted:
        request = background.EvalRequest(
            endpoint=name.strip(), base_url=base_url.strip(), model=model.strip(), tasks=tuple(tasks),
            limit=int(limit) or None, data=data_path.strip() or None, concurrency=int(concurrency), repeat=repeat,
        )
        try:
            job = background.start_job(request, url, api_key=api_key or None)
        except background.JobError as exc:
            st.error(str(exc))
            return
        st.success(f"Started: evalsvc {' '.join(job.argv)}")


def job_runs(runs: pd.DataFrame, job: background.Job) -> pd.DataFrame:
    """The store's runs this job is writing: per task, the newest run of the endpoint."""
    tasks = list(TASK_NAMES) if len(job.tasks) > 1 else list(job.tasks)
    mine = runs[(runs["endpoint"] == job.endpoint) & runs["task"].isin(tasks)]
    started = pd.Timestamp(job.started_at, unit="s", tz="UTC") - pd.Timedelta(seconds=5)
    recent = mine[mine["status"].isin(["running", "stalled"]) | (mine["finished_at"] >= started)]
    return recent.sort_values("run_id").groupby("task").tail(1)


def run_listing(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs as listed on this page, with the sandbox their code ran in (n/a when none ran)."""
    listed = runs[["run_id", "endpoint", "task", "isolation", "n", "n_items", "errors"]]
    return listed.assign(isolation=listed["isolation"].fillna(widgets.MISSING)).set_index("run_id")


def render_job(job: background.Job, runs: pd.DataFrame) -> None:
    """One job: its state, a progress bar per run, the end of its log."""
    when = datetime.fromtimestamp(job.started_at).strftime("%Y-%m-%d %H:%M:%S")
    with st.container(border=True, key=f"job_{job.job_id}"):
        st.markdown(f"**{widgets.esc(job.endpoint)}**: {job.state} (started {when})")
        for _, run in job_runs(runs, job).iterrows():
            done = int(run["n"]) / int(run["n_items"]) if int(run["n_items"]) else 0.0
            st.progress(min(done, 1.0), text=f"run {run['run_id']} {run['task']}: {run['n']}/{run['n_items']} items, "
                                             f"{run['errors']} errors, {run['status']}")
        if job.state == "running" and st.button("Stop (finished items stay stored)", key=f"stop_{job.job_id}"):
            background.stop_job(job)
        with st.expander("log", expanded=job.state in ("failed", "lost")):
            st.code(background.log_tail(job) or "(empty)", language=None)


@st.fragment(run_every=REFRESH_S)
def render_progress(url: str) -> None:
    """Jobs started here and any run still being written; refreshes itself every few seconds."""
    try:
        runs = data.load_runs(url)
    except StoreError as exc:
        st.error(f"Cannot open the store: {exc}")
        return
    jobs = background.list_jobs(url)
    st.subheader("Started from the dashboard")
    if not jobs:
        st.caption("No evaluation started here yet.")
    for job in jobs[:10]:
        render_job(job, runs)
    running = runs[runs["status"] == "running"]
    if not running.empty:
        st.subheader("Runs being written")
        st.table(run_listing(running))
    stalled = runs[runs["status"] == "stalled"]
    if not stalled.empty:
        st.subheader("Stalled runs")
        st.caption("Their runner stopped without recording it (killed, out of memory, machine down). Finished items "
                   "are stored; the same `evalsvc run` command resumes the run.")
        st.table(run_listing(stalled))


def main() -> None:
    url = data.db_url()
    st.title("Evaluate an endpoint")
    st.caption("Runs `evalsvc run` in the background on this store; it keeps going if you close or reload the page.")
    render_form(url)
    render_progress(url)


main()
