"""`evalsvc speed` against a live streaming server whose token timing the test sets,
then `evalsvc decide` from the stored accuracy runs and measured speeds."""

from __future__ import annotations

import json
import statistics
from typing import NamedTuple

import pytest

from tests.conftest import GSM8K_TEST, copy_store, run_cli, store_run
from tests.fake_openai import FakeOpenAI, StreamScript

TOKENS = 20


class Measured(NamedTuple):
    out: dict  # the command's JSON
    server: FakeOpenAI  # what was served: requests 1 to 3 are the measured ones

    def served_median_tps(self) -> float:
        return statistics.median(self.server.served_decode_tps(r, TOKENS) for r in (1, 2, 3))

    def served_median_ttft(self) -> float:
        """The median of what each measured TTFT cannot be below (arrival to first chunk, at the server)."""
        return statistics.median(self.server.sent_at[r][0] - self.server.arrived_at[r] for r in (1, 2, 3))


def measure(db: str, name: str, workload: str, interval_s: float) -> Measured:
    with StreamScript(ttft_s=0.02, interval_s=interval_s, n_tokens=TOKENS).server() as server:
        result = run_cli("speed", "--endpoint", name, "--url", server.base_url, "--new-url", "--model", "fake-model",
                         "--workload", workload, "--n", "3", "--data", GSM8K_TEST, "--db", db, "--json")
        assert result.exit_code == 0, result.output
        assert len(server.requests) == 4  # one warm-up, three measured, one at a time
        assert all(body["stream"] for body in server.requests)
    return Measured(json.loads(result.stdout), server)


@pytest.fixture(scope="module")
def stored_steps(tmp_path_factory: pytest.TempPathFactory) -> str:
    """step3 and step4 with the same answers and lengths, stored through the CLI once for the module."""
    db = str(tmp_path_factory.mktemp("steps") / "evalsvc.db")
    store_run(db, "step3", lambda q: len(q) % 4 == 0, lambda q: 40)
    store_run(db, "step4", lambda q: len(q) % 4 == 0, lambda q: 40)
    return db


@pytest.fixture
def steps_db(stored_steps: str, db_path: str) -> str:
    """A copy of the two stored steps each test may change."""
    return copy_store(stored_steps, db_path)


def test_speed_measures_and_decide_uses_it(steps_db: str) -> None:
    db_path = steps_db
    # Nominal 100 against 400 tok/s: a busy machine can slow the fast pacing a lot before the ratio nears 0.8.
    slow = measure(db_path, "step3", "math", 0.01)
    fast = measure(db_path, "step4", "math", 0.0025)
    assert (slow.out["n"], slow.out["n_ok"]) == (3, 3)
    # The stored speeds are the pacing really served (a loaded machine stretches the script's).
    assert slow.out["decode_tps_median"] == pytest.approx(slow.served_median_tps(), rel=0.2)
    assert fast.out["decode_tps_median"] == pytest.approx(fast.served_median_tps(), rel=0.2)
    assert slow.out["ttft_median_s"] >= slow.served_median_ttft()
    measure(db_path, "step3", "chat", 0.01)
    measure(db_path, "step4", "chat", 0.0025)
    out = json.loads(run_cli("decide", "step3", "step4", "--margin", "5", "--db", db_path, "--json").stdout)
    decisions = {w["workload"]: w for w in out["workloads"]}
    assert decisions["math"]["take_b"] is True and decisions["math"]["time_ratio"] < 0.8
    chat = decisions["chat"]
    assert chat["take_b"] is True and "standing in for chat from gsm8k" in chat["explanation"]
    assert (chat["truncated_a"], chat["truncated_b"]) == (0, 0)
    assert decisions["code"]["take_b"] is None


def test_chat_answers_cut_by_the_cap_are_reported_and_refuse_the_chat_decision(steps_db: str) -> None:
    db_path = steps_db
    for name in ("step3", "step4"):
        with StreamScript(ttft_s=0.02, interval_s=0.002, n_tokens=40).server() as server:
            text = run_cli("speed", "--endpoint", name, "--url", server.base_url, "--new-url", "--model", "fake-model",
                           "--workload", "chat", "--n", "2", "--max-tokens", "25", "--db", db_path).stdout
        assert "2 answers cut at the cap of 25 tokens" in text
    out = json.loads(run_cli("decide", "step3", "step4", "--db", db_path, "--json").stdout)
    chat = {w["workload"]: w for w in out["workloads"]}["chat"]
    assert chat["decision"] == "can't tell yet" and (chat["truncated_a"], chat["truncated_b"]) == (2, 2)
    assert "cut at the probe's cap (25 and 25 tokens)" in chat["explanation"]


