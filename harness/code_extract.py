"""Turn a model's answer into the Python program to test.

Answers come in three shapes: a fenced code block inside prose (chat models),
bare code with or without prose around it, and a raw continuation of the
prompt (completion endpoints: the function body). `extract_code` finds the
code; `build_program` joins it with the prompt so that:

* a full function keeps everything the model wrote before it (imports,
  helpers, constants) and follows the prompt, so the prompt's own helpers
  (HumanEval/38's `encode_cyclic`) stay defined;
* a bare body is appended to the prompt, re-indented when the model dropped
  the indentation;
* top-level demo code the model added (`print(...)`, `assert ...`,
  `if __name__ == "__main__":`) is dropped: it is not part of the solution
  and would otherwise run, and fail or stall, before the tests.
"""

from __future__ import annotations

import ast
import re
import textwrap
import threading
from typing import NamedTuple

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_PYTHON_LANGS = ("", "python", "python3", "py")
_CODE_START = re.compile(r"^(?:from\s+\w|import\s+\w|def\s+\w|class\s+\w|@\w|async\s+def\s)")
_PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError)


class Extracted(NamedTuple):
    """Code found in an answer; `kind` is `function` when it defines the entry
    point, `body` when it is the function's body, `none` when nothing was found."""

    code: str
    kind: str


def extract_code(text: str, entry_point: str) -> Extracted:
    """The solution code in `text` for the function `entry_point`."""
    text = _THINK.sub("", text)
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in _PYTHON_LANGS and body.strip()]
    if blocks:
        return _from_blocks(blocks, entry_point)
    if _looks_like_body(text):
        return _classify(_trim_prose(text), entry_point)
    start = _first_code_line(text)
    if start is None:
        return Extracted("", "none")
    return _classify(_trim_prose("\n".join(text.splitlines()[start:])), entry_point)


def build_program(prompt: str, extracted: Extracted, entry_point: str) -> str:
    """The program to run: prompt and extracted code joined as described above."""
    if extracted.kind == "function":
        return prompt.rstrip() + "\n\n\n" + strip_demo_code(extracted.code).strip() + "\n"
    if extracted.kind == "body":
        return prompt + _as_body(extracted.code)
    return prompt


def strip_demo_code(code: str) -> str:
    """`code` without top-level prints, asserts, bare calls and `__main__` blocks."""
    try:
        tree = _parse(code)
    except _PARSE_ERRORS:
        return code
    lines = code.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if _is_demo(node):
            drop.update(range(node.lineno - 1, node.end_lineno or node.lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def _is_demo(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return True
    if isinstance(node, ast.If):
        test = ast.unparse(node.test).replace("'", '"')
        return test in ('__name__ == "__main__"', '"__main__" == __name__')
    return False


def _from_blocks(blocks: list[str], entry_point: str) -> Extracted:
    """The last block that defines the entry point (models often revise),
    preceded by the import lines of the other blocks; else all blocks joined."""
    defining = [b for b in blocks if _defines(b, entry_point)]
    if defining:
        chosen = defining[-1]
        imports = [line for b in blocks if b is not chosen for line in b.splitlines() if _is_import(line)]
        return Extracted("\n".join(dict.fromkeys(imports)) + ("\n" if imports else "") + chosen, "function")
    return _classify("\n".join(blocks), entry_point)


def _classify(code: str, entry_point: str) -> Extracted:
    if not code.strip():
        return Extracted("", "none")
    return Extracted(code, "function" if _defines(code, entry_point) else "body")


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


def _is_import(line: str) -> bool:
    return re.match(r"(?:from\s+[\w.]+\s+)?import\s+\w", line) is not None


def _looks_like_body(text: str) -> bool:
    """A completion-style continuation: its first code line is indented."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return first.startswith((" ", "\t"))


def _first_code_line(text: str) -> int | None:
    for i, line in enumerate(text.splitlines()):
        if _CODE_START.match(line):
            return i
    return None


def _trim_prose(code: str) -> str:
    """Drop trailing lines until the code parses (prose after unfenced code),
    keeping everything when no prefix parses (the sandbox then reports the
    syntax error). Body-only code is checked as the body of a function."""
    lines = code.rstrip().splitlines()
    wrap = _looks_like_body(code)
    for end in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:end])
        if _parses(candidate, as_body=wrap):
            return candidate + "\n"
    return code


def _parses(code: str, as_body: bool) -> bool:
    source = "def _f():\n" + textwrap.indent(textwrap.dedent(code), "    ") if as_body else code
    try:
        _parse(source)
    except _PARSE_ERRORS:
        return False
    return True


# CPython 3.11 keeps the AST builder's recursion depth per interpreter, not per
# thread, so two scoring threads parsing at once can raise a spurious
# "AST constructor recursion depth mismatch" SystemError (python/cpython#106905).
_AST_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module:
    with _AST_LOCK:
        return ast.parse(source)


def _as_body(code: str) -> str:
    """`code` indented as a function body (four spaces) unless it already is."""
    if _looks_like_body(code):
        return code if code.endswith("\n") else code + "\n"
    return textwrap.indent(code.strip("\n"), "    ") + "\n"
