"""The SGLang GPU ladder against the launch flags of the SGLang version it names.

`evalsvc/ladder/builtin/sglang_server_args.json` holds every flag of one SGLang
release as its own argument parser defines it (see
tools/record_sglang_server_args.py). A flag, a value outside a flag's choices,
a value of the wrong type, or a step that changes more than one thing fails
here, before anyone spends GPU time finding out.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from evalsvc.ladder.file import load_ladder

ROOT = Path(__file__).resolve().parents[2]
LADDERS = ROOT / "evalsvc" / "ladder" / "builtin"
LADDER_FILES = ("sglang-gpu.yaml", "sglang-hopper.yaml")
RECORDED = json.loads((LADDERS / "sglang_server_args.json").read_text(encoding="utf-8"))
VERSION = RECORDED["sglang_version"]
LAUNCHER = ("python", "-m", "sglang.launch_server")
PLACEHOLDER = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# Values the user fills in; every other value must be a literal the test can check.
USER_PLACEHOLDERS = {"CUSTOM_DRAFT_ATTENTION_BACKEND"}

# Held on every step, so that no step changes them implicitly.
HELD = {
    "--served-model-name": "qwen3-30b-a3b",
    "--reasoning-parser": "qwen3",
    "--dtype": "bfloat16",
    "--mem-fraction-static": "0.8",
    "--max-running-requests": "48",
    "--enable-metrics": None,
}


class Expected(NamedTuple):
    """What one ladder file must hold: its GPU's attention kernel and page size, and its 4-bit-or-8-bit step."""

    attention: str
    page_size: str
    quantization: str
    quantized_changes: frozenset[str]
    model_paths: tuple[str, str]  # BF16 step, quantized steps


