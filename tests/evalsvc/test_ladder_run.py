"""`evalsvc ladder run` with local steps: a step that fails to start is reported and the
rest continue; steps already evaluated with the same config are not redone."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from db.engine import open_store
from evalsvc.ladder.file import load_ladder
from evalsvc.decision.build import build_ladder
from evalsvc.engine.demo import DEMO_CHAT_MAX_TOKENS, DEMO_SPEED_N, chat_cut_line, demo_plan
from evalsvc.ladder.run import LadderPlan, evaluation_step, run_ladder, step_spec
from evalsvc.run.speed import record_speed_by_hand
from evalsvc.run.status import heartbeat
from harness.speed import WARMUP_MAX_TOKENS
from tests.conftest import GSM8K_TEST, run_cli, wrong_when
from tests.evalsvc.ladder_yaml import crashing_step
from tests.fake_openai import FakeOpenAI, Reply, gsm8k_answers, gsm8k_oracle


def write_ladder(path: Path, good_a: str, good_b: str) -> Path:
    path.write_text(f"""
name: test-ladder
steps:
  - name: bf16
    base_url: {good_a}
    model: fake-model
    metadata: {{quantization: bf16}}{crashing_step("broken")}  - name: int4
    base_url: {good_b}
    model: fake-model
    metadata: {{quantization: int4}}
