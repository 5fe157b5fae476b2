"""A stand-in for the engine venv's python, so the engine build path runs without compiling llama.cpp.

Installed as `<EVALSVC_HOME>/engine-venv/bin/python` by the tests. It answers the
probe (`-c ...`) with "nothing installed"; `-m pip wheel ... -w DIR` writes
compiler-like lines to its output (the build log) until the file named by
$STANDIN_RELEASE exists, then leaves a wheel in DIR; `-m pip install` fails.
"""

import json
import os
import sys
import time
from pathlib import Path

DEADLINE_S = 120.0  # never hang a test run: give up and fail the build


def probe() -> int:
    print(json.dumps({"purelib": os.environ.get("STANDIN_PURELIB", "/nonexistent"), "llama_cpp": None,
                      "server": False, "ggufs": []}))
    return 0


def build(args: list[str]) -> int:
    wheels = Path(args[args.index("-w") + 1])
    version = next(a for a in args if a.startswith("llama-cpp-python==")).split("==")[1]
    release = Path(os.environ["STANDIN_RELEASE"])
    started = time.monotonic()
    step = 0
    while not release.exists():
        if time.monotonic() - started > DEADLINE_S:
            print("stand-in build: never released", flush=True)
            return 3
        step += 1
        print(f"[{step}/400] Building C object vendor/llama.cpp/ggml-{step}.c.o", flush=True)
        time.sleep(0.05)
    (wheels / f"llama_cpp_python-{version}-py3-none-linux_x86_64.whl").write_bytes(b"stand-in")
    print("Successfully built llama-cpp-python", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["-c"]:
        return probe()
    if argv[:3] == ["-m", "pip", "wheel"]:
        return build(argv[3:])
    print(f"stand-in engine python cannot run {' '.join(argv[:3])}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