EXPECTED = {
    "sglang-gpu.yaml": Expected("trtllm_mha", "64", "modelopt_fp4", frozenset({"--model-path", "--quantization"}),
                                ("Qwen/Qwen3-30B-A3B", "nvidia/Qwen3-30B-A3B-FP4")),
    "sglang-hopper.yaml": Expected("fa3", "1", "fp8", frozenset({"--quantization"}),
                                   ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B")),
}


class Problem(NamedTuple):
    step: str
    text: str


def flag_values(argv: tuple[str, ...], step: str, recorded: dict[str, Any] = RECORDED) -> tuple[dict, list]:
    """{flag: value or None} of a launch command after the launcher, and the problems found in it."""
    flags = recorded["flags"]
    values: dict[str, str | None] = {}
    problems: list[Problem] = []
    args = list(argv[len(LAUNCHER):])
    while args:
        flag = args.pop(0)
        spec = flags.get(flag)
        if not flag.startswith("--"):
            problems.append(Problem(step, f"stray argument {flag!r} where a flag was expected"))
            continue
        if spec is None:
            problems.append(Problem(step, f"{flag!r} is not a flag of SGLang {recorded['sglang_version']}"))
            if args and not args[0].startswith("--"):
                args.pop(0)  # its value, whatever it was meant to be
            continue
        if spec["deprecated"]:
            problems.append(Problem(step, f"{flag} is deprecated in SGLang {recorded['sglang_version']}"))
        if flag in values:
            problems.append(Problem(step, f"{flag} is given twice"))
        value = None
        if spec["takes_value"]:
            if not args or args[0].startswith("--"):
                problems.append(Problem(step, f"{flag} needs a value"))
                continue
            value = args.pop(0)
            problems.extend(Problem(step, text) for text in check_value(flag, value, spec, recorded))
        values[flag] = value
    return values, problems


def check_value(flag: str, value: str, spec: dict[str, Any], recorded: dict[str, Any]) -> list[str]:
    """Why `value` is not accepted for `flag` (empty when it is)."""
    placeholder = PLACEHOLDER.match(value)
    if placeholder:
        name = placeholder.group(1)
        return [] if name in USER_PLACEHOLDERS else [f"{flag} has an unexpected placeholder ${{{name}}}"]
    problems = []
    if spec["choices"] is not None and value not in spec["choices"]:
        problems.append(f"{flag} {value!r} is not one of SGLang's choices {spec['choices']}")
    later = recorded["resolution_choices"].get(flag)
    if later is not None and value.upper() not in later["choices"] and value not in later["choices"]:
        problems.append(f"{flag} {value!r} is not one of {later['choices']} ({later['checked_by']})")
    converters = {"int": int, "float": float}
    if spec["type"] in converters:
        try:
            converters[spec["type"]](value)
        except ValueError:
            problems.append(f"{flag} {value!r} is not a {spec['type']}")
    return problems


def steps_flags(file: str) -> list[tuple[str, dict[str, str | None]]]:
    ladder = load_ladder(LADDERS / file)
    result = []
    for step in ladder.steps:
        assert step.launch is not None, step.name
        values, problems = flag_values(step.launch.command, step.name)
        assert problems == [], problems
        result.append((step.name, values))
    return result


def changed(before: dict[str, str | None], after: dict[str, str | None]) -> set[str]:
    return {f for f in before.keys() | after.keys() if before.get(f, "<absent>") != after.get(f, "<absent>")}


# ---------------------------------------------------------------- the recorded flags


def test_recorded_flags_name_their_version_and_origin() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    source = RECORDED["source"]
    assert source["wheel"].startswith(f"sglang-{VERSION}-") and re.fullmatch(r"[0-9a-f]{64}", source["wheel_sha256"])
    assert "add_cli_args" in source["how"]
    # A recording that lost the parser would be nearly empty; 0.5.23 has 561 option strings.
    assert len(RECORDED["flags"]) > 400
    assert RECORDED["flags"]["--reasoning-parser"]["choices"].count("qwen3") == 1


@pytest.mark.parametrize("file", LADDER_FILES)
def test_ladder_file_names_the_recorded_version_everywhere(file: str) -> None:
    text = (LADDERS / file).read_text(encoding="utf-8")
    named = set(re.findall(r"(?i)sglang (\d+\.\d+\.\d+)", text))
    assert named == {VERSION}
    for step in load_ladder(LADDERS / file).steps:
        assert step.metadata["engine"] == f"sglang {VERSION}", step.name
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert extras["sglang"] == [f"sglang=={VERSION}"]


# ---------------------------------------------------------------- every flag and value is SGLang's


@pytest.mark.parametrize("file", LADDER_FILES)
def test_every_flag_and_value_is_in_the_recorded_server_args(file: str) -> None:
    steps = steps_flags(file)
    assert len(steps) == 5
    for name, _ in steps:
        command = load_ladder(LADDERS / file).step(name).launch.command  # type: ignore[union-attr]
        assert command[: len(LAUNCHER)] == LAUNCHER


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("--model-path m --atention-backend trtllm_mha", "'--atention-backend' is not a flag"),
        ("--model-path m --attention-backend trtllm_mla_x", "is not one of SGLang's choices"),
        ("--model-path m --reasoning-parser qwen4", "is not one of SGLang's choices"),
        ("--model-path m --page-size sixty-four", "is not a int"),
        ("--model-path m --mem-fraction-static high", "is not a float"),
        ("--model-path m --speculative-algorithm EAGLE4", "SpeculativeAlgorithm.from_string"),
        ("--model-path m --speculative-draft-attention-backend trtllm_mla", "resolve_draft_worker_attention_backend"),
        ("--model-path m --speculative-draft-model-quantization", "needs a value"),
        ("--model-path m --port 1 --port 2", "given twice"),
        ("--model-path m --enable-metrics yes", "stray argument 'yes'"),
        ("--model-path m --disable-cuda-graph", "deprecated"),
        ("--model-path m --page-size ${PAGE}", "unexpected placeholder ${PAGE}"),
    ],
)
def test_the_check_rejects_what_sglang_would_reject(args: str, expected: str) -> None:
    _, problems = flag_values(LAUNCHER + tuple(shlex.split(args)), "s")
    assert len(problems) == 1 and expected in problems[0].text, problems


