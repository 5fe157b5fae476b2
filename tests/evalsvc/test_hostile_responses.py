"""A run against an endpoint that sends every kind of broken or hostile response (issue 18).

One scripted server answers each item differently: token counts that are NaN,
inf, -7, 1e20, "12", 3.7, true, 2**62, above the bound, or missing; an unknown
finish_reason; null, numeric and 10 MB content; empty and several choices; a
choice without a message; a truncated body and a Content-Length that lies.
The run completes with every item stored (a valid row or an error row), the
length and task-time figures use only the valid counts (means worked out by
hand below), and show and report name what they left out. On SQLite and
PostgreSQL.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from db.engine import Store
from evalsvc.run.runner import RunSpec, run_evaluation
from harness.types import DecodingSettings
from tests.conftest import run_cli
from tests.db.conftest import store, store_url  # noqa: F401 - fixtures: every case on SQLite and PostgreSQL
from tests.fake_openai import MISSING, Fault, FakeOpenAI, Reply

pytestmark = pytest.mark.usefixtures("quick_backoff")  # retried items wait less; the same attempts

MAX_TOKENS = 256
ANSWER = "The answer is 7."
# Valid counts, and what the statistics must see: nothing else.
VALID = {"VALIDA": 11, "VALIDB": 23, "VALIDC": 40, "VALIDD": 58, "WEIRDFINISH": 30, "NULLLENGTH": MAX_TOKENS}
UNKNOWN = {  # marker -> completion_tokens sent, and the reason stored
    "NAN": (math.nan, "completion_tokens nan is not a number"),
    "INF": (math.inf, "completion_tokens inf is not a number"),
    "NEGATIVE": (-7, "completion_tokens -7 is negative"),
    "HUGEFLOAT": (1e20, "completion_tokens 1e+20 is not an integer"),
    "STRING": ("12", "completion_tokens '12' is not an integer"),
    "FRACTION": (3.7, "completion_tokens 3.7 is not an integer"),
    "BOOLEAN": (True, "completion_tokens True is not an integer"),
    "HUGEINT": (2**62, "completion_tokens 4611686018427387904 is above the bound"),
    "OVERBOUND": (100_000, "completion_tokens 100000 is above the bound"),
    "NOKEY": (MISSING, "completion_tokens missing"),
    "NOUSAGE": (5, "usage missing"),
}
ERRORS = {  # marker -> what the error row says
    "ABORTED": "the server aborted the request",
    "NULLCONTENT": "neither content nor reasoning text",
    "NUMBERCONTENT": "message content is int 42, not a string",
    "TENMEGABYTES": "message content has 10485760 characters",
    "EMPTYCHOICES": "response has no choices",
    "SEVERALCHOICES": "response has 2 choices",
    "NOMESSAGE": "choice has no message object",
    "TRUNCATED": "POST ",
    "LYINGLENGTH": "response is not JSON",
}
FAULTS = {"NOUSAGE": "no_usage", "EMPTYCHOICES": "empty_choices", "SEVERALCHOICES": "several_choices",
          "NOMESSAGE": "no_message", "TRUNCATED": "truncated", "LYINGLENGTH": "short_length"}
MARKERS = [*VALID, *UNKNOWN, *ERRORS]


def marker_of(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return next(m for m in MARKERS if f"Question {m}?" in content)


def hostile_reply(body: dict[str, Any]) -> Reply:
    marker = marker_of(body)
    if marker in VALID:
        finish = {"WEIRDFINISH": "weird", "NULLLENGTH": "length"}.get(marker, "stop")
        content = None if marker == "NULLLENGTH" else ANSWER
        reasoning = "Let me think about it for a long" if marker == "NULLLENGTH" else None
        return Reply(text=content, reasoning=reasoning, finish_reason=finish, completion_tokens=VALID[marker])
    if marker in UNKNOWN:
        return Reply(text=ANSWER, completion_tokens=UNKNOWN[marker][0])
    content = {"NULLCONTENT": None, "NUMBERCONTENT": 42, "TENMEGABYTES": "x" * (10 * 1024 * 1024)}.get(marker, ANSWER)
    return Reply(text=content, finish_reason="abort" if marker == "ABORTED" else "stop")


def hostile_faults(_: int, body: dict[str, Any]) -> Fault | None:
    kind = FAULTS.get(marker_of(body))
    return Fault(kind) if kind else None


def write_data(tmp_path: Path) -> str:
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps({"question": f"Question {m}?", "answer": "#### 7"}) + "\n" for m in MARKERS))
    return str(path)


def run(store: Store, server: FakeOpenAI, endpoint: str, data: str) -> int:
    spec = RunSpec(endpoint=endpoint, base_url=server.base_url, model="fake-model", task="gsm8k", data=data,
                   settings=DecodingSettings(max_tokens=MAX_TOKENS), concurrency=8, max_error_rate=1.0,
                   timeout_s=60.0)
    return run_evaluation(store, spec, progress=False).run_id


def rows(store: Store, run_id: int) -> dict[str, dict[str, Any]]:
    with store.engine.connect() as conn:
        found = conn.execute(text("select * from items where run_id = :r"), {"r": run_id}).mappings().all()
    return {next(m for m in MARKERS if f"Question {m}?" in row["request"]): dict(row) for row in found}


def test_every_hostile_response_becomes_a_valid_or_an_error_row_and_stats_use_only_valid_counts(
    tmp_path: Path, store: Store, store_url: str  # noqa: F811
) -> None:
    data = write_data(tmp_path)
    with FakeOpenAI(lambda body: Reply(text=ANSWER, completion_tokens=100)) as honest:
        run_a = run(store, honest, "honest", data)
    with FakeOpenAI(hostile_reply, faults=hostile_faults) as server:
        run_b = run(store, server, "hostile", data)
    items = rows(store, run_b)

    assert sorted(items) == sorted(MARKERS)  # every item stored, none lost
    for marker, count in VALID.items():
        assert (items[marker]["status"], items[marker]["completion_tokens"]) == ("ok", count), marker
    for marker, (_, reason) in UNKNOWN.items():
        row = items[marker]
        assert (row["status"], row["completion_tokens"], row["correct"]) == ("ok", None, True), marker
        assert reason in row["response_issue"], (marker, row["response_issue"])
    for marker, reason in ERRORS.items():
        row = items[marker]
        assert (row["status"], row["completion_tokens"], row["correct"]) == ("error", None, None), marker
        assert reason in row["error"], (marker, row["error"])
    assert items["TENMEGABYTES"]["attempts"] == 1 and items["EMPTYCHOICES"]["attempts"] == 4
    weird, truncated = items["WEIRDFINISH"], items["NULLLENGTH"]
    assert (weird["finish_reason"], weird["response_issue"]) == (None, "finish_reason 'weird' is unknown")
    assert (truncated["status"], truncated["truncated"], truncated["completion"], truncated["correct"]) == (
        "ok", True, "", False)
    assert truncated["reasoning"] == "Let me think about it for a long"

    # The run's mean and both report figures use the six valid counts only, worked out by hand.
    valid_mean = (11 + 23 + 40 + 58 + 30 + 256) / 6
    shown = json.loads(run_cli("show", str(run_b), "--db", store_url, "--json").stdout)
    assert (shown["n"], shown["errors"], shown["unknown_tokens"]) == (len(MARKERS), len(ERRORS), len(UNKNOWN))
    assert shown["mean_completion_tokens"] == pytest.approx(valid_mean, rel=1e-12)
    assert shown["token_warning"]["unknown"] == len(UNKNOWN) and sum(shown["unknown_token_reasons"].values()) == 11
    text_show = run_cli("show", str(run_b), "--db", store_url).stdout
    assert text_show.startswith(f"warning: run {run_b} (hostile gsm8k): 11 of 17 answered items (65%) have no valid")
    assert "token count unknown for 11 answered items" in text_show and "and 6 other reasons" in text_show

    for speed in (["--endpoint", "honest", "--tokens-per-second", "50", "--ttft", "0.5"],
                  ["--endpoint", "hostile", "--tokens-per-second", "100", "--ttft", "0.5"]):
        assert run_cli("speed", *speed, "--workload", "math", "--source", "by hand", "--db", store_url).exit_code == 0
    report = json.loads(run_cli("report", "--endpoints", "honest,hostile", "--db", store_url, "--json").stdout)
    (length,) = report["lengths"]
    assert (length["n_paired"], length["left_out_no_token_count"]) == (6, 11)
    assert (length["mean_tokens_a"], length["mean_tokens_b"]) == (100.0, pytest.approx(valid_mean, rel=1e-12))
    (workload,) = [w for w in report["decisions"][0]["workloads"] if w["workload"] == "math"]
    assert workload["token_ratio"] == pytest.approx(valid_mean / 100, rel=1e-12)
    assert workload["time_ratio"] == pytest.approx((0.5 + valid_mean / 100) / (0.5 + 100 / 50), rel=1e-9)
    assert (workload["time_items"], workload["time_left_out_no_token_count"]) == (6, 11)
    assert [w["run_id"] for w in report["token_warnings"]] == [run_b]
    text_report = run_cli("report", "--endpoints", "honest,hostile", "--db", store_url).stdout
    assert text_report.startswith(f"warning: run {run_b} (hostile gsm8k): 11 of 17")
    assert "Left out: paired items where either side has no valid token count" in text_report
    assert "over 6 items (11 without a valid token count left out)" in text_report
    assert run_a != run_b


def test_an_unexpected_failure_reading_scoring_or_building_one_item_ends_that_item_only(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Whatever escapes the checks (a parser bug, a scorer bug, a row that cannot be built) is that item's error."""
    import db.queries
    import harness.client
    import harness.tasks.gsm8k as gsm8k

    markers = {"PARSEBUG": "reading the response failed: RuntimeError: parser bug",
               "SCOREBUG": "scoring failed: ZeroDivisionError: scorer bug",
               "ROWBUG": "could not store the item: TypeError: row bug", "FINE": None}
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps({"question": f"Question {m}?", "answer": "#### 7"}) + "\n" for m in markers))
    parse, score, values = harness.client.parse_completion, gsm8k.GSM8K.score, db.queries.item_values

    def failing(marker: str, error: Exception, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if any(marker in str(a) for a in args):
                raise error
            return real(*args, **kwargs)
        return call

    def reply(body: dict[str, Any]) -> Reply:
        marker = next(m for m in markers if m in body["messages"][-1]["content"])
        return Reply(text=f"{marker}: {ANSWER}", completion_tokens=9)

    monkeypatch.setattr(harness.client, "parse_completion", failing("PARSEBUG", RuntimeError("parser bug"), parse))
    monkeypatch.setattr(gsm8k.GSM8K, "score", failing("SCOREBUG", ZeroDivisionError("scorer bug"), score))
    monkeypatch.setattr(db.queries, "item_values", failing("ROWBUG: The", TypeError("row bug"), values))
    with FakeOpenAI(reply) as server:
        run_id = run(store, server, "buggy", str(path))
    with store.engine.connect() as conn:
        found = {r.item_id: (r.status, r.error) for r in conn.execute(text("select item_id, status, error from items"))}
        status = conn.execute(text("select status from runs where id = :r"), {"r": run_id}).scalar_one()
    assert status == "complete" and len(found) == len(markers)
    assert sorted(found.values(), key=str) == sorted(
        [("ok", None) if error is None else ("error", error) for error in markers.values()], key=str)
