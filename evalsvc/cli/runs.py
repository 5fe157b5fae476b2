"""`evalsvc run`, `evalsvc runs`, `evalsvc show`."""

from __future__ import annotations

import json
import math
from typing import Any

import click
from click.core import ParameterSource

from db import queries
from db.engine import DB_ENV, DEFAULT_DB_SHOWN, Store, open_store, store_location
from evalsvc.report.masking import has_credentials, mask_url
from evalsvc.report.token_counts import token_warning
from evalsvc.run.command import (API_KEY_ENV, DEFAULT_MAX_TOKENS, GSM8K_DATA_ENV, TASK_NAMES, default_items_text,
                                 task_list)
from evalsvc.run.runner import RunFailed, RunOutcome, RunSpec, check_limits, run_evaluation
from harness.redact import register_secret, register_url_secrets
from harness.types import DecodingSettings

TYPED_SECRET_WARNING = ("warning: {what} given with {option} can be read by every local user in the process list; "
                        "{instead}")


def secret_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Option callback: the URL's password and keys are masked in every message of this process from now on."""
    register_url_secrets(value)
    if value and has_credentials(value):
        instead = f"set ${param.envvar} instead" if param.envvar else f"give the key in ${API_KEY_ENV} instead"
        warn_if_typed(ctx, param, "the password or key", instead)
    return value


