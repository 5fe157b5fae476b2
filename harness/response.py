"""What the harness accepts from an endpoint's response, field by field.

The endpoint under test is exactly the thing that may be broken (an
experimental kernel, a patched server, a proxy), so nothing it sends is
trusted. Every value the harness reads passes one of these checks:

- Token counts must be non-negative integers (JSON numbers without a
  fraction; booleans, strings such as "12", 3.7, NaN, inf and 1e20 are not)
  no larger than `token_bound`: the request's max_tokens plus the prompt's
  size in UTF-8 bytes plus `TOKEN_SLACK` (a prompt never holds more tokens than
  bytes, plus its chat template; some servers count the prompt into the
  completion). Anything else is an *unknown* count: None plus a short reason,
  never a coerced number, so it cannot enter a mean, a ratio or a task time.
- `finish_reason` must be one of `FINISH_REASONS`, else it is unknown (None
  plus a reason). SGLang's "abort" means the server gave up on the request, not
  that the model finished: it is a retryable failure (`ResponseBroken`).
- Text fields must be strings (or null where the protocol allows it) of at
  most `MAX_TEXT_CHARS` characters; no honest server writes more within a
  token cap, so a longer text is a broken response.

A response whose *structure* is broken (no choices, several choices, a choice
without a message, non-string text) raises `ResponseBroken`; the client turns
that into a retry and, after the retries, an error row.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

TOKEN_SLACK = 1024
STORABLE_MAX = 2**31 - 1  # PostgreSQL INTEGER; no count above it can be stored on every backend
MAX_TEXT_CHARS = 1024 * 1024
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
ABORTED = "abort"
ISSUE_MAX_CHARS = 500


class ResponseBroken(Exception):
    """The response cannot be read as an answer; `retryable` says whether asking again may help."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class Checked(NamedTuple):
    """A value read from a response: `value` None with `issue` set means unknown, and why."""

    value: Any
    issue: str | None = None


def shown(value: Any, limit: int = 40) -> str:
    """A short, printable rendering of a hostile value for an issue text."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def token_bound(max_tokens: int, prompt_bytes: int) -> int:
    """The largest count any honest server reports for a request with this cap and prompt size."""
    return min(max(max_tokens, 0) + max(prompt_bytes, 0) + TOKEN_SLACK, STORABLE_MAX)


def check_count(name: str, value: Any, bound: int, required: bool = False) -> Checked:
    """`value` if it is a plausible token count, else None with the reason (None and no reason when absent
    and not `required`)."""
    if value is None:
        return Checked(None, f"{name} missing" if required else None)
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            return Checked(None, f"{name} {shown(value)} is not a number")
        return Checked(None, f"{name} {shown(value)} is not an integer")
    if value < 0:
        return Checked(None, f"{name} {value} is negative")
    if value > bound:
        return Checked(None, f"{name} {shown(value)} is above the bound {bound}")
    return Checked(value)


def check_finish_reason(value: Any) -> Checked:
    """A known finish_reason, or None with the reason; raises ResponseBroken for "abort"."""
    if value == ABORTED:
        raise ResponseBroken("the server aborted the request (finish_reason 'abort')")
    if isinstance(value, str) and value in FINISH_REASONS:
        return Checked(value)
    if value is None:
        return Checked(None, "finish_reason missing")
    return Checked(None, f"finish_reason {shown(value)} is unknown")


def check_text(name: str, value: Any, nullable: bool = True) -> str | None:
    """`value` if it is a string of bounded size (or None when `nullable`); raises ResponseBroken otherwise."""
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise ResponseBroken(f"{name} is {type(value).__name__} {shown(value, 20)}, not a string")
    if len(value) > MAX_TEXT_CHARS:
        raise ResponseBroken(f"{name} has {len(value)} characters, more than the {MAX_TEXT_CHARS} allowed",
                             retryable=False)
    return value


def join_issues(issues: list[str | None]) -> str | None:
    """The issues found in one response, as one short text (None when there are none)."""
    text = "; ".join(issue for issue in issues if issue)
    if len(text) > ISSUE_MAX_CHARS:
        text = text[: ISSUE_MAX_CHARS - 3] + "..."
    return text or None
