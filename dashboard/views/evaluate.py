"""Evaluate an endpoint: start `evalsvc run` in the background and watch its progress in the store."""

from __future__ import annotations

from datetime import datetime

import pandas as pd
import streamlit as st

from dashboard import analysis, data, job_manager, widgets
from db.engine import StoreError
from evalsvc.decision.build import WORKLOADS
from evalsvc.run.command import (DEFAULT_MAX_TOKENS, TASK_NAMES, data_in_environment, default_items_text, error_line,
                                 template_choices)

REFRESH_S = 2.0


def render_form(url: str) -> None:
    """The form, in plain words; on submit, checks it (the address too) and starts the job."""
    with st.form("evaluate", border=True):
        left, right = st.columns(2)
        name = left.text_input("Name for this step", key="ev_name", placeholder="int4-spec",
                               help="How the ladder will call this endpoint, e.g. bf16, int4, int4-spec.")
        base_url = right.text_input("Server address (OpenAI-compatible)", key="ev_url",
                                    placeholder="http://127.0.0.1:30000/v1")
        model = left.text_input("Model name, as the server lists it at /v1/models", key="ev_model")
        tasks = right.multiselect("Tasks", list(TASK_NAMES), default=[TASK_NAMES[0]], key="ev_tasks",
                                  help="GSM8K: grade-school math (math workload); HumanEval: Python problems whose "
                                       "tests are run (code workload). One task or both.")
        limit = left.number_input(f"Questions per task (0 = all: {default_items_text()})", 0, 10_000, 0,
                                  key="ev_limit")
        max_tokens = right.number_input("Longest answer, in tokens (max tokens)", 16, 65_536,
                                        DEFAULT_MAX_TOKENS, key="ev_max_tokens",
                                        help="Answers cut at this length are marked; keep it the same on every step.")
        templates = ["the task's default"] + [t for names in template_choices().values() for t in names]
        template = left.selectbox("Prompt template", templates, key="ev_template",
                                  help="Keep it the same on every step: steps with other templates are not compared.")
        concurrency = right.number_input("Requests at once", 1, 256, 8, key="ev_concurrency")
        data_path = left.text_input("GSM8K questions file or folder on this machine (optional)", key="ev_data",
                                    value=data_in_environment(),
                                    help="Without it the questions come with evalsvc or are downloaded.")
        api_key = right.text_input("API key (optional; not stored)", type="password", key="ev_key")
        repeat = st.checkbox("Evaluate again with the same settings (a repeat run: shows run-to-run noise)",
                             key="ev_repeat")
        submitted = st.form_submit_button("Start evaluation", type="primary")
    if submitted:
        request = job_manager.EvalRequest(
            endpoint=name.strip(), base_url=base_url.strip(), model=model.strip(), tasks=tuple(tasks),
            limit=int(limit) or None, data=data_path.strip() or None, max_tokens=int(max_tokens),
            concurrency=int(concurrency), repeat=repeat, template=None if template == templates[0] else template,
        )
        start(request, url, api_key or None)


def start(request: job_manager.EvalRequest | job_manager.SpeedRequest, url: str, api_key: str | None = None) -> None:
    """Start a job and say so; a refusal in one readable line."""
    try:
        job = job_manager.start_job(request, url, api_key=api_key)
    except job_manager.JobError as exc:
        st.error(str(exc))
        return
    st.success(f"Started: evalsvc {' '.join(job.argv)}")


def render_speed_form(url: str, runs: pd.DataFrame) -> None:
    """Measure a stored step's decode speed per workload, or enter a vendor figure with its source."""
    steps = list(dict.fromkeys(runs["endpoint"])) if not runs.empty else []
    st.subheader("Decode speed")
    st.caption("Task time needs each step's decode speed per workload (math, code, chat). Measure it against the "
               "running server (batch 1, streamed), or enter a figure from a vendor table with where it comes from.")
    if not steps:
        st.caption("Evaluate a step first: speeds are stored per step.")
        return
    with st.form("speed", border=True):
        left, middle, right = st.columns(3)
        step = left.selectbox("Step", steps, key="sp_step")
        workload = middle.selectbox("Workload", list(WORKLOADS), key="sp_workload")
        limit = right.number_input("Prompts to time", 2, 500, 20, key="sp_limit")
        tps = left.number_input("Or: decode tokens per second from a vendor table (0 = measure)", 0.0, 100_000.0,
                                0.0, key="sp_tps")
        source = middle.text_input("Where that figure comes from", key="sp_source", placeholder="vendor table, 2026-11")
        submitted = st.form_submit_button("Measure speed (or store the figure entered)")
    if submitted:
        start(job_manager.SpeedRequest(step, workload, int(limit), float(tps) if tps else None, source), url)


def job_runs(runs: pd.DataFrame, job: job_manager.Job) -> pd.DataFrame:
    """The store's runs this job is writing: per task, the newest run of the endpoint."""
    tasks = list(TASK_NAMES) if len(job.tasks) > 1 else list(job.tasks)
    mine = runs[(runs["endpoint"] == job.endpoint) & runs["task"].isin(tasks)]
    started = pd.Timestamp(job.started_at, unit="s", tz="UTC") - pd.Timedelta(seconds=5)
    recent = mine[mine["status"].isin(["running", "stalled"]) | (mine["finished_at"] >= started)]
    return recent.sort_values("run_id").groupby("task").tail(1)


