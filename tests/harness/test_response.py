"""Every field read from a response is checked: impossible token counts and unknown finish reasons become
unknown with a reason, a broken structure is a retryable failure, never a silent wrong answer."""

from __future__ import annotations

import math
from typing import Any

import pytest

from harness.client import RequestFailed, parse_completion
from harness.response import MAX_TEXT_CHARS, STORABLE_MAX, TOKEN_SLACK, check_count, token_bound

BOUND = 4096


@pytest.mark.parametrize(
    ("value", "expected", "issue"),
    [
        (0, 0, None),
        (12, 12, None),
        (BOUND, BOUND, None),
        (BOUND + 1, None, f"completion_tokens 4097 is above the bound {BOUND}"),
        (-7, None, "completion_tokens -7 is negative"),
        ("12", None, "completion_tokens '12' is not an integer"),
        (3.7, None, "completion_tokens 3.7 is not an integer"),
        (12.0, None, "completion_tokens 12.0 is not an integer"),
        (1e20, None, "completion_tokens 1e+20 is not an integer"),
        (math.nan, None, "completion_tokens nan is not a number"),
        (math.inf, None, "completion_tokens inf is not a number"),
        (True, None, "completion_tokens True is not an integer"),
        (2**62, None, f"completion_tokens {2**62} is above the bound {BOUND}"),
        ([1], None, "completion_tokens [1] is not an integer"),
        (None, None, "completion_tokens missing"),
    ],
)
def test_a_token_count_is_a_plausible_integer_or_unknown_with_its_reason(value: Any, expected: Any, issue: Any) -> None:
    checked = check_count("completion_tokens", value, BOUND, required=True)
    assert checked.value == expected and checked.issue == issue
    assert checked.value is None or type(checked.value) is int


def test_the_bound_is_cap_plus_prompt_plus_slack_and_always_storable() -> None:
    assert token_bound(2048, 300) == 2048 + 300 + TOKEN_SLACK
    assert token_bound(2**40, 10) == STORABLE_MAX


def chat(content: Any = "The answer is 7.", finish: Any = "stop", usage: Any = None, **message: Any) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", "content": content, **message}, "finish_reason": finish}
    return {"choices": [choice], "usage": {"prompt_tokens": 20, "completion_tokens": 5} if usage is None else usage}


def parse(payload: dict, mode: str = "chat") -> Any:
    return parse_completion(payload, mode, 0.1, 1, BOUND)


def test_a_valid_response_has_no_issue() -> None:
    done = parse(chat())
    assert (done.text, done.completion_tokens, done.prompt_tokens, done.finish_reason, done.issue) == (
        "The answer is 7.", 5, 20, "stop", None)


@pytest.mark.parametrize(
    ("payload", "tokens", "finish", "issue"),
    [
        (chat(usage={"prompt_tokens": 20, "completion_tokens": math.nan}), None, "stop",
         "completion_tokens nan is not a number"),
        (chat(usage={"prompt_tokens": -1, "completion_tokens": 5}), 5, "stop", "prompt_tokens -1 is negative"),
        (chat(usage={"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": "3"}}), 5, "stop",
         "reasoning_tokens '3' is not an integer"),
        ({"choices": chat()["choices"]}, None, "stop", "usage missing"),
        (chat(usage="lots"), None, "stop", "usage 'lots' is not an object"),
        (chat(finish="weird"), 5, None, "finish_reason 'weird' is unknown"),
        (chat(finish=None), 5, None, "finish_reason missing"),
        (chat(finish=7, usage={"completion_tokens": True}), None, None,
         "completion_tokens True is not an integer; finish_reason 7 is unknown"),
    ],
)
def test_unknown_counts_and_finish_reasons_are_none_with_the_reason(
    payload: dict, tokens: Any, finish: Any, issue: str
) -> None:
    done = parse(payload)
    assert (done.completion_tokens, done.finish_reason, done.issue, done.error) == (tokens, finish, issue, None)
    assert done.text == "The answer is 7."


def test_null_content_after_reasoning_is_an_empty_truncated_answer() -> None:
    done = parse(chat(content=None, finish="length", reasoning_content="Let me think"))
    assert (done.text, done.reasoning_text, done.truncated, done.completion_tokens) == ("", "Let me think", True, 5)
    assert done.issue == "content null after reasoning: answer taken as empty"


@pytest.mark.parametrize(
    ("payload", "mode", "message", "retryable"),
    [
        ({"choices": []}, "chat", "response has no choices", True),
        ({"choices": "x"}, "chat", "response has no choices", True),
        ({"choices": chat()["choices"] * 2}, "chat", "response has 2 choices; one was asked for", True),
        ({"choices": [7]}, "chat", "response choice is not an object", True),
        ({"choices": [{"index": 0, "finish_reason": "stop"}]}, "chat", "choice has no message object", True),
        (chat(content=None), "chat", "neither content nor reasoning text", True),
        (chat(content=42), "chat", "message content is int 42, not a string", True),
        (chat(content=["a"]), "chat", "message content is list", True),
        (chat(reasoning_content={"x": 1}), "chat", "reasoning_content is dict", True),
        (chat(content="x" * (MAX_TEXT_CHARS + 1)), "chat", f"more than the {MAX_TEXT_CHARS} allowed", False),
        (chat(finish="abort"), "chat", "the server aborted the request", True),
        ({"choices": [{"index": 0, "text": None, "finish_reason": "stop"}]}, "completions",
         "choice text is NoneType", True),
    ],
)
def test_a_broken_structure_is_a_classified_failure(payload: dict, mode: str, message: str, retryable: bool) -> None:
    with pytest.raises(RequestFailed, match=message.replace("(", r"\(")) as caught:
        parse(payload, mode)
    assert caught.value.retryable is retryable


def completion(text: Any = " 7.", finish: Any = "stop", usage: Any = None) -> dict:
    choice = {"index": 0, "text": text, "finish_reason": finish}
    return {"choices": [choice], "usage": {"prompt_tokens": 900, "completion_tokens": 3} if usage is None else usage}


def test_completions_mode_checks_the_same_fields() -> None:
    done = parse(completion(finish="eos", usage={"prompt_tokens": 900, "completion_tokens": "3"}), "completions")
    assert (done.text, done.completion_tokens, done.prompt_tokens, done.finish_reason) == (" 7.", None, 900, None)
    assert done.issue == "completion_tokens '3' is not an integer; finish_reason 'eos' is unknown"
    for broken, message in ((completion(text=7), "choice text is int 7"),
                            (completion(text="x" * (MAX_TEXT_CHARS + 1)), "more than the")):
        with pytest.raises(RequestFailed, match=message):
            parse(broken, "completions")
