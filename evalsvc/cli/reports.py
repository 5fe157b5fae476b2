"""`evalsvc compare`, `report`, `speed` and `decide`."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import click

from db import queries
from evalsvc.cli.runs import API_KEY_OPTION, DB_OPTION, JSON_OPTION, FiniteNumber, read_store, secret_url, write_store
from evalsvc.cli.selection import render_runs_used, runs_used
from evalsvc.cli.text import fit, output_width
from harness.errors import EXIT_FAILED, UserError
from harness.tasks import TASK_NAMES, TASK_WORKLOAD, WORKLOADS
from harness.types import DecodingSettings



class GateTripped(UserError):
    """A --fail-on gate tripped: the output is printed, then the command exits 1 for CI."""

    exit_code: ClassVar[int] = EXIT_FAILED
    label: ClassVar[str] = "gate"


RULE_HELP = (
    "\b\nVerdict rule, from the paired Newcombe 95% interval of accuracy B-A and the task's margin m:\n"
    "  better                      interval above 0\n"
    "  no change beyond the margin interval holds 0, inside (-m, +m)\n"
    "  no worse than -m            interval holds 0, low end above -m, high end at +m or more\n"
    "  worse, within the margin    interval below 0, low end above -m\n"
    "  worse                       interval below 0, reaching -m or further\n"
    "  inconclusive                interval from -m or below to 0 or above\n"
    "p-values are shown beside the interval, never used to decide. Verdicts are per pair and not adjusted\n"
    "for multiplicity, so a pair gets the same verdict from compare, report, decide and the dashboard;\n"
    "report adds Holm-adjusted p-values as information."
)
DECISION_HELP = (
    "\b\nDecision per workload: take B when accuracy is not worse (any verdict but worse and inconclusive)\n"
    "and the task-time ratio B/A has its 95% interval below 1; stop at A when accuracy is worse or the\n"
    "interval is above 1; otherwise can't tell yet, with what would settle it."
)


def _margins(values: tuple[str, ...]) -> Any:
    from evalsvc.decision.rule import MarginError, parse_margins  # lazy: keeps scipy out of `evalsvc run` start-up

    try:
        return parse_margins(values, list(TASK_NAMES))
    except MarginError as exc:
        raise click.BadParameter(str(exc), param_hint="--margin") from None


MARGIN_OPTION = click.option(
    "--margin", "margins", multiple=True, metavar="[TASK=]POINTS",
    help="Non-inferiority margin in accuracy points (default 2), for every task or, as TASK=POINTS, for one: "
         "--margin 2 --margin humaneval=5. Repeatable.")
FORCE_OPTION = click.option("--force", is_flag=True, help="Pair runs even if prompt template or decoding differ.")
MARKDOWN_OPTION = click.option("--markdown", is_flag=True, help="Markdown for a write-up.")
WIDE_OPTION = click.option("--wide", is_flag=True, help="Whole lines and tables, whatever the terminal's width "
                           "(text fits $COLUMNS or the terminal otherwise; a pipe gets whole lines).")


@click.command("compare", epilog=RULE_HELP)
@click.argument("a")
@click.argument("b")
@click.option("--task", type=click.Choice([*TASK_NAMES, "all"]),
              help="Only this task (default, or all: every task both ran).")
@click.option("--disagreements", is_flag=True, help="Also list the items where exactly one side was right.")
@click.option("--fail-on", "fail_on", type=click.Choice(["worse", "worse-or-inconclusive"]),
              help="For CI: exit 1 when a task's verdict is worse (or, also, inconclusive).")
@MARGIN_OPTION
@FORCE_OPTION
@MARKDOWN_OPTION
@WIDE_OPTION
@DB_OPTION
@JSON_OPTION
def compare_command(a: str, b: str, task: str | None, disagreements: bool, fail_on: str | None,
                    margins: tuple[str, ...], force: bool, markdown: bool, wide: bool, db: str | None,
                    as_json: bool) -> None:
    """Paired accuracy of B against A (endpoint names or run ids), with the verdict.

    Example: evalsvc compare bf16 awq-int4 --margin humaneval=5
    """
    from evalsvc.decision import build
    from evalsvc.report import decision_report
    from evalsvc.report.accuracy_report import render_comparisons_markdown, render_comparisons_text

    check_two_sides(a, b)
    store = read_store(db)
    tasks = [task] if task and task != "all" else list(TASK_NAMES)
    comparisons = build.compare_refs(store, a, b, tasks, _margins(margins), force)
    selection = runs_used(store, [a, b], tasks, force)
    if as_json:
        payload: dict[str, Any] = {"comparisons": [c.to_dict() for c in comparisons], "runs": selection}
        if disagreements:
            payload["disagreements"] = {c.task: decision_report.disagreements(store, c).to_dict("records")
                                        for c in comparisons}
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        render = render_comparisons_markdown if markdown else render_comparisons_text
        parts = [render(comparisons), render_runs_used(selection, markdown)]
        if disagreements:
            parts += [f"{c.task}: items where exactly one side was right\n"
                      + render_disagreements(decision_report.disagreements(store, c)) for c in comparisons]
        echo_text("\n\n".join(parts), wide or markdown)
    gate_verdicts(comparisons, fail_on)


@click.command("report", epilog=RULE_HELP + "\n\n" + DECISION_HELP)
@click.argument("ladder_file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--endpoints", help="Comma-separated step names in ladder order (instead of a ladder file).")
@click.option("--baseline", help="Step every other step is also compared with (default: the first).")
@MARGIN_OPTION
@FORCE_OPTION
@MARKDOWN_OPTION
@WIDE_OPTION
@DB_OPTION
@JSON_OPTION
def report_command(ladder_file: str | None, endpoints: str | None, baseline: str | None, margins: tuple[str, ...],
                   force: bool, markdown: bool, wide: bool, db: str | None, as_json: bool) -> None:
    """Every step against the previous one and the baseline, with decisions.

    Example: evalsvc report --endpoints bf16,awq-int4,awq-int4-spec --margin humaneval=5
    """
    from evalsvc.ladder.file import load_ladder
    from evalsvc.report import decision_report
    from evalsvc.report.token_counts import token_warnings

    if bool(ladder_file) == bool(endpoints):
        raise click.UsageError("give either a LADDER_FILE or --endpoints a,b,c")
    names = [s.name for s in load_ladder(ladder_file).steps] if ladder_file else [
        n.strip() for n in (endpoints or "").split(",") if n.strip()]
    check_steps(names, baseline)
    store = read_store(db)
    with store.session() as session:
        for name in names:  # an unknown name is an error, never a silently shorter ladder
            queries.get_endpoint(session, name)
    report = decision_report.ladder_report_for(store, names, baseline=baseline, margins=_margins(margins), force=force)
    compared = [run for e in report.accuracy.entries for run in (e.comparison.run_a, e.comparison.run_b)]
    with store.session() as session:
        warnings = token_warnings(session, compared)
    selection = runs_used(store, names, None, force)
    if as_json:
        click.echo(json.dumps({"token_warnings": [w.to_dict() for w in warnings], **report.to_dict(),
                               "runs": selection}, indent=2, default=str))
        return
    parts = [w.describe() for w in warnings]
    parts += [report.render_markdown() if markdown else report.render_text(), "\n" + render_runs_used(selection, markdown)]
    echo_text("\n".join(parts), wide or markdown)


@click.command("speed")
@click.option("--endpoint", required=True, help="Stored endpoint name (or a new one with --url and --model).")
@click.option("--workload", default="chat", show_default=True, callback=lambda ctx, param, value: TASK_WORKLOAD.get(value, value),
              type=click.Choice([*WORKLOADS, *TASK_NAMES]),
              help="What to time: math, code or chat prompts (the task names gsm8k and humaneval mean math and code).")
@click.option("--limit", "--n", "n", default=20, show_default=True, type=click.IntRange(min=2),
              help="Prompts to time (--n is the older name).")
@click.option("--max-tokens", default=DecodingSettings().max_tokens, show_default=True, type=click.IntRange(min=2),
              help="Cap per request; keep it at least the accuracy runs' cap, or chat lengths are cut.")
@click.option("--url", callback=secret_url, help="Base URL, when the endpoint is not stored yet.")
@click.option("--model", help="Model id, when the endpoint is not stored yet.")
@click.option("--new-url", is_flag=True, help="The endpoint moved: store --url for its name.")
@click.option("--data", type=click.Path(), help="Local GSM8K file or folder (math prompts).")
@click.option("--chat-data", help="Chat prompts: a JSONL file or a datasets name (default: built-in set).")
@click.option("--tokens-per-second", "tps", type=FiniteNumber(),
              help="Enter a decode speed by hand instead of measuring.")
@click.option("--ttft", type=FiniteNumber(or_equal=True),
              help="With --tokens-per-second: seconds to first token (default 0).")
@click.option("--source", help="With --tokens-per-second: where the figure comes from.")
@API_KEY_OPTION
@DB_OPTION
@JSON_OPTION
def speed_command(endpoint: str, workload: str, n: int, max_tokens: int, url: str | None, model: str | None,
                  new_url: bool, data: str | None, chat_data: str | None, tps: float | None, ttft: float | None, source: str | None,
                  api_key: str | None, db: str | None, as_json: bool) -> None:
    """Batch-1 streaming speed of an endpoint on one workload (or a figure entered by hand).

    \b
    Example:
      evalsvc speed --endpoint step4 --workload code --limit 20
      evalsvc speed --endpoint step4 --workload math --tokens-per-second 252 --source "vendor table"
    """
    from evalsvc.report.decision_report import speed_summary
    from evalsvc.run.speed import SpeedPlan, measure_speed, record_speed_by_hand

    check_speed_options(tps, ttft, source)
    store = write_store(db) if url and model else read_store(db)
    if tps is not None:
        run = record_speed_by_hand(store, endpoint, workload, tps, ttft or 0.0, source or "")
    else:
        plan = SpeedPlan(endpoint=endpoint, workload=workload, n=n, max_tokens=max_tokens, data=data,
                         chat_source=chat_data, url=url, model=model, api_key=api_key, new_url=new_url)
        run = measure_speed(store, plan, progress=not as_json)
    summary = speed_summary(store, run.id)
    click.echo(json.dumps(summary, indent=2) if as_json else format_speed(summary))


def echo_text(text: str, wide: bool) -> None:
    """Text for people, fitted to the terminal unless --wide (or Markdown, which keeps its tables whole)."""
    click.echo(fit(text, output_width(wide)))


def render_disagreements(frame: Any) -> str:
    return frame.to_string(index=False) if len(frame) else "  none: both sides were right or wrong together"


def gate_verdicts(comparisons: list[Any], fail_on: str | None) -> None:
    """--fail-on for CI: exit 1 (after the output) when a verdict trips the gate."""
    from evalsvc.decision.rule import Verdict

    tripping = {"worse": {Verdict.WORSE}, "worse-or-inconclusive": {Verdict.WORSE, Verdict.INCONCLUSIVE}}
    hit = [c for c in comparisons if fail_on and Verdict(getattr(c.verdict, "value", c.verdict)) in tripping[fail_on]]
    if hit:
        raise GateTripped(", ".join(f"{c.task} is {Verdict(getattr(c.verdict, 'value', c.verdict)).value}"
                                    for c in hit) + f" (--fail-on {fail_on})")


def gate_decision(decision: dict[str, Any], fail_on: str | None) -> None:
    """--fail-on for CI: exit 1 (after the output) when a workload's decision trips the gate."""
    tripping = {"stop": (False,), "stop-or-cant-tell": (False, None)}
    hit = [w for w in decision["workloads"] if fail_on and w["take_b"] in tripping[fail_on]]
    if hit:
        raise GateTripped(", ".join(f"{w['workload']}: {w['decision']}" for w in hit) + f" (--fail-on {fail_on})")