def run_listing(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs as listed on this page, with the sandbox their code ran in (n/a when none ran)."""
    listed = runs[["run_id", "endpoint", "task", "isolation", "n", "n_items", "errors"]]
    return listed.assign(isolation=listed["isolation"].fillna(widgets.MISSING)).rename(columns={"run_id": "run"})


JOB_STATES = {
    "starting": "the job is loading; it starts sending requests in a moment",
    "running": "requests are being sent; each finished item is stored at once",
    "finished": "done",
    "failed": "it stopped with an error: the end of its log says why",
    "interrupted": "it was stopped (the Stop button, Ctrl-C or a shutdown); finished items are stored, and starting "
                   "the same evaluation again resumes it",
    "lost": "its process ended without a word (killed, out of memory, the machine restarted); finished items are "
            "stored, and starting the same evaluation again resumes it",
}


def render_job(job: job_manager.Job, runs: pd.DataFrame, order: list[str], url: str) -> None:
    """One job: its state in words, a progress bar per run, accuracy and links (or the speed stored) when done, the
    end of its log."""
    when = datetime.fromtimestamp(job.started_at).strftime("%Y-%m-%d %H:%M:%S")
    speed = job.workload is not None
    what = f"speed of {job.endpoint} ({job.workload})" if speed else job.endpoint
    with st.container(border=True, key=f"job_{job.job_id}"):
        st.markdown(f"**{widgets.esc(what)}**: {job.state} (started {when})")
        st.caption(JOB_STATES.get(job.state, ""))
        for _, run in ([] if speed else job_runs(runs, job).iterrows()):
            render_run(run, job.endpoint, order)
        if speed and job.state == "finished":
            st.markdown(widgets.esc(stored_speed_line(url, job)))
        tail = job_manager.log_tail(job)
        if job.state == "failed" and (reason := error_line(tail)):
            st.error(reason)  # the one line that says what to do, not buried under the retries above it
        if job.state == "running" and st.button("Stop (finished items stay stored)", key=f"stop_{job.job_id}"):
            job_manager.stop_job(job)
        with st.expander("log", expanded=job.state in ("failed", "lost")):
            widgets.mono(tail or "(empty)")


def stored_speed_line(url: str, job: job_manager.Job) -> str:
    """What a finished speed job left in the store: the step's speed on that workload, as the pages use it."""
    workload = str(job.workload)
    speed = data.endpoint_speeds(url, (job.endpoint,)).get(job.endpoint, {}).get(workload)
    if speed is None:
        return f"No usable {workload} speed is stored for {job.endpoint}: the log says why."
    return f"{job.endpoint} {workload} speed now stored: {speed.describe()}"


def render_run(run: pd.Series, endpoint: str, order: list[str]) -> None:
    """A run's progress; once complete, its accuracy and links to where it stands."""
    n, n_items, errors = int(run["n"]), int(run["n_items"]), int(run["errors"])
    done = n / n_items if n_items else 0.0
    st.progress(min(done, 1.0), text=f"run {run['run_id']} {run['task']}: {n}/{n_items} items, "
                                     f"{widgets.plural(errors, 'error')}, {run['status']}")
    if run["status"] != "complete":
        return
    st.markdown(f"{widgets.esc(run['task'])}: accuracy **{widgets.pct(run['accuracy'])}** "
                f"({int(run['correct'])} of {n - errors} scored)")
    index = order.index(endpoint) if endpoint in order else 0
    params = {"task": str(run["task"]), "b": endpoint, **({"a": order[index - 1]} if index > 0 else {})}
    cols = st.columns(2)
    cols[0].page_link(widgets.PAGES["ladder"], label=f"Where {endpoint} stands on the ladder", query_params=params,
                      icon=":material/arrow_forward:")
    if index > 0:
        cols[1].page_link(widgets.PAGES["disagreements"], label=f"Disagreements: {endpoint} vs {order[index - 1]}",
                          query_params=params, icon=":material/arrow_forward:")


@st.fragment(run_every=REFRESH_S)
def render_progress(url: str) -> None:
    """Jobs started here and any run still being written; refreshes itself every few seconds."""
    try:
        runs = data.load_runs(url)
    except StoreError as exc:
        st.error(f"Cannot open the store: {exc}")
        return
    jobs = job_manager.list_jobs(url)
    st.subheader("Started from the dashboard")
    if not jobs:
        st.caption("No evaluation started here yet.")
    order = analysis.ladder_order(runs)
    for job in jobs[:10]:
        render_job(job, runs, order, url)
    running = runs[runs["status"] == "running"]
    if not running.empty:
        st.subheader("Runs being written")
        widgets.table(run_listing(running))
    stalled = runs[runs["status"] == "stalled"]
    if not stalled.empty:
        st.subheader("Stalled runs")
        st.caption("Their runner stopped without recording it (killed, out of memory, machine down). Finished items "
                   "are stored; the same `evalsvc run` command resumes the run.")
        widgets.table(run_listing(stalled))


def main() -> None:
    url = data.db_url()
    st.title("Evaluate an endpoint")
    st.caption("Runs `evalsvc run` in the background on this store; it keeps going if you close or reload the page.")
    render_form(url)
    try:
        render_speed_form(url, data.load_runs(url))
    except StoreError as exc:
        st.error(f"Cannot open the store: {exc}")
    render_progress(url)


main()
