"""evalsvc: evaluates each step of an inference-optimization ladder and says whether to take it.

One folder per concept, each importing only those before it: `statistics` (pure), `decision` (verdicts and
decisions), `report` (words and tables), `run` (the runner, speed, status lines), `ladder` (files, launching,
ladder runs), `engine` (the embedded engine and the demo), then `doctor` and the `cli`.
"""


def tool_version() -> str:
    """This evalsvc's version, as installed ("unknown" in a source checkout that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("evalsvc")
    except PackageNotFoundError:
        return "unknown"