def check_two_sides(a: str, b: str) -> None:
    if a == b:
        raise click.UsageError(f"A and B are both {a!r}; compare two different endpoints or runs")


def check_steps(names: list[str], baseline: str | None) -> None:
    """Usage errors in a report's list of steps: too few, one named twice, a baseline not among them."""
    if len(names) < 2:
        raise click.UsageError("a report needs at least two steps")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise click.UsageError(f"{', '.join(map(repr, twice))} is named twice; name each step once, in ladder order")
    if baseline is not None and baseline not in names:
        raise click.UsageError(f"--baseline {baseline!r} is not one of the steps: {', '.join(names)}")


def check_speed_options(tps: float | None, ttft: float | None, source: str | None) -> None:
    if tps is None and (ttft is not None or source is not None):
        raise click.UsageError("--ttft and --source go with --tokens-per-second (a speed entered by hand); "
                               "leave them out to measure the endpoint")


def format_speed(s: dict[str, Any]) -> str:
    if not s["measured"]:
        return (f"{s['endpoint']} {s['workload']}: {s['decode_tps']:.1f} tok/s entered by hand "
                f"(source: {s['source']})")
    lines = [
        f"{s['endpoint']} {s['workload']}: {s['n_ok']}/{s['n']} requests measured (batch 1, streaming)",
        f"  decode {s['decode_tps_median']:.1f} tok/s median, {s['decode_tps_mean']:.1f} mean",
        f"  time to first token {s['ttft_median_s'] * 1000:.0f} ms median; "
        f"output tokens {s['output_tokens_mean']:.1f} mean" + _reasoning_part(s),
    ]
    if s.get("truncated"):
        lines.append(f"  {s['truncated']} answers cut at the cap of {s['max_tokens']} tokens: their lengths are not "
                     "whole, and a chat decision is refused on them; measure again with a larger --max-tokens")
    lines.extend(_accept_length_lines(s))
    return "\n".join(lines)


