"""Comparisons of runs and ladders of runs in words and tables.

The figures come from `evalsvc.decision.compare` (`Comparison`, `LadderReport`);
here they become terminal text and Markdown. Every report also says in words
what a reader may and may not conclude.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from evalsvc.decision import rule
from evalsvc.decision.compare import Comparison, LadderEntry, LadderReport
from evalsvc.decision.rule import POWER, Verdict
from evalsvc.statistics import pairing
from evalsvc.statistics.paired_tests import CochranQ

DEFAULT_ALPHA = 1 - rule.CONFIDENCE  # Cochran's Q; verdicts read the 95% interval


# --- words ---------------------------------------------------------------------


def _points(fraction: float, signed: bool = True) -> str:
    return f"{100 * fraction:+.1f}" if signed else f"{100 * fraction:.1f}"


def format_p(p: float) -> str:
    """p-values to three decimals, or '<0.001'."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _p_words(label: str, p: float) -> str:
    return f"{label} < 0.001" if p < 0.001 else f"{label} = {p:.3f}"


def _ci_words(c: Comparison) -> str:
    return f"95% CI {_points(c.diff_ci_low)} to {_points(c.diff_ci_high)} points"


def describe_comparison(c: Comparison, p_holm: float | None = None) -> str:
    """What a reader may and may not conclude from one comparison.

    The verdict is read from the interval alone (`rule.RULE_TEXT`); the exact
    McNemar p, and the Holm-adjusted p when given, are shown beside it.
    """
    head = f"{c.task}, {c.endpoint_b} vs {c.endpoint_a}: "
    p_text = _p_words("exact McNemar p", c.p_exact)
    if p_holm is not None:
        p_text += f", {_p_words('Holm-adjusted p', p_holm)} (information only)"
    sentences = [_verdict_sentence(c, p_text)]
    if c.settle is not None:
        sentences.append(f"{SETTLE_HEAD}: {describe_settle(c.task, c.settle)}")
    sentences.append(_mde_sentence(c))
    if c.noise_floor is not None:
        sentences.append(_noise_sentence(c))
    if c.isolation == "process":
        sentences.append("Its programs ran under 'process' isolation, which is only for models you trust.")
    elif c.isolation is not None:
        sentences.append(f"Its programs ran in the {c.isolation} sandbox.")
    if c.forced:
        sentences.append(f"Pairing was forced although the runs differ in {'; '.join(c.differences)}.")
    if c.dropped.total:
        were = "item was" if c.dropped.total == 1 else "items were"
        sentences.append(f"{c.dropped.total} {were} left out ({pairing.format_drops(c.dropped)}).")
    return head + " ".join(sentences)


def _noise_sentence(c: Comparison) -> str:
    rate = f"flip rate {_points(c.flip_rate or 0.0, signed=False)}% between repeat runs of this task"
    if not c.noise_floor:
        return f"The {c.table.discordant} disagreements are more than run-to-run noise makes ({rate})."
    within = f"The {c.table.discordant} disagreements are no more than run-to-run noise makes ({rate})"
    if c.verdict in (Verdict.WORSE, Verdict.WORSE_WITHIN, Verdict.BETTER):
        # Noise flips split evenly between the sides; the interval measures exactly that lopsidedness.
        return f"{within}, but their one-sided split is what the interval measures, so the verdict stands."
    return f"{within}."


_VERDICT_WORDS = {
    Verdict.BETTER: "B is better than A",
    Verdict.SAME: "No change beyond the margin of {m} points",
    Verdict.NO_WORSE: "B is no worse than A by more than {m} points (it may be better by more)",
    Verdict.WORSE_WITHIN: "B is worse than A, but by less than the margin of {m} points",
    Verdict.WORSE: "B is worse than A, and may be worse by the margin of {m} points or more",
    Verdict.INCONCLUSIVE: "Inconclusive: the interval reaches from a drop of {m} points or more to no drop at all",
}


def _verdict_sentence(c: Comparison, p_text: str) -> str:
    words = _VERDICT_WORDS[c.verdict].format(m=_points(c.margin, signed=False))
    return f"{words}: accuracy changed by {_points(c.diff)} points ({_ci_words(c)}; {p_text})."


SETTLE_HEAD = "What would settle it"  # what each report puts before `describe_settle`'s words


def describe_settle(task: str, s: rule.Settle) -> str:
    """What would settle an inconclusive verdict, in words (a sentence; the caller puts `SETTLE_HEAD` before it)."""
    items = f"{s.n} item{'' if s.n == 1 else 's'}"
    head = f"these {items} establish a margin of {_points(s.smallest_margin, signed=False)} points"
    if s.more_items_possible and s.items_needed is not None and s.items_needed > s.n:
        return (f"{head}; about {s.items_needed} items at the observed rates would settle it at a "
                f"{_points(s.margin, signed=False)}-point margin (--limit {s.items_needed} reuses the stored items).")
    if s.best_margin >= s.margin:
        why = (f"{items} can never establish {_points(s.margin, signed=False)} points (even identical answers "
               f"leave an interval down to -{_points(s.best_margin, signed=False)})")
    elif s.items_needed is None:
        why = "at the observed rates no number of items settles it"
    else:
        why = f"it would take about {s.items_needed} items at the observed rates, more than {task}'s {s.items_available}"
    suggestion = (math.floor(round(1000 * s.smallest_margin, 6)) + 1) / 10  # strictly past the interval's end
    return f"{head}; {why}, so a margin of at least that size is needed (e.g. --margin {task}={suggestion:g})."