def test_the_check_accepts_case_insensitive_algorithm_and_the_user_placeholder() -> None:
    args = "--speculative-algorithm eagle3 --speculative-draft-attention-backend ${CUSTOM_DRAFT_ATTENTION_BACKEND}"
    values, problems = flag_values(LAUNCHER + tuple(shlex.split(args)), "s")
    assert problems == []
    assert values["--speculative-algorithm"] == "eagle3"


# ---------------------------------------------------------------- one change per step


@pytest.mark.parametrize("file", LADDER_FILES)
def test_each_step_changes_one_thing(file: str) -> None:
    expected = EXPECTED[file]
    steps = steps_flags(file)
    ports = [values.pop("--port") for _, values in steps]
    assert len(set(ports)) == len(ports)
    (_, bf16), (_, quantized), (_, eagle), (_, custom), (_, fp8kv) = steps
    # The weights: NVFP4 (a ModelOpt checkpoint) on Blackwell, FP8 (quantized at load) on Hopper.
    assert changed(bf16, quantized) == expected.quantized_changes
    assert (bf16["--model-path"], quantized["--model-path"]) == expected.model_paths
    assert "--quantization" not in bf16 and quantized["--quantization"] == expected.quantization
    # Speculative decoding, and only its own settings.
    added = changed(quantized, eagle)
    assert added and all(f.startswith("--speculative-") for f in added) and set(quantized) <= set(eagle)
    assert eagle["--speculative-algorithm"] == "EAGLE3"
    assert eagle["--speculative-draft-model-quantization"] == "unquant"
    assert eagle["--speculative-eagle-topk"] == "1"  # trtllm_mha accepts top-k 1 only
    # The custom kernel: the draft's attention backend, filled in by the user.
    assert changed(eagle, custom) == {"--speculative-draft-attention-backend"}
    assert custom["--speculative-draft-attention-backend"] == "${CUSTOM_DRAFT_ATTENTION_BACKEND}"
    # Deeper quantization: the target's KV cache, with the draft's held.
    assert changed(custom, fp8kv) == {"--kv-cache-dtype"}
    assert (custom["--kv-cache-dtype"], fp8kv["--kv-cache-dtype"]) == ("bf16", "fp8_e4m3")
    assert fp8kv["--speculative-draft-kv-cache-dtype"] == "bf16"


@pytest.mark.parametrize("file", LADDER_FILES)
def test_what_sglang_would_change_implicitly_is_held_on_every_step(file: str) -> None:
    expected = EXPECTED[file]
    held = {**HELD, "--attention-backend": expected.attention, "--page-size": expected.page_size}
    for name, values in steps_flags(file):
        for flag, value in held.items():
            assert flag in values and values[flag] == value, (name, flag)
        assert "--enable-deterministic-inference" not in values, name


@pytest.mark.parametrize("file", LADDER_FILES)
def test_placeholder_must_be_set_before_the_ladder_runs(file: str) -> None:
    from evalsvc.ladder.file import LadderError, resolve_ladder

    ladder = load_ladder(LADDERS / file)
    assert ladder.placeholders() == USER_PLACEHOLDERS
    with pytest.raises(LadderError, match=r"CUSTOM_DRAFT_ATTENTION_BACKEND.*not defined"):
        resolve_ladder(ladder, {})
    resolved = resolve_ladder(ladder, {"CUSTOM_DRAFT_ATTENTION_BACKEND": "flashinfer"})
    for step in resolved.steps[3:]:
        _, problems = flag_values(step.launch.command, step.name)  # type: ignore[union-attr]
        assert problems == [] and "flashinfer" in step.launch.command  # type: ignore[union-attr]