def _reasoning_part(s: dict[str, Any]) -> str:
    """How much of the mean output was reasoning, when the server counted it for every request."""
    mean = s.get("reasoning_tokens_mean")
    return f" ({mean:.1f} of them reasoning)" if mean is not None else ""


def _accept_length_lines(s: dict[str, Any]) -> list[str]:
    """Speculative acceptance: this probe's own figures first; SGLang's since-start average only as such."""
    lines = []
    if s.get("accept_length_mean") is not None:
        lines.append(f"  speculative decoding: accept length {s['accept_length_mean']:.2f} mean over "
                     f"{s['n_accept_length']} requests (as the server reported each)")
    spec = s.get("spec_stats") or {}
    if spec.get("probe_accept_length") is not None:
        lines.append(f"  speculative decoding: accept length {spec['probe_accept_length']:.2f} over this probe "
                     f"({spec['probe_generation_tokens']} tokens / {spec['probe_verify_calls']} verify steps)")
    since_start = [spec.get(k) for k in ("lifetime_before", "lifetime_after")]
    if since_start[1] is not None:
        before = f"{since_start[0]:.2f} -> " if since_start[0] is not None else ""
        lines.append(f"  server's average since it started (not this probe's): {before}{since_start[1]:.2f}")
    elif spec.get("avg_accept_length") is not None:  # stored by an earlier evalsvc
        lines.append(f"  server's average since it started (not this probe's): {spec['avg_accept_length']:.2f}")
    return lines