def _mde_sentence(c: Comparison) -> str:
    items = f"{c.n_paired} item{'' if c.n_paired == 1 else 's'}"
    if c.mde is None:
        why = "no item was answered differently" if c.table.discordant == 0 else (
            f"the runs disagree on only {c.table.discordant}")
        return f"With {items}, of which {why}, the test detects no difference with {POWER:.0%} power."
    return (f"With {items} and this disagreement rate, a difference of {_points(c.mde, signed=False)} points "
            f"or more would be detected with {POWER:.0%} power.")


_FOOTNOTE = (f"B-A, CI and MDE in accuracy points; MDE at {POWER:.0%} power (none: these items detect no "
             "difference). Verdicts read the 95% CI against the margin (the rule: `evalsvc compare --help`).")


# --- tables ----------------------------------------------------------------------

COLUMNS = (
    "task", "A", "B", "n", "both", "A only", "B only", "neither", "acc A", "acc B",
    "B-A", "95% CI", "p exact", "p mid-p", "MDE", "verdict",
)
_LEFT = {"task", "A", "B", "verdict", "step A", "step B", "vs"}


def verdict_label(c: Comparison) -> str:
    """The verdict with the margin filled in."""
    if c.verdict is Verdict.NO_WORSE:
        return f"no worse than -{_points(c.margin, signed=False)} pts"
    if c.verdict in (Verdict.SAME, Verdict.WORSE_WITHIN):
        return f"{c.verdict.value} ({_points(c.margin, signed=False)} pts)"
    return c.verdict.value


def _mde_cell(c: Comparison) -> str:
    return "none" if c.mde is None else _points(c.mde, signed=False)


def comparison_row(c: Comparison) -> list[str]:
    """Cells of one comparison, in `COLUMNS` order."""
    t = c.table
    return [
        c.task, c.endpoint_a, c.endpoint_b, str(t.n), str(t.both_correct), str(t.a_only), str(t.b_only),
        str(t.neither), f"{_points(c.acc_a, signed=False)}%", f"{_points(c.acc_b, signed=False)}%",
        _points(c.diff), f"{_points(c.diff_ci_low)} to {_points(c.diff_ci_high)}",
        format_p(c.p_exact), format_p(c.p_midp), _mde_cell(c), verdict_label(c),
    ]


def render_text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Fixed-width table: labels left-aligned, figures right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(width) if name in _LEFT else cell.rjust(width)
            for name, cell, width in zip(header, cells, widths)
        ]
        return "  ".join(padded).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def render_markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """GitHub-flavoured Markdown table, figures right-aligned."""
    align = [":---" if name in _LEFT else "---:" for name in header]
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def render_comparisons_text(comparisons: Sequence[Comparison]) -> str:
    """Terminal report: the table, then one paragraph per comparison."""
    table = render_text_table(COLUMNS, [comparison_row(c) for c in comparisons])
    notes = "\n".join(describe_comparison(c) for c in comparisons)
    return f"{table}\n\n{_FOOTNOTE}\n\n{notes}\n"


def render_comparisons_markdown(comparisons: Sequence[Comparison]) -> str:
    """Markdown report: the table, then one bullet per comparison."""
    table = render_markdown_table(COLUMNS, [comparison_row(c) for c in comparisons])
    notes = "\n".join(f"- {describe_comparison(c)}" for c in comparisons)
    return f"{table}\n\n{_FOOTNOTE}\n\n{notes}\n"


LADDER_COLUMNS = (
    "task", "step A", "step B", "vs", "n", "A only", "B only", "B-A", "95% CI", "p exact", "p Holm", "MDE", "verdict",
)


def ladder_row(entry: LadderEntry) -> list[str]:
    """Cells of one ladder entry, in `LADDER_COLUMNS` order."""
    c = entry.comparison
    return [
        c.task, entry.step_a, entry.step_b, entry.kind, str(c.n_paired), str(c.table.a_only), str(c.table.b_only),
        _points(c.diff), f"{_points(c.diff_ci_low)} to {_points(c.diff_ci_high)}",
        format_p(c.p_exact), format_p(entry.p_holm), _mde_cell(c), verdict_label(c),
    ]


def describe_cochran(task: str, q: CochranQ) -> str:
    """One sentence on Cochran's Q for a task."""
    verdict = "at least one step differs" if q.p_value < DEFAULT_ALPHA else "no step is shown to differ"
    return (
        f"Cochran's Q ({task}, {q.df + 1} steps, {q.n_items} items every step answered): "
        f"Q = {q.statistic:.2f}, df = {q.df}, {_p_words('p', q.p_value)}; {verdict}."
    )


def _ladder_body(report: LadderReport, bullet: str) -> str:
    lines = [f"{bullet}{describe_cochran(task, q)}" for task, q in report.cochran.items()]
    lines += [f"{bullet}{describe_comparison(entry.comparison, entry.p_holm)}" for entry in report.entries]
    footer = (
        f"Baseline: {report.baseline}. Verdicts are per pair, from each pair's 95% interval, and are not adjusted "
        f"for multiplicity (the same verdict `evalsvc compare` gives). p Holm adjusts all {len(report.entries)} "
        "exact p-values together, for family-wise claims such as 'some step changed accuracy'; like Cochran's Q "
        f"it is information beside the verdicts. {_FOOTNOTE}"
    )
    return footer + "\n\n" + "\n".join(lines) + "\n"


def render_ladder_text(report: LadderReport) -> str:
    """Terminal rendering of a ladder report."""
    table = render_text_table(LADDER_COLUMNS, [ladder_row(entry) for entry in report.entries])
    return f"{table}\n\n{_ladder_body(report, '')}"


def render_ladder_markdown(report: LadderReport) -> str:
    """Markdown rendering of a ladder report."""
    table = render_markdown_table(LADDER_COLUMNS, [ladder_row(entry) for entry in report.entries])
    return f"{table}\n\n{_ladder_body(report, '- ')}"