def secret_value(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Option callback: the value is masked in every message of this process from now on."""
    register_secret(value)
    if value:
        warn_if_typed(ctx, param, "the key", f"set ${param.envvar} instead")
    return value


def warn_if_typed(ctx: click.Context, param: click.Parameter, what: str, instead: str) -> None:
    """Say so when a secret came on the command line rather than from the environment."""
    if param.name and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
        click.echo(TYPED_SECRET_WARNING.format(what=what, option=param.opts[0], instead=instead), err=True)


DB_OPTION = click.option(
    "--db", envvar=DB_ENV, callback=secret_url,
    help=f"SQLAlchemy URL or SQLite path (default: ${DB_ENV} or {DEFAULT_DB_SHOWN}). "
         f"A URL with a password is better given as ${DB_ENV}: a command line is visible to every local user.",
)
API_KEY_OPTION = click.option(
    "--api-key", envvar=API_KEY_ENV, callback=secret_value,
    help=f"Bearer token, if the endpoint needs one. Better given as ${API_KEY_ENV}: a command line is visible "
         "to every local user.",
)
SHOWN_REASONS = 5  # why token counts are unknown: the most frequent reasons `show` lists
# One output cap everywhere (run, ladder run, speed), and why it is large.
MAX_TOKENS_HELP = ("Output cap per request. Keep it the same for every step: a short cap silently turns a more "
                   "verbose step into a less accurate one, and cut answers are counted as truncated.")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
ISOLATION_OPTION = click.option(
    "--isolation", type=click.Choice(["bwrap", "process"]), default="bwrap", show_default=True,
    help="How HumanEval programs are sandboxed: bwrap (bubblewrap; scoring refuses without it), or process: "
         "weaker, only for models you trust.",
)


class FiniteNumber(click.ParamType):
    """A finite number above `low` (or at least `low`, with `or_equal`): nan, inf and out-of-range values are
    refused at entry, before anything is stored."""

    name = "number"

    def __init__(self, low: float = 0.0, high: float | None = None, or_equal: bool = False) -> None:
        self.low, self.high, self.or_equal = low, high, or_equal

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        above = number >= self.low if self.or_equal else number > self.low
        if not (math.isfinite(number) and above and (self.high is None or number <= self.high)):
            self.fail(f"{value!r} is not {self.describe()}", param, ctx)
        return number

    def describe(self) -> str:
        low = f"{'at least' if self.or_equal else 'above'} {self.low:g}"
        return f"a finite number {low}" + (f" and at most {self.high:g}" if self.high is not None else "")


def read_store(db: str | None) -> Store:
    """The existing store for a command that only reads: a mistyped --db is an error, never a new empty store."""
    return open_store(db, create=False)


def write_store(db: str | None) -> Store:
    """The store a command writes to; a new one is made (at the path given, or the default) only when the
    command first writes, and said once on stderr."""
    return open_store(db, create=True, on_create=announce_new_store)


def announce_new_store(store: Store) -> None:
    click.echo(f"created a new evalsvc store at {store_location(store.url)}", err=True)


@click.command("run")
@click.option("--endpoint", required=True, help="Name for this endpoint (a ladder step), e.g. step3.")
@click.option("--url", required=True, callback=secret_url,
              help="OpenAI-compatible base URL, e.g. http://127.0.0.1:30000/v1.")
@click.option("--model", required=True, help="Model id as /v1/models lists it.")
@click.option("--task", default="gsm8k", show_default=True, type=click.Choice([*TASK_NAMES, "all"]))
@click.option("--limit", type=click.IntRange(min=1), help=f"First N items (default: {default_items_text()}).")
@click.option("--data", type=click.Path(), help="GSM8K file or folder (JSONL, .jsonl.gz or parquet), or 'hub' for openai/gsm8k through `datasets` "
              f"(default: ${GSM8K_DATA_ENV}, else the copy shipped with evalsvc).")
@click.option("--template", help="Prompt template name (default: the task's chat template).")
@click.option("--max-tokens", default=DEFAULT_MAX_TOKENS, show_default=True, type=click.IntRange(min=1),
              help=MAX_TOKENS_HELP)
@click.option("--seed", default=DecodingSettings().seed, show_default=True, type=int)
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(min=1))
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=FiniteNumber(),
              help="Seconds each attempt at a request may take in all, reading the reply included.")
@API_KEY_OPTION
@click.option("--new-url", is_flag=True, help="The endpoint moved: store --url for its name (else another URL "
              "for a stored name is refused).")
@click.option("--repeat", is_flag=True, help="Start a fresh repeat run even if this config was run before (noise floor).")
@click.option("--resume/--no-resume", default=True, hidden=True,
              help="--no-resume is the older spelling of --repeat: a stored run of the same identity is always "
                   "continued unless --repeat asks for a fresh one.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@ISOLATION_OPTION
@DB_OPTION
@JSON_OPTION
def run_command(endpoint: str, url: str, model: str, task: str, limit: int | None, data: str | None,
                template: str | None, max_tokens: int, seed: int, concurrency: int, timeout_s: float,
                api_key: str | None, new_url: bool, repeat: bool, resume: bool, no_progress: bool, isolation: str,
                db: str | None, as_json: bool) -> None:
    """Evaluate one endpoint and store every item; the same command again resumes.

    Example: evalsvc run --endpoint step3 --url http://127.0.0.1:30000/v1 --model Qwen/Qwen3-27B --task gsm8k
    """
    store = write_store(db)
    settings = DecodingSettings(max_tokens=max_tokens, seed=seed)
    specs = [RunSpec(
        endpoint=endpoint, base_url=url, model=model, task=one_task, template=template if task != "all" else None,
        data=data if one_task == "gsm8k" else None, limit=limit, settings=settings, concurrency=concurrency,
        api_key=api_key, new_repeat=repeat or not resume, timeout_s=timeout_s, new_url=new_url, isolation=isolation,
    ) for one_task in task_list(task)]
    check_limits(specs)  # with --task all, a --limit too large for HumanEval is refused before GSM8K runs
    outcomes = [run_evaluation(store, spec, progress=not (no_progress or as_json)) for spec in specs]
    echo_outcomes(store, outcomes, as_json)
    failed = [o for o in outcomes if o.summary.status == "failed"]
    if failed:
        raise RunFailed("; ".join(f"run {o.run_id} {o.summary.task} failed: {o.error}" for o in failed))


def echo_outcomes(store: Store, outcomes: list[RunOutcome], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"db": store.display_url, "runs": [outcome_dict(o) for o in outcomes]}, indent=2))
        return
    for outcome in outcomes:
        click.echo(describe_outcome(outcome))
        warning = token_warning(outcome.summary)
        if warning:
            click.echo(warning.describe())
    click.echo(f"stored in {store.display_url}")


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    return {**outcome.summary.as_dict(), "resumed": outcome.resumed, "skipped": outcome.skipped}


def describe_outcome(outcome: RunOutcome) -> str:
    s = outcome.summary
    how = f" (resumed, {outcome.skipped} items already done)" if outcome.resumed else ""
    return f"run {s.run_id} {s.endpoint} {s.task}: {s.status}{how}; " + summary_line(s)


def summary_line(s: queries.RunSummary) -> str:
    acc = f"{s.accuracy:.1%}" if s.accuracy is not None else "n/a"
    tokens = f"{s.mean_completion_tokens:.1f}" if s.mean_completion_tokens is not None else "n/a"
    if s.unknown_tokens:
        tokens += f" ({s.unknown_tokens} unknown, left out)"
    return (
        f"{s.correct}/{s.n - s.errors} correct ({acc}), {s.errors} errors, "
        f"{s.truncated} truncated, mean completion tokens {tokens}"
    )


@click.command("runs")
@DB_OPTION
@JSON_OPTION
def runs_command(db: str | None, as_json: bool) -> None:
    """List stored runs.

    Example: evalsvc runs --db team.db --json
    """
    store = read_store(db)
    with store.session() as session:
        summaries = queries.summarize_runs(session)
    if as_json:
        click.echo(json.dumps({"runs": [s.as_dict() for s in summaries]}, indent=2))
        return
    if not summaries:
        click.echo("no runs yet; start one with `evalsvc run --endpoint NAME --url URL --model MODEL`")
        return
    click.echo(format_runs_table(summaries))


def format_runs_table(summaries: list[queries.RunSummary]) -> str:
    header = ("run", "endpoint", "task", "status", "items", "correct", "errors", "accuracy", "mean tok")
    rows = [
        (
            str(s.run_id), s.endpoint, s.task, s.status, f"{s.n}/{s.n_items}", str(s.correct), str(s.errors),
            f"{s.accuracy:.1%}" if s.accuracy is not None else "-",
            f"{s.mean_completion_tokens:.1f}" if s.mean_completion_tokens is not None else "-",
        )
        for s in summaries
    ]
    return render_table(header, rows)


def render_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Plain aligned columns: first column left, the rest left unless numeric-looking."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


@click.command("show")
@click.argument("run_ref")
@click.option("--task", type=click.Choice(list(TASK_NAMES)), help="With an endpoint name: which task's run.")
@DB_OPTION
@JSON_OPTION
def show_command(run_ref: str, task: str | None, db: str | None, as_json: bool) -> None:
    """Summarise one run: by id, or the run an endpoint name stands for in compare and report.

    \b
    Example:
      evalsvc show 12
      evalsvc show step3 --task humaneval
    """
    store = read_store(db)
    aside: list[dict[str, Any]] = []
    if not run_ref.isdigit():
        run_ref, aside = named_run(store, run_ref, task)
    with store.session() as session:
        run = queries.resolve_run(session, run_ref, task)
        summary = queries.summarize_runs(session, [run.id])[0]
        endpoint = run.endpoint
        info = {
            **summary.as_dict(),
            "base_url": mask_url(endpoint.base_url),
            "model": endpoint.model,
            "mode": run.mode,
            "decoding": run.decoding,
            "config_hash": run.config_hash,
            "dataset_hash": run.dataset_hash,
            "evalsvc_version": run.evalsvc_version,
            "error": run.error,
            "unknown_token_reasons": queries.unknown_token_reasons(session, run.id),
            "other_runs": aside,
        }
    warning = token_warning(summary)
    info["token_warning"] = warning.to_dict() if warning else None
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    if warning:
        click.echo(warning.describe())
    click.echo(f"run {summary.run_id}: {summary.endpoint} ({info['model']} at {info['base_url']})")
    click.echo(f"task {summary.task}, template {summary.template}, mode {info['mode']}, status {summary.status}")
    click.echo(f"decoding {json.dumps(info['decoding'], sort_keys=True)}; "
               f"started by evalsvc {info['evalsvc_version'] or '(version not recorded)'}")
    click.echo(f"sandbox isolation {summary.isolation or 'n/a (scoring runs no code)'}")
    click.echo(f"items {summary.n}/{summary.n_items}: " + summary_line(summary))
    if summary.unknown_tokens:
        counted = [f"{count} x {reason}" for reason, count in info["unknown_token_reasons"].items()]
        reasons = "; ".join(counted[:SHOWN_REASONS]) + (
            f"; and {len(counted) - SHOWN_REASONS} other reasons (--json lists all)" if len(counted) > SHOWN_REASONS else "")
        click.echo(f"token count unknown for {summary.unknown_tokens} answered items, left out of length and "
                   f"task-time figures: {reasons}")
    if info["error"]:
        click.echo(f"error: {info['error']}")
    for other in aside:
        click.echo(f"also stored: run {other['run_id']} ({other['n_items']} items, {other['status']}); "
                   f"`evalsvc show {other['run_id']}`")


def named_run(store: Store, name: str, task: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The run an endpoint name stands for in `show`, and its other runs of that task.

    Of the endpoint's complete runs of the task, the one with the most items, the latest among equals: a small
    later run (a smoke test) never hides the full one; it is listed below it instead. Without a complete run,
    the latest run, whatever its state (so a failed run says why).
    """
    from evalsvc.decision.build import load_records

    with store.session() as session:
        records = [r for r in load_records(session, [name]) if r.task == (task or r.task)]
    complete = [r for r in records if r.status == "complete"] or records
    tasks = sorted({r.task for r in complete})
    if len(tasks) > 1:
        raise click.UsageError(f"{name} has runs of {' and '.join(tasks)}; give --task or a run id")
    if not tasks:
        raise queries.NotFound(f"endpoint {name!r} has no {task or ''} run yet; `evalsvc runs` lists the runs")
    runs = [r for r in records if r.task == tasks[0]]
    best = max((r for r in complete), key=lambda r: (r.status == "complete", r.n_items, r.order))
    others = sorted((r for r in runs if r is not best), key=lambda r: r.order, reverse=True)
    return str(best.info.run_id), [{"run_id": r.info.run_id, "n_items": r.n_items, "status": r.status}
                                   for r in others]