def test_speed_text_output_and_bad_input(db_path: str) -> None:
    store_run(db_path, "step3", lambda q: False, lambda q: 40)
    with StreamScript(ttft_s=0.05, interval_s=0.01, n_tokens=30).server() as server:
        measured = run_cli("speed", "--endpoint", "step3", "--url", server.base_url, "--new-url", "--model",
                           "fake-model", "--workload", "chat", "--n", "2", "--db", db_path)
    text = measured.stdout
    assert text.startswith("step3 chat: 2/2 requests measured (batch 1, streaming)")
    # progress is a bar on stderr, not a log line per request
    assert "WARNING" not in measured.stderr and "2/2 [" in measured.stderr
    assert "tok/s median" in text
    missing = run_cli("speed", "--endpoint", "step3", "--workload", "math", "--tokens-per-second", "250",
                      "--db", db_path)
    assert missing.exit_code == 2 and "needs --source" in missing.output
    unknown = run_cli("speed", "--endpoint", "nope", "--workload", "math", "--db", db_path)
    assert unknown.exit_code == 2 and "no endpoint named 'nope'" in unknown.output


def test_speed_on_sglang_stores_and_prints_the_probes_acceptance_apart_from_the_servers(db_path: str) -> None:
    from tests.fake_openai import FakeOpenAI, FakeSGLang, Reply, sglang_fixture

    info = sglang_fixture("server_info.json")["responses"]["eagle3_one_rank"]
    # The server's average since start is 3.0 over 3000 verify steps; every reply here (warm-up included) is
    # 24 tokens in 12 steps, so the probe's own acceptance length is 2.0.
    usage = {"prompt_tokens": 31, "total_tokens": 55, "completion_tokens": 24, "prompt_tokens_details": None,
             "reasoning_tokens": 16, "completion_tokens_details": {"reasoning_tokens": 16}}  # SGLang 0.5.23's shape
    reply = Reply(text=" ".join(["w"] * 8), reasoning=" ".join(["r"] * 16), completion_tokens=24, spec_verify_ct=12,
                  extra={"usage": usage})
    with FakeOpenAI(lambda body: reply, sglang=FakeSGLang(dict(info))) as server:
        args = ("speed", "--endpoint", "eagle", "--url", server.base_url, "--model", "fake-model",
                "--workload", "chat", "--n", "2", "--db", db_path)
        stored = json.loads(run_cli(*args, "--json").stdout)
        text = run_cli(*args).stdout
    spec = stored["spec_stats"]
    assert (spec["probe_generation_tokens"], spec["probe_verify_calls"]) == (48, 24)
    assert spec["probe_accept_length"] == pytest.approx(2.0)
    assert spec["lifetime_after"] == pytest.approx((9000 + 24 * 3) / (3000 + 12 * 3))
    assert (stored["accept_length_mean"], stored["n_accept_length"]) == (pytest.approx(2.0), 2)
    assert stored["reasoning_tokens_mean"] == 16.0
    assert "output tokens 24.0 mean (16.0 of them reasoning)" in text
    assert "accept length 2.00 mean over 2 requests" in text
    assert "accept length 2.00 over this probe (48 tokens / 24 verify steps)" in text
    assert "server's average since it started (not this probe's)" in text


@pytest.mark.parametrize("spelling", ["http://127.0.0.1:{port}", "http://127.0.0.1:{port}/v1/"])
def test_a_run_and_a_speed_measurement_store_one_url_for_one_server(db_path: str, spelling: str) -> None:
    """`evalsvc run` and `evalsvc speed` given the same address store the same URL, so the one can follow the other."""
    from sqlalchemy import select

    from db.engine import open_store
    from db.models import Endpoint
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        url = spelling.format(port=server.port)
        ran = run_cli("run", "--endpoint", "ran", "--url", url, "--model", "fake-model", "--data", GSM8K_TEST,
                      "--limit", "2", "--no-progress", "--db", db_path)
        measured = run_cli("speed", "--endpoint", "measured", "--url", url, "--model", "fake-model",
                           "--workload", "chat", "--n", "2", "--db", db_path)
        followed = run_cli("speed", "--endpoint", "ran", "--url", url, "--model", "fake-model",
                           "--workload", "chat", "--n", "2", "--db", db_path)
    assert (ran.exit_code, measured.exit_code, followed.exit_code) == (0, 0, 0), ran.output + measured.output + followed.output
    store = open_store(db_path)
    with store.session() as session:
        stored = {e.name: (e.base_url, e.metadata_.get("earlier_urls")) for e in session.scalars(select(Endpoint))}
    store.dispose()
    assert stored == {"ran": (server.base_url, None), "measured": (server.base_url, None)}