""")
    return path


def test_failed_step_is_reported_and_the_rest_continue(tmp_path: Path, db_path: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_HOME", str(tmp_path / "home"))  # step logs and timings stay in the test's folder
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as a, FakeOpenAI(gsm8k_oracle(lambda q: False)) as b:
        ladder = write_ladder(tmp_path / "ladder.yaml", a.base_url, b.base_url)
        args = ["ladder", "run", str(ladder), "--task", "gsm8k", "--limit", "30", "--data", GSM8K_TEST,
                "--db", db_path, "--no-progress", "--speed", "2"]
        first = run_cli(*args, "--json")
        assert first.exit_code == 1  # one step failed
        steps = {s["step"]: s for s in json.loads(first.stdout)["steps"]}
        assert steps["broken"]["error"] is not None and "CUDA out of memory" in steps["broken"]["error"]
        assert steps["bf16"]["error"] is None and steps["int4"]["error"] is None
        # each long part was announced on stderr, with the log it writes to
        broken_log = tmp_path / "home" / "logs" / "broken.log"
        assert f"evalsvc: starting step 'broken' (its server, until http://127.0.0.1:9/v1/models answers): " \
               f"at most 20s, its start timeout; log: {broken_log}" in first.stderr
        assert "evalsvc: evaluating step 'bf16' on gsm8k (the first 30 items): no timing on this machine yet" \
            in first.stderr
        assert "evalsvc: done timing step 'int4' at batch 1 in " in first.stderr
        assert "evalsvc: done starting step 'broken'" not in first.stderr
        assert first.stderr.splitlines()[-1].startswith("error: 1 of 3 steps did not start (broken); what the "
                                                        "others evaluated is stored")
        # status lines while evaluating count what the store holds so far
        store, bf16 = open_store(db_path), load_ladder(ladder).step("bf16")
        spec = step_spec(bf16, "gsm8k", LadderPlan(tasks=("gsm8k",), limits={"gsm8k": 30}))
        assert heartbeat(evaluation_step(store, bf16, spec, tmp_path), 75).endswith("1m15s elapsed; 30 of 30 items stored")
        store.dispose()
        report = json.loads(first.stdout)["report"]
        assert [(c["step_a"], c["step_b"]) for c in report["comparisons"]] == [("bf16", "int4")]
        # 30 items, then a warm-up and 2 timed prompts for each of math and chat.
        assert len(a.requests) == 36 and len(b.requests) == 36
        (lengths,) = report["lengths"]
        assert (lengths["step_a"], lengths["step_b"], lengths["n_paired"]) == ("bf16", "int4", 30)
        assert lengths["answers_changed"] == sum(wrong_when(q) for q in list(gsm8k_answers())[:30])
        (decision,) = report["decisions"]
        workloads = {w["workload"]: w for w in decision["workloads"]}
        # Both steps' speeds were measured and used (two timed prompts on a busy machine: the time ratio, and so
        # whether B is stopped or not settled, varies); 30 items cannot settle a 2-point margin, so B is never taken.
        for name in ("math", "chat"):
            assert workloads[name]["time_ratio"] is not None
            assert workloads[name]["decision"] in ("stop at A", "can't tell yet")
            assert [r["kind"] for r in workloads[name]["reasons"]][0] == "accuracy_inconclusive"

        second = run_cli(*args)
        assert len(a.requests) == 36 and len(b.requests) == 36  # nothing redone, not even the speed probe
        assert "step bf16: runs 1 (stored, reused: gsm8k)" in second.output
        assert "step broken: failed to start" in second.output
        assert "Cochran's Q" in second.output


def test_a_ladder_with_one_step_with_results_runs_and_says_there_is_nothing_to_compare(
    tmp_path: Path, db_path: str
) -> None:
    with FakeOpenAI(gsm8k_oracle(wrong_when)) as a:
        ladder = write_ladder(tmp_path / "ladder.yaml", a.base_url, a.base_url)
        text = (tmp_path / "ladder.yaml").read_text()
        (tmp_path / "ladder.yaml").write_text(text[: text.index("  - name: int4")])  # bf16, broken
        args = ["ladder", "run", str(ladder), "--task", "gsm8k", "--limit", "5", "--data", GSM8K_TEST,
                "--db", db_path, "--no-progress"]
        as_text = run_cli(*args)
        as_json = run_cli(*args, "--json")
    assert as_text.exit_code == 1 and as_json.exit_code == 1  # the broken step failed to start
    assert "step bf16: runs 1" in as_text.output
    assert "fewer than two steps have results: nothing to compare" in as_text.output
    out = json.loads(as_json.stdout)
    assert out["report"] is None and [s["step"] for s in out["steps"]] == ["bf16", "broken"]


def two_step_ladder(path: Path, a: str, b: str) -> Path:
    path.write_text(f"name: two\nsteps:\n  - name: base\n    base_url: {a}\n    model: fake-model\n"
                    f"  - name: deep\n    base_url: {b}\n    model: fake-model\n")
    return path


def test_the_demo_says_in_one_line_which_steps_chat_answers_ran_to_the_cap(tmp_path: Path, db_path: str) -> None:
    ended, cut = Reply("It ends here."), Reply("again " * 40, finish_reason="length", completion_tokens=512)
    with FakeOpenAI(lambda body: ended) as a, FakeOpenAI(lambda body: cut if body["max_tokens"] > 16 else ended) as b:
        ladder, store = load_ladder(two_step_ladder(tmp_path / "ladder.yaml", a.base_url, b.base_url)), open_store(db_path)
        assert chat_cut_line(store, ["base", "deep"]) is None  # nothing measured yet: no line
        plan = replace(demo_plan(False, None, "process", 384), tasks=(), speed_workloads=("chat",))
        assert [o.error for o in run_ladder(store, ladder, plan, tmp_path / "logs", progress=False)] == [None, None]
        line = chat_cut_line(store, ["base", "deep"])
        assert line is not None and "\n" not in line
        assert line.startswith(f"chat: can't tell yet next to deep: {DEMO_SPEED_N} of {DEMO_SPEED_N} answers of deep ran to "
                               f"the chat probe's {DEMO_CHAT_MAX_TOKENS}-token cap without ending")
        assert "what would settle it" in line and "--endpoint deep --workload chat" in line and "base" not in line
        (pair,) = build_ladder(store, ["base", "deep"]).decisions
        (chat,) = [w for w in pair.workloads if w.workload == "chat"]
        assert chat.truncated == (0, DEMO_SPEED_N)  # the line counts what the decision counts
        record_speed_by_hand(store, "deep", "chat", 40.0, 0.1, "vendor table")  # no measured probe of b: no lengths
        assert chat_cut_line(store, ["base", "deep"]) is None
        store.dispose()


def test_a_stored_chat_probe_is_reused_only_when_its_cap_covers_the_plans(tmp_path: Path, db_path: str) -> None:
    """A probe measured with a lower cap may have cut the answers the chat decision pairs (the demo's at 128 did):
    it is measured again with the plan's cap; one with the same or a higher cap, or a speed entered by hand,
    stands."""
    with FakeOpenAI() as server:
        (tmp_path / "ladder.yaml").write_text(f"name: caps\nsteps:\n  - name: step\n    base_url: {server.base_url}\n"
                                              "    model: fake-model\n")
        ladder, store = load_ladder(tmp_path / "ladder.yaml"), open_store(db_path)

        def probe(cap: int) -> list[int]:
            before = len(server.requests)
            plan = LadderPlan(tasks=(), speed_workloads=("chat",), speed_n=2, speed_max_tokens=16,
                              speed_caps={"chat": cap})
            (outcome,) = run_ladder(store, ladder, plan, tmp_path / "logs", progress=False)
            assert outcome.error is None
            return [body["max_tokens"] for body in server.requests[before:]]

        assert probe(128) == [WARMUP_MAX_TOKENS, 128, 128]
        assert probe(128) == [] and probe(64) == []
        assert probe(512) == [WARMUP_MAX_TOKENS, 512, 512]
        record_speed_by_hand(store, "step", "chat", 40.0, 0.1, "vendor table")
        assert probe(4096) == []
        store.dispose()
