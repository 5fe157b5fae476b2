"""Code extraction on real-looking completions; each built program is run
in the real sandbox against a real test, which is the assertion that matters."""

from __future__ import annotations

import pytest

from harness.code_extract import build_program, extract_code, strip_demo_code
from harness.sandbox import Limits, Program, run_many

PROMPT = '''from typing import List


def below_zero(operations: List[int]) -> bool:
    """ Return True if the balance ever falls below zero.
    >>> below_zero([1, 2, -4, 5])
    True
    """
'''
TEST = """
def check(candidate):
    assert candidate([]) == False
    assert candidate([1, 2, -3, 1, 2, -3]) == False
    assert candidate([1, 2, -4, 5, 6]) == True
    assert candidate([1, -1, 2, -2, 5, -5, 4, -5]) == True
"""
FUNCTION = """def below_zero(operations: List[int]) -> bool:
    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False"""
BODY = """    balance = 0
    for op in operations:
        balance += op
        if balance < 0:
            return True
    return False
"""

# (name, completion, expected shape); every one must pass the test once built.
CASES = [
    ("fenced", f"```python\n{FUNCTION}\n```", "function"),
    (
        "fenced py tag, prose around",
        f"Here is my solution:\n\n```py\n{FUNCTION}\n```\n\nIt keeps a running balance.",
        "function",
    ),
    ("fenced without language", f"```\n{FUNCTION}\n```", "function"),
    ("unfenced with prose after", f"{FUNCTION}\n\nThis runs in O(n) time.", "function"),
    ("unfenced with prose before", f"Sure. The function is:\n\n{FUNCTION}\n\nHope this helps!", "function"),
    ("repeated signature with imports", f"```python\nfrom typing import List\n\n\n{FUNCTION}\n```", "function"),
    (
        "helper and import before the entry point",
        "```python\nimport itertools\n\n\ndef running(xs):\n    return list(itertools.accumulate(xs))\n\n\n"
        "def below_zero(operations: List[int]) -> bool:\n    return any(b < 0 for b in running(operations))\n```",
        "function",
    ),
    (
        "multiple blocks: draft, then the fix, then usage",
        "First try:\n```python\ndef below_zero(operations):\n    return sum(operations) < 0\n```\n"
        "That is wrong; fixed:\n```python\nimport math\n"
        + FUNCTION
        + "\n```\nUsage:\n```python\nprint(below_zero([1, -2]))\n```",
        "function",
    ),
    (
        "imports in another block",
        "```python\nfrom itertools import accumulate\n```\n\n```python\ndef below_zero(operations):\n"
        "    return any(b < 0 for b in accumulate(operations))\n```",
        "function",
    ),
    (
        "demo code after the function",
        f"```python\n{FUNCTION}\n\nprint(below_zero([1]))\nassert below_zero([-1])\n"
        "if __name__ == '__main__':\n    import time\n    time.sleep(100)\n```",
        "function",
    ),  # fmt: skip
    ("raw completion body", BODY, "body"),
    ("raw completion body, stopped late", BODY + "\n\ndef main():\n    print(below_zero([1]))\n", "body"),
    (
        "body in a fence, dedented",
        "```python\nbalance = 0\nfor op in operations:\n    balance += op\n"
        "    if balance < 0:\n        return True\nreturn False\n```",
        "body",
    ),  # fmt: skip
    (
        "think block first",
        f"<think>maybe def below_zero(x): return True</think>\n```python\n{FUNCTION}\n```",
        "function",
    ),
]


@pytest.mark.parametrize(("name", "text", "shape"), CASES, ids=[c[0] for c in CASES])
def test_shape_is_recognised(name: str, text: str, shape: str) -> None:
    assert extract_code(text, "below_zero").kind == shape


def test_every_case_builds_a_passing_program() -> None:
    codes = [build_program(PROMPT, extract_code(text, "below_zero"), "below_zero") for _, text, _ in CASES]
    programs = [Program(code, TEST, "below_zero", PROMPT) for code in codes]
    results = run_many(programs, limits=Limits(timeout_s=2.0))
    failures = {name: (r.outcome, r.message) for (name, _, _), r in zip(CASES, results) if not r.passed}
    assert failures == {}


def test_the_last_defining_block_wins_and_keeps_other_blocks_imports() -> None:
    text = CASES[7][1]
    extracted = extract_code(text, "below_zero")
    assert "sum(operations) < 0" not in extracted.code
    assert extracted.code.startswith("import math\n")


@pytest.mark.parametrize("text", ["", "I am not able to answer that.", "```text\nno code here\n```"])
def test_no_code(text: str) -> None:
    assert extract_code(text, "below_zero").kind == "none"


def test_demo_code_is_stripped_but_definitions_kept() -> None:
    code = (
        "import os\nLIMIT = 3\n@staticmethod\ndef f():\n    print(1)\n"
        "print(f())\nassert f()\nf()\nif __name__ == '__main__':\n    f()\n"
    )
    assert strip_demo_code(code) == "import os\nLIMIT = 3\n@staticmethod\ndef f():\n    print(1)"


def test_full_function_keeps_prompt_helpers() -> None:
    prompt = 'def helper(x):\n    return x * 2\n\n\ndef double_all(xs):\n    """Doubles."""\n'
    text = "```python\ndef double_all(xs):\n    return [helper(x) for x in xs]\n```"
    program = build_program(prompt, extract_code(text, "double_all"), "double_all")
    namespace: dict = {}
    exec(compile(program, "<program>", "exec"), namespace)  # trusted, test-authored code
    assert namespace["double_all"]([1, 2]) == [2, 4]
