"""Text for people at the terminal's width: long lines wrapped, wide tables turned into one block per row.

The reports render at their natural width; this is the one place that fits
them to the terminal, at the edge. The width is $COLUMNS, else the
terminal's when stdout is one; output to a pipe or file keeps whole lines,
as `--wide` does.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

_RULE = re.compile(r"^ *-+( +-+)* *$")  # the dashes under a plain-text table's header


def output_width(wide: bool = False) -> int | None:
    """Columns to fit text to, or None for whole lines (--wide, or not a terminal and no $COLUMNS)."""
    if wide:
        return None
    if os.environ.get("COLUMNS", "").isdigit():
        return max(int(os.environ["COLUMNS"]), 40)
    if sys.stdout.isatty():
        return max(shutil.get_terminal_size().columns, 40)
    return None


def fit(text: str, width: int | None) -> str:
    """`text` with no line wider than `width`: tables wider than that become blocks, other lines wrap."""
    if width is None:
        return text
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if i + 1 < len(lines) and _RULE.match(lines[i + 1]) and "-" in lines[i + 1]:
            end = i + 2
            while end < len(lines) and lines[end].strip():
                end += 1
            out += _fit_table(lines[i:end], width)
            i = end
            continue
        out += _wrap(lines[i], width)
        i += 1
    return "\n".join(out)


def _wrap(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [""]


def _fit_table(block: list[str], width: int) -> list[str]:
    """The table as it is when it fits; else each row as its first cell, then `header value` pairs, wrapped."""
    if max(len(line) for line in block) <= width:
        return block
    spans = [m.span() for m in re.finditer(r"-+", block[1])]
    cells = [[_cell(row, spans, k) for k in range(len(spans))] for row in [block[0], *block[2:]]]
    header, rows = cells[0], cells[1:]
    out: list[str] = []
    for row in rows:
        pairs = [f"{h} {v}" for h, v in zip(header[1:], row[1:]) if v]
        out += _pack([f"{header[0]} {row[0]}:", *pairs], width)
    return out


def _pack(parts: list[str], width: int) -> list[str]:
    """Parts (each kept whole where it fits) on lines of at most `width`, continuation lines indented."""
    lines = [parts[0]]
    for k, part in enumerate(parts[1:]):
        piece = part + ("," if k < len(parts) - 2 else "")
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines += _wrap("  " + piece, width)
    return lines


def _cell(row: str, spans: list[tuple[int, int]], k: int) -> str:
    """Column k of a padded row: from its span's start to the next span's start (cells may overflow their rule)."""
    start = spans[k][0]
    end = spans[k + 1][0] if k + 1 < len(spans) else len(row)
    return row[start:end].strip()