@click.command("decide", epilog=DECISION_HELP + "\n\n" + RULE_HELP)
@click.argument("a")
@click.argument("b")
@click.option("--fail-on", "fail_on", type=click.Choice(["stop", "stop-or-cant-tell"]),
              help="For CI: exit 1 when a workload's decision is stop at A (or, also, can't tell yet).")
@MARGIN_OPTION
@WIDE_OPTION
@DB_OPTION
@JSON_OPTION
def decide_command(a: str, b: str, fail_on: str | None, margins: tuple[str, ...], wide: bool, db: str | None,
                   as_json: bool) -> None:
    """Per workload: take step B, stop at A, or can't tell yet (and what would settle it).

    Example: evalsvc decide awq-int4 awq-int4-spec --margin humaneval=5
    """
    from evalsvc.report import decision_report

    check_two_sides(a, b)
    store = read_store(db)
    decision = decision_report.decide_pair(store, a, b, _margins(margins))
    selection = runs_used(store, [a, b])
    as_dict = decision_report.pair_dict(decision)
    if as_json:
        click.echo(json.dumps({**as_dict, "runs": selection}, indent=2))
    else:
        echo_text(decision_report.render_decisions([decision]) + "\n\n" + render_runs_used(selection), wide)
    gate_decision(as_dict, fail_on)

