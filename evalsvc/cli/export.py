"""`evalsvc export`: a run's items (JSONL or CSV) and summary (JSON) out of the store."""

from __future__ import annotations

import json
from pathlib import Path

import click

from db import queries
from evalsvc.cli.runs import DB_OPTION, named_run, read_store
from harness.tasks import TASK_NAMES

FORMATS = ("jsonl", "csv")


@click.command("export")
@click.argument("run_refs", nargs=-1, required=True, metavar="RUN...")
@click.option("--task", type=click.Choice(list(TASK_NAMES)), help="With an endpoint name: which task's run.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True,
              help="Item rows as JSON lines or CSV (to stdout without --out).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder to write run-ID-items.jsonl, run-ID-items.csv and run-ID-summary.json into.")
@DB_OPTION
def export_command(run_refs: tuple[str, ...], task: str | None, fmt: str, out_dir: str | None, db: str | None) -> None:
    """Per-item results and a per-run summary (with the evalsvc version and endpoint fingerprint), no secrets.

    RUN is a run id, or an endpoint name (the run `evalsvc show NAME` shows).

    \b
    Example:
      evalsvc export step3 --task gsm8k > step3-gsm8k.jsonl
      evalsvc export 12 13 --out results/
    """
    from evalsvc.report import export

    store = read_store(db)
    ids = [ref if ref.isdigit() else named_run(store, ref, task)[0] for ref in run_refs]
    with store.session() as session:
        runs = [queries.resolve_run(session, ref) for ref in ids]
        if out_dir is None:
            for index, run in enumerate(runs):  # one CSV header for all the runs
                chunks = export.items_csv(session, run, header=not index) if fmt == "csv" else \
                    export.items_jsonl(session, run)
                for chunk in chunks:
                    click.echo(chunk, nl=False)
            return
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for run in runs:
            for name, chunks in ((f"run-{run.id}-items.jsonl", export.items_jsonl(session, run)),
                                 (f"run-{run.id}-items.csv", export.items_csv(session, run))):
                with open(folder / name, "w", encoding="utf-8", newline="") as fh:
                    fh.writelines(chunks)
                click.echo(folder / name)
            summary = folder / f"run-{run.id}-summary.json"
            summary.write_text(json.dumps(export.run_summary(session, run), indent=2, default=str) + "\n",
                               encoding="utf-8")
            click.echo(summary)

